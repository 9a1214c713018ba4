"""Helpers of compiled loops (:mod:`timerl.runtime.loops`), cached on disk by numba once per
machine and types: a loop's compile links them instead of compiling their numpy semantics again.

``put(dst, src)`` writes a value into a row of a block array. numba's array assignment checks the
shapes and formats its message with the shapes (about 3.5 s of compile, once per process, in a
function that assigns an array into a slice); here that code is compiled once and cached.

``kcall(address, sig, args)`` calls a statement kernel through the address of its compiled code
(:func:`address`, :func:`signature`) instead of by name. A call by name links the kernel's LLVM
module into the caller's, and LLVM optimizes and compiles every linked kernel again inside each
loop function: PPO's learner loop (11 kernels, 1,734 lines) took 151 s to compile, 126 s of it in
LLVM over its kernels' code. Through the address, the loop's module holds only its own code; the
call is numba's native call (the same as by name: its arguments borrowed, its result owned, its
exception propagated to the loop's caller), about 0.05 us.
"""

import numba
from numba import types
from numba.core import cgutils, errors
from numba.extending import intrinsic


@numba.njit(cache=True, error_model="numpy", boundscheck=False)
def put(dst, src):
    dst[...] = src


def _compiled(kernel):
    """The one compile result of a kernel (compiled for its signature, then closed)."""
    (sig,) = kernel.signatures
    return kernel.overloads[sig]


def address(kernel) -> int:
    """The address of a kernel's compiled function (numba's native calling convention)."""
    cres = _compiled(kernel)
    return cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name)


def signature(kernel):
    """``Tuple((return type, Tuple(argument types)))``: the kernel's signature as one numba type,
    which a loop module holds as a global (numba types it as a type reference)."""
    sig = _compiled(kernel).signature
    return types.Tuple((sig.return_type, types.Tuple(sig.args)))


@intrinsic
def kcall(typingctx, addr, sigref, args):
    ret, params = sigref.instance_type.types
    if len(args.types) != len(params.types):
        raise errors.TypingError(f"a kernel of {len(params.types)} arguments called with {len(args.types)}")
    for j, (a, p) in enumerate(zip(args.types, params.types)):
        if a != p and typingctx.can_convert(a, p) is None:
            raise errors.TypingError(f"argument {j} of a kernel: {a} does not convert to {p}")

    def codegen(context, builder, sig, llargs):
        vals = cgutils.unpack_tuple(builder, llargs[2], len(args.types))
        vals = [context.cast(builder, v, a, p) for v, a, p in zip(vals, args.types, params.types)]
        fnty = context.call_conv.get_function_type(ret, params.types)
        fn = builder.inttoptr(llargs[0], fnty.as_pointer())
        status, res = context.call_conv.call_function(builder, fn, ret, params.types, vals)
        with cgutils.if_unlikely(builder, status.is_error):
            context.call_conv.return_status_propagate(builder, status)
        return res

    return ret(addr, sigref, args), codegen
