"""Structure: imports flow one way (STYLE.md habit 1), checked on the source without running it.

ir is the shared vocabulary (imports no other layer); api builds graphs and knows nothing
of isl, numba or schedules (only api/compile.py hands a program to the backends);
passes, schedule, kernels and runtime never reach back into api, rl or cli.
"""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "timerl"

LAYERS = ["ir", "passes", "schedule", "kernels", "runtime"]
FORBIDDEN = {
    "ir": {"api", "passes", "schedule", "kernels", "runtime", "rl", "cli", "nn", "optim", "distributions"},
    "passes": {"api", "schedule", "kernels", "runtime", "rl", "cli"},
    "schedule": {"api", "kernels", "runtime", "rl", "cli"},
    "kernels": {"api", "runtime", "rl", "cli"},
    "runtime": {"api", "rl", "cli"},
    "api": {"passes", "schedule", "kernels", "runtime", "rl", "cli"},
}
EXTERNAL_FORBIDDEN = {"api": {"islpy", "numba"}}


def _imports(path: pathlib.Path):
    tree = ast.parse(path.read_text())
    pkg = path.relative_to(ROOT.parent).with_suffix("").parts[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(pkg[: len(pkg) - node.level + 1])
                mod = ".".join(base + ([node.module] if node.module else []))
                if node.module is None:
                    for a in node.names:
                        yield f"{mod}.{a.name}"
                    continue
                yield mod
            else:
                yield node.module or ""


def _layer_files():
    for layer in FORBIDDEN:
        for f in sorted((ROOT / layer).rglob("*.py")):
            if layer == "api" and f.name == "compile.py":
                continue
            yield layer, f


@pytest.mark.parametrize("layer,path", list(_layer_files()), ids=lambda x: str(x).split("timerl/")[-1])
def test_import_direction(layer, path):
    bad = []
    for mod in _imports(path):
        parts = mod.split(".")
        if parts[0] == "timerl" and len(parts) > 1 and parts[1] in FORBIDDEN[layer]:
            bad.append(mod)
        if parts[0] in EXTERNAL_FORBIDDEN.get(layer, ()):
            bad.append(mod)
    assert not bad, f"{path.relative_to(ROOT)} ({layer}) imports {bad}"
