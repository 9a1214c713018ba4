"""The reuse pass: a learner's forward ops over a rollout block read the acting activations.

Where it fires (op counts of REINFORCE's learner before and after), where it must not (other
parameters, a shifted block, a broadcast that does not stack, an acting op not computed at every
step), and that values hold with it on and off (the reference executor is the oracle; the
verifier runs after every pass)."""

import importlib

import numpy as np
import pytest
from programs import Collect, assert_close

import timerl as tl
from timerl.compiler import optimize
from timerl.ir.ops import Op

R = importlib.import_module("timerl.rl.reinforce")
P = importlib.import_module("timerl.rl.ppo")
common = importlib.import_module("timerl.rl.common")

FORWARD = (Op.MATMUL, Op.BINARY, Op.UNARY)


def optimized(prog, bounds, **switches):
    out, analysis = optimize(prog, bounds, switches, check=True)
    assert sorted(analysis.live) == sorted(out.nodes)
    return out


def ops(pdg, op, dims=None, name=None):
    return [n for n in pdg.nodes if pdg.rec(n).op is op
            and (dims is None or tuple(d.name for d in pdg.rec(n).domain) == dims)
            and (name is None or name in pdg.rec(n).name)]


def _args(mod, **kw):
    base = dict(env="CartPole-v1", num_envs=2, num_steps=4, total_steps=16, backend="numpy", compiled_env=False)
    base.update(kw)
    return common.make_args(mod.Args, base)


# -- a small acting/learning program -----------------------------------------------------------------

I_, T_ = 2, 3


def _program(params="same", block="same", sink_all=True, bias_shape=(5,), axis=1):
    """Acting: ``s[i, t] = tanh(x[i, t] @ W[i] + b).sum(axis=0)``; learning: the same over ``x[i, 0:T]``
    (the sum over ``axis``), at ``W[i]`` (``params="same"``) or ``W[i + 1]`` (``"next"``), on ``x[i, 0:T]``
    or ``x[i, 1:T + 1]`` (``block="shifted"``)."""
    prog = tl.Program("i t")
    (i, t), (I, T) = prog.dims, prog.bounds
    c = Collect()
    rng = np.random.default_rng(0)
    X = rng.standard_normal((I_, T_, 2, 4)).astype("float32")
    with prog:
        xd = tl.tensor(X, (i, t), name="xd")
        x = tl.placeholder((2, 4), "float32", (i, t), name="x")
        x[i, 0] = xd[i, 0]
        x[i, t + 1] = xd[i, t] * 0.5                               # x is defined at t = 0..T
        W = tl.placeholder((4, 5), "float32", (i,), name="W")
        W[0] = tl.const(rng.standard_normal((4, 5)).astype("float32"))
        W[i + 1] = W * 0.9                                          # W is defined at i = 0..I
        b = tl.const(rng.standard_normal(bias_shape).astype("float32"), name="b")
        h = tl.tanh(x @ W + b).sum(axis=0)                          # acting, per (i, t)
        if sink_all:
            tl.sink(h, c("act"))
        else:
            tl.sink(h[i, T - 1], c("act"))
        xb = x[i, 0:T_] if block == "same" else x[i, 1:T_ + 1]
        Wl = W if params == "same" else W[i + 1]
        hb = tl.tanh(xb @ Wl + b).sum(axis=axis)                    # learning, per i, (T, 5) for axis=1
        tl.sink((hb * hb).sum(), c("learn"))
    return prog, {"I": I_, "T": T_}, c


