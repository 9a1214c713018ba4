"""tl.nn modules and tl.distributions against numpy."""

import math

import numpy as np
import pytest

import timerl as tl
from test_grad_util import check_grad
from timerl.nn import orthogonal

rng = np.random.default_rng(4)


def run_sinks(prog, bounds, **named):
    out = {k: {} for k in named}
    with prog:
        for k, x in named.items():
            tl.sink(x, (lambda d: lambda v, p: d.__setitem__(tuple(p.values()), np.array(v, copy=True)))(out[k]))
    prog.compile(bounds, backend="reference").run()
    return out


@pytest.mark.parametrize("shape", [(4, 4), (3, 5), (6, 2)])
def test_orthogonal_init(shape):
    w = orthogonal(shape, gain=2.0, rng=np.random.default_rng(0))
    assert w.shape == shape
    small = min(shape)
    gram = w.T @ w if shape[0] >= shape[1] else w @ w.T
    np.testing.assert_allclose(gram, 4.0 * np.eye(small), atol=1e-10)
    np.testing.assert_array_equal(w, orthogonal(shape, gain=2.0, rng=np.random.default_rng(0)))


def test_linear_and_mlp_forward_against_numpy():
    prog = tl.Program("i t")
    i, t = prog.dims
    obs = rng.normal(size=(2, 3, 4)).astype("float32")
    with prog:
        net = tl.nn.MLP([4, 8, 8, 2], activation="tanh", domain=(i,), seed=7)
        relu = tl.nn.MLP([4, 5, 1], activation="relu", domain=(i,), seed=1, out_gain=0.01)
        x = tl.tensor(obs, (i, t))
        y, z = net(x), relu(x)
        assert y.domain == (i, t) and tuple(y.shape) == (2,)
        params = net.parameters()
        assert len(params) == 6 and all(p.requires_grad for p in params)
        inits = [prog.pdg.rec(prog.pdg.inputs(p.nid)[0][0]).attrs["value"] for p in params]
        rinits = [prog.pdg.rec(prog.pdg.inputs(p.nid)[0][0]).attrs["value"] for p in relu.parameters()]
    out = run_sinks(prog, {"I": 2, "T": 3}, y=y, z=z)
    W1, b1, W2, b2, W3, b3 = inits
    assert np.allclose(W1 @ W1.T, 2.0 * np.eye(4), atol=1e-5)  # gain sqrt(2), orthonormal rows
    assert np.all(b1 == 0)
    for (a, b), v in out["y"].items():
        h = np.tanh(obs[a, b] @ W1 + b1)
        h = np.tanh(h @ W2 + b2)
        np.testing.assert_allclose(v, h @ W3 + b3, rtol=1e-5, atol=1e-6)
        R1, c1, R2, c2 = rinits
        np.testing.assert_allclose(out["z"][(a, b)], np.maximum(obs[a, b] @ R1 + c1, 0) @ R2 + c2, rtol=1e-5,
                                   atol=1e-6)


def test_mlp_gradient_wrt_input():
    def build(prog, xs):
        i, t = prog.dims
        net = tl.nn.MLP([3, 5, 2], domain=(i,), dtype="float64", seed=3)
        return (net(xs["x"]) ** 2).sum()

    check_grad(build, {"x": (rng.normal(size=(2, 2, 3)), ("i", "t"))}, {"I": 2, "T": 2})


def test_module_at_reads_parameters_at_a_point():
    prog = tl.Program("i k")
    i, k = prog.dims
    with prog:
        lin = tl.nn.Linear(2, 2, domain=(i, k), seed=0)
        act = lin.at(k, 0)
        assert act.parameters() == [] and act.weight.domain == (i,)
        y = act(tl.ones((2,)))
        assert y.domain == (i,)


def _np_logsoftmax(z):
    m = z.max(-1, keepdims=True)
    return z - m - np.log(np.exp(z - m).sum(-1, keepdims=True))


def test_categorical_against_numpy_and_stable():
    logits = np.array([[1.0, 2.0, 0.5], [1000.0, -1000.0, 999.0]], dtype="float32")
    prog = tl.Program("t")
    (t,) = prog.dims
    with prog:
        d = tl.distributions.Categorical(tl.tensor(np.stack([logits] * 2), (t,)))
        a = tl.const(np.array([2, 0]))
        s = d.sample()
        lp, ent = d.log_prob(a), d.entropy()
    out = run_sinks(prog, {"T": 2}, lp=lp, ent=ent, s=s)
    lsm = _np_logsoftmax(logits.astype("float64"))
    for k in range(2):
        np.testing.assert_allclose(out["lp"][(k,)], lsm[[0, 1], [2, 0]], rtol=1e-5, atol=2e-4)  # float32 at 1000
        np.testing.assert_allclose(out["ent"][(k,)], -(np.exp(lsm) * lsm).sum(-1), rtol=1e-5, atol=1e-4)
        assert np.all(np.isfinite(out["ent"][(k,)]))
        assert out["s"][(k,)].dtype == np.int64 and out["s"][(k,)].shape == (2,)


def test_categorical_sample_frequencies():
    probs = np.array([0.2, 0.5, 0.3])
    prog = tl.Program("t")
    (t,) = prog.dims
    with prog:
        d = tl.distributions.Categorical(tl.const(np.log(probs), dtype="float64"))
        s = d.sample(domain=(t,)).reshape(1)
    out = run_sinks(prog, {"T": 2000}, s=s)
    counts = np.bincount([int(v[0]) for v in out["s"].values()], minlength=3) / 2000
    np.testing.assert_allclose(counts, probs, atol=0.04)


def test_normal_against_numpy():
    mean = rng.normal(size=(2, 3))  # T = 2 points of shape (3,)
    log_std = rng.normal(size=(3,)) * 0.3
    a = rng.normal(size=(2, 3))
    prog = tl.Program("t")
    (t,) = prog.dims
    with prog:
        d = tl.distributions.Normal(tl.tensor(mean, (t,)), tl.const(log_std, dtype="float64"))
        samples = d.sample()
        lp, ent = d.log_prob(tl.tensor(a, (t,))), d.entropy()
    out = run_sinks(prog, {"T": 2}, lp=lp, ent=ent, s=samples)
    std = np.exp(log_std)
    for k in range(2):
        want = -((a[k] - mean[k]) ** 2) / (2 * std**2) - log_std - 0.5 * math.log(2 * math.pi)
        np.testing.assert_allclose(out["lp"][(k,)], want, rtol=1e-10)
        np.testing.assert_allclose(out["ent"][(k,)], 0.5 + 0.5 * math.log(2 * math.pi) + log_std, rtol=1e-10)
        assert out["s"][(k,)].shape == (3,)


def test_samples_carry_no_gradient():
    prog = tl.Program("t")
    (t,) = prog.dims
    got = {}
    with prog:
        mean = tl.tensor(np.zeros((2, 3)), (t,), name="mean")
        d = tl.distributions.Normal(mean, tl.const(np.zeros(3), dtype="float64"))
        (g,) = tl.grad(d.sample().sum(), [mean])
        tl.sink(g, lambda v, p: got.__setitem__(p["t"], v.copy()))
    prog.compile({"T": 2}, backend="reference").run()
    assert all(np.all(v == 0) for v in got.values())
