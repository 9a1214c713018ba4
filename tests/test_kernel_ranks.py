"""One tensor read by numba chains of different ranks: each chain pads it to its own rank
(the pad shapes once shared one name in the generated source, and the last chain's won)."""

import numpy as np

import timerl as tl


def test_operand_padded_per_chain_rank():
    rng = np.random.default_rng(0)
    b_val = rng.normal(size=(2, 4)).astype("float32")
    x1_val = rng.normal(size=(2, 3, 4)).astype("float32")
    x2_val = rng.normal(size=(2, 5, 3, 4)).astype("float32")
    prog = tl.Program("i")
    (i,) = prog.dims
    got = {}
    with prog:
        b = tl.tensor(b_val, domain=(i,), name="b")                  # (4,), read by both chains
        y1 = tl.tanh(tl.tensor(x1_val, domain=(i,)) + b) * 2.0         # rank-2 chain
        y2 = tl.tanh(tl.tensor(x2_val, domain=(i,)) + b) * 3.0         # rank-3 chain
        tl.sink([y1, y2], lambda v, p: got.__setitem__(p["i"], [a.copy() for a in v]))
    prog.compile(bounds={"I": 2}, backend="numba").run()
    for k in range(2):
        np.testing.assert_allclose(got[k][0], np.tanh(x1_val[k] + b_val[k]) * 2.0, rtol=1e-6)
        np.testing.assert_allclose(got[k][1], np.tanh(x2_val[k] + b_val[k]) * 3.0, rtol=1e-6)