def test_small_program_learner_reads_the_acting_block():
    # vectorize off: here the acting layer is on no cycle, so vectorize would batch it over t too
    prog, bounds, _ = _program()
    off = optimized(prog, bounds, reuse=False, vectorize=False)
    on = optimized(prog, bounds, vectorize=False)
    assert len(ops(off, Op.MATMUL)) == 2 and len(ops(off, Op.UNARY)) == 2
    # the learner's matmul, bias add and tanh are gone; it reads tanh[i, 0:T] of the acting step
    assert len(ops(on, Op.MATMUL)) == 1 and ops(on, Op.MATMUL, ("i", "t"))
    assert len(ops(on, Op.UNARY)) == 1 and ops(on, Op.UNARY, ("i", "t"))
    # the learner's sum over axis 1 of (T, 2, 5) is the acting sum over axis 0 of (2, 5), stacked
    (red,) = ops(on, Op.REDUCE, ("i", "t"))
    assert not [n for n in ops(on, Op.REDUCE, ("i",)) if on.rec(n).attrs["axis"] == (1,)]
    readers = [c for c, _ in on.consumers(red) if on.rec(c).op is Op.ACCESS]
    assert len(readers) == 1
    (e,) = [e for _, e in on.inputs(readers[0])]
    assert str(e.index[1]) == "0:3" and on.rec(readers[0]).shape == (3, 5)


def test_a_fixed_operand_of_full_rank_broadcasts_the_same_at_every_step():
    prog, bounds, _ = _program(bias_shape=(2, 5))
    on = optimized(prog, bounds, vectorize=False)
    assert not ops(on, Op.MATMUL, ("i",))
    prog, bounds, want = _program(bias_shape=(2, 5))
    prog.compile(bounds, backend="reference").run()
    prog, bounds, got = _program(bias_shape=(2, 5))
    prog.compile(bounds, backend="numpy").run()
    assert_close(got, want)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("on", [True, False])
def test_small_program_values(backend, on):
    prog, bounds, want = _program()
    prog.compile(bounds, backend="reference").run()
    prog, bounds, got = _program()
    prog.compile(bounds, backend=backend, passes={"reuse": on}).run()
    assert_close(got, want)


@pytest.mark.parametrize("kw", [dict(params="next"), dict(block="shifted"), dict(sink_all=False), dict(axis=0)],
                         ids=["params_at_i+1", "block_1:T+1", "acting_not_at_every_t", "sum_over_the_block_axis"])
def test_not_rewritten(kw):
    prog, bounds, _ = _program(**kw)
    # incrementalize off: it would turn the sum over the reused block into a running sum
    off = optimized(prog, bounds, reuse=False, vectorize=False, incrementalize=False)
    on = optimized(prog, bounds, vectorize=False, incrementalize=False)
    if kw.get("axis") == 0:   # the layer is reused; the sum over the steps is not the acting sum
        assert not ops(on, Op.MATMUL, ("i",))
        assert [n for n in ops(on, Op.REDUCE, ("i",)) if on.rec(n).attrs["axis"] == (0,)]
    else:
        assert sorted(on.nodes) == sorted(off.nodes)
        assert len(ops(on, Op.MATMUL, ("i",))) == 1
    prog, bounds, want = _program(**kw)
    prog.compile(bounds, backend="reference").run()
    prog, bounds, got = _program(**kw)
    prog.compile(bounds, backend="numpy").run()
    assert_close(got, want)


# -- REINFORCE -----------------------------------------------------------------------------------


def test_reinforce_learner_forward_disappears():
    prog, bounds, _ = R.build(_args(R))
    off = optimized(prog, bounds, reuse=False)
    prog, bounds, _ = R.build(_args(R))
    on = optimized(prog, bounds)
    fwd = lambda g, dims: sorted(g.rec(n).name.split(" (")[0] for op in FORWARD for n in ops(g, op, dims, "actor."))
    # the learner's forward pass over the rollout: 3 matmuls, 3 bias adds, 2 tanh per iteration
    assert fwd(off, ("i",)) == sorted(["reinforce.actor.layer0.matmul", "reinforce.actor.layer0.add",
                                       "reinforce.actor.tanh", "reinforce.actor.layer1.matmul",
                                       "reinforce.actor.layer1.add", "reinforce.actor.tanh",
                                       "reinforce.actor.layer2.matmul", "reinforce.actor.layer2.add"])
    assert fwd(on, ("i",)) == []
    assert fwd(on, ("i", "t")) == fwd(off, ("i", "t"))                    # acting is untouched
    assert len(ops(on, Op.MATMUL)) == len(ops(off, Op.MATMUL)) - 3        # the backward matmuls stay
    # the backward pass reads the acting activations as blocks: both tanh layers and the logits
    blocks = sorted(on.rec(p).name.split(" (")[0] for n in ops(on, Op.ACCESS, ("i",)) for p, _ in on.inputs(n)
                    if tuple(d.name for d in on.rec(p).domain) == ("i", "t") and on.rec(p).op is not Op.MERGE
                    and on.rec(p).op is not Op.RANDOM)
    assert blocks == ["reinforce.actor.layer2.add", "reinforce.actor.tanh", "reinforce.actor.tanh"]


