"""The one configuration object of timerl, backed by environment variables.

    TIMERL_DEBUG=1   dump generated kernel source and schedule stages
    TIMERL_CHECK=1   instrument runs: every read after its write and before its free;
                     verify the PDG after every pass
    TIMERL_VERIFY=1  verify the PDG after every pass only (the test suite sets it)

Override temporarily with ``with timerl.config.override(check=True): ...``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os


def _flag(name: str) -> bool:
    return os.environ.get(name, "0").lower() not in ("", "0", "false", "no")


@dataclasses.dataclass
class Config:
    debug: bool = dataclasses.field(default_factory=lambda: _flag("TIMERL_DEBUG"))
    check: bool = dataclasses.field(default_factory=lambda: _flag("TIMERL_CHECK"))
    verify: bool = dataclasses.field(default_factory=lambda: _flag("TIMERL_VERIFY"))
    cache_dir: str = dataclasses.field(
        default_factory=lambda: os.environ.get(
            "TIMERL_CACHE_DIR", os.path.join(os.path.expanduser("~"), ".cache", "timerl")
        )
    )


config = Config()


@contextlib.contextmanager
def override(**kw):
    old = {k: getattr(config, k) for k in kw}
    for k, v in kw.items():
        if not hasattr(config, k):
            raise AttributeError(f"timerl.config has no setting {k!r}")
        setattr(config, k, v)
    try:
        yield config
    finally:
        for k, v in old.items():
            setattr(config, k, v)
