"""timerl: deep RL programs as recurrence equations over recurrent tensors, compiled whole.

    import timerl as tl
    prog = tl.Program("i t")
"""

from .errors import ArgTypeError, BudgetError, CompileError, RuntimeFault, ShapeError
from .ir.expr import Bound, Cond, Dim, Expr
from .api.naming import name_scope
from .api.program import Program
from .api.tensor import RecurrentTensor
from .api.ops import (
    arange, broadcast_to, cast, clip, concat, const, dim_value, matmul, maximum, minimum, one_hot,
    ones, permute, placeholder, reshape, squeeze, stack, take, take_along_axis, tensor, unsqueeze,
    where, zeros,
)
from .api.functions import abs, cos, exp, log, max, min, relu, sigmoid, sign, sin, sqrt, tanh
from .api.world import sink, udf
from .api import random
from .api.autodiff import grad
from . import distributions, nn, optim
from . import config
from . import rl

__version__ = "0.1.0"

__all__ = [
    "ArgTypeError", "BudgetError", "CompileError", "RuntimeFault", "ShapeError", "Bound", "Cond", "Dim", "Expr", "Program",
    "RecurrentTensor", "arange", "broadcast_to", "cast", "clip", "concat", "const", "dim_value",
    "matmul", "maximum", "minimum", "one_hot", "ones", "permute", "placeholder", "reshape",
    "squeeze", "stack", "take", "take_along_axis", "tensor", "unsqueeze", "where", "zeros", "abs",
    "exp", "log", "max", "min", "relu", "sigmoid", "sign", "sqrt", "tanh", "sin", "cos", "sink", "udf", "random",
    "config", "grad", "nn", "optim", "distributions", "name_scope",
]
