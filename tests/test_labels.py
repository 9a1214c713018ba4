"""Labels: ops built inside timerl's own modules carry the user-facing name of what built them
(``ppo.ratio``, ``gae.adv``, ``Linear.weight``) in the PDG, the schedule, ``timerl show`` and errors;
user ops keep their ``name=`` or source line."""

import os
import re

import numpy as np
import pytest

import timerl as tl
from timerl.cli import main

HERE = os.path.basename(__file__)
SITE = re.compile(r"([\w.<>-]+):\d+")


def labels(prog_or_exe):
    return {prog_or_exe.pdg.rec(n).name for n in prog_or_exe.pdg.nodes}


def sites(names):
    """The file names that labels refer to."""
    return {m.group(1) for name in names for m in SITE.finditer(name)}


def line_of(text):
    """The line number of the first line of this file containing ``text``."""
    with open(__file__) as f:
        return next(k for k, ln in enumerate(f, 1) if text in ln)


def test_ppo_labels_in_schedule_and_pdg():
    exe = tl.rl.ppo(env="CartPole-v1", num_envs=2, num_steps=4, total_steps=16, epochs=1, minibatches=2,
                    backend="numpy", compiled_env=False)   # the host env's step UDF is labelled too
    names = labels(exe)
    short = {n.split(" (")[0] for n in names}
    for want in ("ppo.ratio", "ppo.pg_loss", "ppo.v_loss", "ppo.gae.delta", "ppo.gae.adv", "ppo.o",
                 "ppo.actor.layer0.weight", "ppo.critic.layer2.bias", "ppo.Categorical.log_prob",
                 "ppo.adam.m(actor.layer0.weight)", "ppo.adam.v(critic.layer1.weight)", "ppo.CartPole-v1.step"):
        assert want in short, want
    sched = str(exe.schedule)
    for want in ("ppo.ratio", "ppo.gae.adv", "ppo.pg_loss", "ppo.actor.layer0.matmul"):
        assert want in sched, want
    # every op is labelled <scope>.<what>, with this file's line (the user's call) and no other site
    assert all(n.startswith("ppo.") for n in names), sorted(n for n in names if not n.startswith("ppo."))
    assert sites(names) == {HERE}


def test_reinforce_labels_and_nstep():
    exe = tl.rl.reinforce(env="CartPole-v1", num_envs=2, num_steps=4, total_steps=16, nstep=2, backend="numpy")
    names = labels(exe)
    assert all(n.startswith("reinforce.") for n in names)
    assert sites(names) == {HERE}
    assert any(n.startswith("reinforce.nstep_returns.G ") for n in names)
    assert any(n.startswith("reinforce.loss ") for n in names)


def test_cli_show_labels_name_no_file(capsys):
    assert main(["show", "schedule", "reinforce", "--num-envs", "2", "--num-steps", "4", "--total-steps", "16",
                 "--backend", "numpy"]) == 0
    out = capsys.readouterr().out
    assert "reinforce.discounted_returns.G" in out and "reinforce.Categorical.log_prob" in out
    # under the command there is no user line: no label names timerl's sources or the console script
    assert not SITE.search(out.replace("reinforce.", "")), SITE.search(out.replace("reinforce.", ""))
    assert main(["show", "pdg", "reinforce", "--num-envs", "2", "--num-steps", "4", "--total-steps", "16",
                 "--backend", "numpy"]) == 0
    out = capsys.readouterr().out
    assert "# reinforce.loss" in out and ".py:" not in out and "timerl:" not in out


def test_modules_label_their_parameters_and_ops():
    prog = tl.Program("i")
    (i,) = prog.dims
    with prog:
        lin = tl.nn.Linear(3, 2, domain=(i,))  # the Linear line
        mlp = tl.nn.MLP([2, 4, 1], domain=(i,), name="policy")
        x = tl.tensor(np.ones((2, 3), "float32"), domain=(i,), name="x")
        y = mlp(lin(x))
        opt = tl.optim.Adam(lin.parameters() + mlp.parameters(), lr=0.1)
        opt.step(y.sum())
    site = f"{HERE}:{line_of('# the Linear line')}"
    assert lin.weight.name == f"Linear.weight ({site})"
    assert lin.bias.name == f"Linear.bias ({site})"
    short = {n.split(" (")[0] for n in labels(prog)}
    assert {"Linear.matmul", "policy.layer0.weight", "policy.layer1.bias", "policy.tanh", "policy.layer0.matmul",
            "adam.m(Linear.weight)", "adam.v(policy.layer1.weight)", "x"} <= short
    assert sites(labels(prog)) == {HERE}


def test_user_ops_keep_their_name_or_line_and_can_be_scoped():
    prog = tl.Program("t")
    (t,) = prog.dims
    with prog:
        x = tl.tensor(np.ones((3,), "float32"), domain=(t,), name="x")
        y = tl.exp(x)  # the exp line
        with tl.name_scope("policy"):
            z = y * 2.0  # the scoped line
            with tl.name_scope("head"):
                w = tl.placeholder((), "float32", (t,), name="w")
    assert x.name == "x"
    assert y.name == f"{HERE}:{line_of('# the exp line')}"
    assert z.name == f"policy.mul ({HERE}:{line_of('# the scoped line')})"
    assert w.name.startswith("policy.head.w (")
    with pytest.raises(ValueError):
        with tl.name_scope(""):
            pass


def test_error_for_a_library_op_names_its_label():
    prog = tl.Program("i t")
    i, t = prog.dims
    I, T = prog.bounds
    with prog:
        r = tl.tensor(np.ones((2, 5), "float32"), domain=(i, t), name="r")
        v = tl.tensor(np.zeros((2, 5), "float32"), domain=(i, t), name="v")
        done = tl.tensor(np.zeros((2, 5), bool), domain=(i, t), name="done")
        adv = tl.rl.gae(r, v, done, 0.99, 0.95)  # the gae line
        tl.sink(adv[i, t - 1], lambda *_: None)
    with pytest.raises(tl.CompileError, match=re.escape(f"gae.adv ({HERE}:{line_of('# the gae line')})")):
        prog.compile(bounds={I: 2, T: 5}, backend="numpy")


def test_module_at_reads_are_labelled_by_the_module():
    prog = tl.Program("i k")
    i, k = prog.dims
    with prog:
        mlp = tl.nn.MLP([2, 3, 1], domain=(i, k))
        y = mlp.at(k, 0)(tl.tensor(np.ones((2, 2), "float32"), domain=(i,), name="x"))
    short = {n.split(" (")[0] for n in labels(prog)}
    assert {"MLP.layer0.access", "MLP.layer1.access", "MLP.layer0.matmul"} <= short
    assert y.name.startswith("MLP.layer1.")