def _history(build, args, backend, passes=None, keys=("loss", "entropy")):
    prog, bounds, h = build(args)
    prog.compile(bounds, backend=backend, seed=args.seed, passes=passes).run()
    return np.array([[r[k] for k in keys] for r in h.rows], dtype=float)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_reinforce_values_with_and_without(backend):
    args = _args(R, num_steps=4, total_steps=24)
    want = _history(R.build, args, "reference")
    for on in (True, False):
        got = _history(R.build, args, backend, {"reuse": on})
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


def _ppo(epochs, minibatches, reuse=True, rows=True, shuffle=True):
    prog, bounds, _ = P.build(_args(P, epochs=epochs, minibatches=minibatches, shuffle_whole_batch=shuffle))
    return optimized(prog, bounds, reuse=reuse, reuse_rows=rows)


def test_ppo_one_epoch_one_minibatch_learner_reads_the_acting_block():
    """θ[i, 0] is θ@acting[i] (the same merge branches), and the shuffled minibatch is a gather of rows
    of the rollout, which commutes with the row-wise layers: both forward passes become gathers."""
    off, on = _ppo(1, 1, reuse=False), _ppo(1, 1)
    fwd = lambda g: sorted(g.rec(n).name.split(" (")[0] for op in FORWARD for n in ops(g, op, ("i", "k"))
                           if ".layer" in g.rec(n).name or "tanh" in g.rec(n).name)
    assert len(fwd(off)) == 16 and fwd(on) == []          # actor and critic: 3 matmuls, 3 adds, 2 tanh each
    assert len(ops(on, Op.MATMUL)) == len(ops(off, Op.MATMUL)) - 6
    # what the backward pass reads instead: a take of the rows of the acting block, per update
    def gathered(n):
        """The name of the per-step tensor whose rollout take ``n`` gathers rows of, or None."""
        (x, _), _ = on.inputs(n)
        if on.rec(x).op is not Op.RESHAPE or tuple(d.name for d in on.rec(x).domain) != ("i",):
            return None
        ((a, _),) = on.inputs(x)
        if on.rec(a).op is Op.ACCESS:   # the block A[i, 0:T]; vectorize drops it when it batches A itself
            ((a, _),) = on.inputs(a)
        return on.rec(a).name.split(" (")[0]

    got = sorted(x for x in map(gathered, ops(on, Op.TAKE, ("i", "k")))
                 if x and x.startswith(("ppo.actor", "ppo.critic", "ppo.Categorical.log_probs", "ppo.v")))
    # ppo.v twice: the minibatch's old values mb_v, and new_v, which at θ@acting is the same gather;
    # the log-softmax is the acting one too (the logits themselves are then read by nobody)
    assert got == ["ppo.Categorical.log_probs", "ppo.actor.tanh", "ppo.actor.tanh", "ppo.critic.tanh",
                   "ppo.critic.tanh", "ppo.v", "ppo.v"]


