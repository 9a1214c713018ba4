"""Every public name has a docstring, and docs/api.md's examples run.

The walk covers ``timerl.__all__``, the public modules' ``__all__`` (``tl.random``, ``tl.nn``,
``tl.optim``, ``tl.distributions``, ``tl.rl``, ``tl.config``), the public classes' own public
methods and properties (and the operators of tensors, dims and conditions), the Executable,
the environment, and the fields of the algorithms' ``Args`` dataclasses (a docstring literal
after each field, CleanRL style).
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import re
import sys
import types

import pytest

import timerl as tl
from timerl.rl.common import field_docs
from timerl.runtime.executable import Executable

ROOT = os.path.join(os.path.dirname(__file__), "..")

# operators whose meaning is part of the API (documented like methods)
OPERATORS = (
    "__getitem__", "__setitem__", "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
    "__truediv__", "__rtruediv__", "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__", "__pow__",
    "__rpow__", "__neg__", "__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__", "__and__", "__or__",
    "__invert__", "__matmul__", "__rmatmul__", "__enter__", "__exit__", "__call__",
)


def _modules():
    rl = sys.modules["timerl.rl"]
    return {"timerl": tl, "timerl.random": tl.random, "timerl.nn": tl.nn, "timerl.optim": tl.optim,
            "timerl.distributions": tl.distributions, "timerl.rl": rl, "timerl.config": tl.config}


def _members(cls):
    """Public methods/properties a class defines itself or inherits from a timerl class."""
    seen = {}
    for klass in reversed(cls.__mro__):
        if not klass.__module__.startswith("timerl"):
            continue
        for name, v in vars(klass).items():
            if name.startswith("_") and name not in OPERATORS:
                continue
            fn = v.__func__ if isinstance(v, (staticmethod, classmethod)) else v
            if isinstance(fn, types.FunctionType) and fn.__code__.co_filename == "<string>":
                continue  # generated (dataclass __eq__ and the like)
            if isinstance(v, (types.FunctionType, property, staticmethod, classmethod)):
                seen[name] = (klass, v)
    return seen


def _doc(v):
    if isinstance(v, (staticmethod, classmethod)):
        v = v.__func__
    doc = (getattr(v, "__doc__", None) or "").strip()
    if inspect.isclass(v) and dataclasses.is_dataclass(v) and doc.startswith(v.__name__ + "("):
        return ""  # the signature dataclasses write when a class has no docstring
    return doc


def public_names():
    """(qualified name, object) for every public name the docs must cover."""
    out, classes = [], {}
    for mname, mod in _modules().items():
        out.append((mname, mod))
        names = getattr(mod, "__all__", None) or [
            n for n, v in vars(mod).items()
            if not n.startswith("_") and getattr(v, "__module__", None) == mod.__name__]
        for name in names:
            obj = getattr(mod, name)
            if isinstance(obj, types.ModuleType) or name in ("F32",):
                continue  # submodules are walked as modules; F32 is a dtype constant
            if isinstance(obj, (int, float, str, tuple)):
                continue
            out.append((f"{mname}.{name}", obj))
            if inspect.isclass(obj):
                classes[f"{mname}.{name}"] = obj
    rl = sys.modules["timerl.rl"]
    classes.update({
        "timerl.Executable": Executable, "timerl.rl.Env": rl.Env, "timerl.config.Config": tl.config.Config,
        "timerl.runtime.executable.Schedule": sys.modules["timerl.runtime.executable"].Schedule,
    })
    public = {}
    for cname, cls in classes.items():
        public.setdefault(cls, cname)
    for cls, cname in public.items():
        out.append((cname, cls))
        for name, (klass, v) in _members(cls).items():
            owner = public.get(klass, f"{klass.__module__}.{klass.__qualname__}")
            out.append((f"{owner}.{name}", v))
    for mod in ("timerl.rl.ppo", "timerl.rl.reinforce"):
        out.append((f"{mod}.Args", sys.modules[mod].Args))
    return out


def test_every_public_name_has_a_docstring():
    missing = sorted({q for q, obj in public_names() if not _doc(obj)})
    assert not missing, "public names without a docstring:\n  " + "\n  ".join(missing)


def test_walk_covers_the_api_contract():
    names = {q for q, _ in public_names()}
    for q in ("timerl.Program.compile", "timerl.Program.dim", "timerl.RecurrentTensor.discounted_cumsum",
              "timerl.RecurrentTensor.__getitem__", "timerl.RecurrentTensor.spatial", "timerl.random.permutation",
              "timerl.nn.Module.parameters", "timerl.optim.Optimizer.step", "timerl.distributions.Normal.log_prob",
              "timerl.rl.gae", "timerl.rl.make_env", "timerl.rl.Env.step", "timerl.Executable.run", "timerl.Executable.planned_peak",
              "timerl.config.override", "timerl.grad", "timerl.sink", "timerl.udf", "timerl.Dim", "timerl.Cond"):
        assert q in names, q


@pytest.mark.parametrize("mod", ["timerl.rl.ppo", "timerl.rl.reinforce", "timerl.rl.common", "timerl.config"])
def test_every_args_field_has_a_docstring(mod):
    cls = {"timerl.rl.common": "CommonArgs", "timerl.config": "Config"}.get(mod, "Args")
    cls = getattr(sys.modules[mod], cls)
    docs = field_docs(cls)
    missing = [f.name for f in dataclasses.fields(cls) if not docs.get(f.name, "").strip()]
    assert not missing, f"{cls.__module__}.{cls.__name__} fields without a docstring: {missing}"


def test_env_docstring_names_its_public_attributes():
    doc = sys.modules["timerl.rl"].Env.__doc__
    for attr in ("observation_shape", "action_shape", "discrete", "num_actions", "num_envs",
                 "single_observation_shape", "episode_returns", "env_steps"):
        assert attr in doc, attr


# -- docs/api.md: every ```python block runs -----------------------------------------------------

_BLOCK = re.compile(r"^```python[ \t]*(?P<mark>[^\n]*)\n(?P<code>.*?)^```", re.S | re.M)


def api_blocks():
    with open(os.path.join(ROOT, "docs", "api.md")) as f:
        text = f.read()
    out = []
    for m in _BLOCK.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        out.append(pytest.param(m.group("code"), m.group("mark").strip(), id=f"api.md:{line}"))
    return out


@pytest.mark.parametrize("code,mark", api_blocks())
def test_api_md_examples_run(code, mark, tmp_path, monkeypatch):
    if mark == "skip":
        pytest.skip("a fragment (marked ```python skip)")
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "docs/api.md", "exec"), {"__name__": "__api_md__"})
