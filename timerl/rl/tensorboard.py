"""Training curves in TensorBoard event files (``timerl train --tensorboard DIR``), named as CleanRL names them.

    log = TensorBoardLog("runs/ppo_cartpole_s0", "ppo", dataclasses.asdict(args))
    log.write(row)          # once per iteration: one scalar per logged field, on disk within a second
    log.close()

View them with ``tensorboard --logdir DIR`` (or ``tensorboard --logdir runs`` to compare the runs in
``runs/*``: give each run its own directory). Needs the ``tensorboard`` extra
(``pip install -e ".[tensorboard]"``, which installs tensorboardX; TensorBoard itself is a separate
``pip install tensorboard``).

Every scalar's step is the row's ``env_steps`` (CleanRL's ``global_step``), so curves of runs with
different ``--num-envs`` or ``--num-steps`` line up. A row's fields become these tags:

    =============== ========================= ================================================
    row field       tag                       notes
    =============== ========================= ================================================
    mean_return     charts/episodic_return    mean of the last 10 episodes; skipped while NaN
                                              (no episode finished yet)
    episodes        charts/episodes           episodes finished so far
    env_steps /     charts/SPS                int(env_steps / seconds): env steps per second
    seconds                                   since the run started; skipped while seconds <= 0
    pg_loss         losses/policy_loss        PPO
    v_loss          losses/value_loss         PPO
    entropy         losses/entropy            PPO and REINFORCE
    approx_kl       losses/approx_kl          PPO
    loss            losses/loss               REINFORCE
    any other       charts/<field>            numeric fields only
    =============== ========================= ================================================

``iteration``, ``env_steps`` and ``seconds`` are not logged themselves. Losses that became inf or
NaN are written as they are (TensorBoard shows them). The run's hyperparameters are written once,
as CleanRL does, as the text summary ``hyperparameters``: a markdown table ``|param|value|``.
"""

from __future__ import annotations

import math
import numbers
import os

from .common import ArgError

#: row field -> TensorBoard tag (CleanRL's names); charts/SPS is derived from env_steps and seconds
CLEANRL_NAMES = {
    "mean_return": "charts/episodic_return",
    "episodes": "charts/episodes",
    "pg_loss": "losses/policy_loss",
    "v_loss": "losses/value_loss",
    "entropy": "losses/entropy",
    "approx_kl": "losses/approx_kl",
    "loss": "losses/loss",
}
#: the tag of env steps per second, int(env_steps / seconds)
SPS_TAG = "charts/SPS"
#: row fields that are not scalars of their own (env_steps is every scalar's step)
NOT_LOGGED = ("iteration", "env_steps", "seconds")

MISSING_MESSAGE = ('--tensorboard needs tensorboardX, which the quick start leaves out: '
                   'pip install -e ".[tensorboard]"')


class TensorBoardMissing(ImportError, ArgError):
    """tensorboardX is not installed. Also an :class:`~timerl.rl.common.ArgError`, so ``timerl train``
    reports it as a bad flag: one line, exit status 2."""


class TensorBoardDirError(ArgError):
    """The log directory cannot be created or written (the message names it)."""


def hyperparameter_table(algo, args_dict=None) -> str:
    """The markdown table CleanRL writes as its ``hyperparameters`` text: ``|param|value|``, one row per
    argument, ``algo`` first."""
    items = [("algo", algo)] + list((args_dict or {}).items())
    return "|param|value|\n|-|-|\n" + "\n".join(f"|{_cell(k)}|{_cell(v)}|" for k, v in items)


def _cell(v):
    return str(v).replace("|", "\\|").replace("\n", " ")


class TensorBoardLog:
    """Scalar curves in TensorBoard event files, named as CleanRL names them (:data:`CLEANRL_NAMES`).

    ``logdir`` is created if need be; the event file goes straight into it. ``args_dict``, the run's
    hyperparameters, is written once as the text summary ``hyperparameters``. Raises
    :class:`TensorBoardMissing` without tensorboardX and :class:`TensorBoardDirError` when ``logdir``
    cannot be created or written.
    """

    def __init__(self, logdir, algo, args_dict=None):
        try:
            from tensorboardX import SummaryWriter
        except ImportError:
            raise TensorBoardMissing(MISSING_MESSAGE) from None
        self.logdir, self.algo = os.fspath(logdir), algo
        if os.path.exists(self.logdir) and not os.path.isdir(self.logdir):
            raise TensorBoardDirError(f"cannot write --tensorboard {self.logdir}: it is a file, not a directory")
        try:
            os.makedirs(self.logdir, exist_ok=True)
            # the writer's thread flushes (and fsyncs) at most once a second, not once per row
            self.writer = SummaryWriter(self.logdir, flush_secs=1, max_queue=100)
        except OSError as e:
            raise TensorBoardDirError(f"cannot write --tensorboard {self.logdir}: {e.strerror or e}") from None
        self.writer.add_text("hyperparameters", hyperparameter_table(algo, args_dict))

    def write(self, row):
        """Log one training iteration's row (a dict with ``env_steps``, ``mean_return``, ``episodes``,
        ``seconds`` and the algorithm's losses) at step ``env_steps``. The row is on disk within about a
        second (tensorboardX's thread writes and flushes), every row once :meth:`close` returns."""
        step = int(row["env_steps"])
        for key, value in row.items():
            if key in NOT_LOGGED or not isinstance(value, numbers.Real) or isinstance(value, bool):
                continue
            if key == "mean_return" and math.isnan(value):
                continue
            self.writer.add_scalar(CLEANRL_NAMES.get(key, f"charts/{key}"), float(value), step)
        seconds = row.get("seconds", 0.0)
        if seconds > 0:
            self.writer.add_scalar(SPS_TAG, int(step / seconds), step)

    def close(self):
        """Write what is pending and close the event file (safe to call twice)."""
        if self.writer is not None:
            self.writer.close()
            self.writer = None