def test_ppo_one_minibatch_in_rollout_order_reads_the_acting_block_by_default():
    """Unshuffled (PPO's default with one minibatch), the learner's operands are the rollout blocks
    merged into rows, a view: both forward passes become that reshape of the acting block, with no take
    and without the ``reuse_rows`` option."""
    off, on = _ppo(1, 1, reuse=False, rows=False, shuffle=False), _ppo(1, 1, rows=False, shuffle=False)
    fwd = lambda g: sorted(g.rec(n).name.split(" (")[0] for op in FORWARD for n in ops(g, op, ("i", "k"))
                           if ".layer" in g.rec(n).name or "tanh" in g.rec(n).name)
    assert len(fwd(off)) == 16 and fwd(on) == []          # actor and critic: 3 matmuls, 3 adds, 2 tanh each
    assert len(ops(on, Op.MATMUL)) == len(ops(off, Op.MATMUL)) - 6
    rows = lambda g: [n for n in ops(g, Op.TAKE, ("i", "k"))   # noqa: E731  takes of rows (not the action's logit)
                      if g.rec(n).attrs.get("axis") == 0 and not g.rec(n).attrs.get("along")]
    assert rows(on) == rows(off) == []

    def merged(n):
        """The acting node whose rollout block reshape ``n`` (over (i, k)) merges into rows, or None: the
        block ``A[i, 0:T]`` of a per-step node, or a node vectorize already batched over ``t``."""
        ((x, _),) = on.inputs(n)
        dims = lambda m: tuple(d.name for d in on.rec(m).domain)  # noqa: E731
        if on.rec(x).op is Op.ACCESS and dims(x) == ("i",):
            ((x, _),) = on.inputs(x)
            return x if dims(x) == ("i", "t") else None
        return x if dims(x) == ("i",) and on.rec(x).op is not Op.MERGE else None

    sources = {x for x in map(merged, ops(on, Op.RESHAPE, ("i", "k"))) if x is not None}
    got = sorted(on.rec(x).name.split(" (")[0] for x in sources)
    # both layers of each net, the acting log-softmax (batched over t by vectorize), and the acting
    # values V(o) (new_v at θ@acting; the minibatch's old values read the same block)
    assert got == ["ppo.Categorical.log_probs", "ppo.actor.tanh", "ppo.actor.tanh", "ppo.critic.tanh",
                   "ppo.critic.tanh", "ppo.v"]


def test_ppo_gather_of_rows_is_an_option_off_by_default():
    # through the shuffle's gather of rows the rewrite measured slower on numba: only on request
    default, off = _ppo(1, 1, rows=False), _ppo(1, 1, reuse=False)
    for op in FORWARD + (Op.REDUCE, Op.TAKE):
        assert len(ops(default, op, ("i", "k"))) == len(ops(off, op, ("i", "k")))


@pytest.mark.parametrize("epochs,minibatches", [(2, 1), (1, 2)])
def test_ppo_later_updates_are_not_at_the_acting_parameters(epochs, minibatches):
    # update k = 1 reads θ[i, 1], one Adam step past the acting parameters: no layer is rewritten
    # (only the action's reshape, which reads no parameter, becomes a gather of the acting one)
    on, off = _ppo(epochs, minibatches), _ppo(epochs, minibatches, reuse=False)
    for op in FORWARD + (Op.REDUCE,):
        assert len(ops(on, op, ("i", "k"))) == len(ops(off, op, ("i", "k")))


def test_ppo_second_epoch_in_rollout_order_is_not_reused():
    # unshuffled, two epochs of one minibatch: update k = 1 runs at θ[i, 1], so the learner's layers,
    # which run at every k, still read the rollout through the block merged into rows but are not
    # the acting ones: none is rewritten
    on, off = _ppo(2, 1, shuffle=False), _ppo(2, 1, reuse=False, shuffle=False)
    for op in FORWARD + (Op.REDUCE,):
        assert len(ops(on, op, ("i", "k"))) == len(ops(off, op, ("i", "k")))


@pytest.mark.parametrize("backend,shuffle,epochs", [("numpy", True, 1), ("numba", True, 1), ("numpy", False, 1),
                                                    ("numba", False, 1), ("numba", False, 2)])
def test_ppo_values_with_and_without(backend, shuffle, epochs):
    args = _args(P, epochs=epochs, minibatches=1, total_steps=24, shuffle_whole_batch=shuffle)
    keys = ("pg_loss", "v_loss", "entropy", "approx_kl")
    want = _history(P.build, args, "reference", keys=keys)
    for on in (True, False):
        got = _history(P.build, args, backend, {"reuse": on, "reuse_rows": on}, keys=keys)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
