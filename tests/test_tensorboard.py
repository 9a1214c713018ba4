"""TensorBoard logging (``timerl train --tensorboard DIR``): the event files are read back here without the
writer's code (TFRecord framing and CRC-32C by hand, events decoded by tensorboardX's protobuf classes)."""

import glob
import math
import os
import struct
import sys
import time

import numpy as np
import pytest

from timerl.rl import tensorboard
from timerl.rl.common import ArgError
from timerl.rl.tensorboard import CLEANRL_NAMES, SPS_TAG, TensorBoardDirError, TensorBoardLog, TensorBoardMissing

NAN, INF = float("nan"), float("inf")


def _crc32c_table():
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


CRC32C = _crc32c_table()


def masked_crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = CRC32C[(c ^ b) & 0xFF] ^ (c >> 8)
    c ^= 0xFFFFFFFF
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def read_records(path, whole=True):
    """The payloads of a TFRecord file: each record is a little-endian u64 length, the masked CRC-32C of
    those 8 bytes, the payload and the masked CRC-32C of the payload. ``whole=False`` leaves out a record
    still being written at the end."""
    with open(path, "rb") as f:
        buf = f.read()
    out, pos = [], 0
    while pos < len(buf):
        if not whole and (len(buf) < pos + 12 or len(buf) < pos + 16 + struct.unpack("<Q", buf[pos:pos + 8])[0]):
            break
        header = buf[pos:pos + 8]
        (n,) = struct.unpack("<Q", header)
        (crc_len,) = struct.unpack("<I", buf[pos + 8:pos + 12])
        assert crc_len == masked_crc32c(header)
        data = buf[pos + 12:pos + 12 + n]
        (crc_data,) = struct.unpack("<I", buf[pos + 12 + n:pos + 16 + n])
        assert len(data) == n and crc_data == masked_crc32c(data)
        out.append(data)
        pos += 16 + n
    assert pos == len(buf)
    return out


def read_events(logdir, whole=True):
    from tensorboardX.proto import event_pb2

    (path,) = glob.glob(os.path.join(logdir, "events.out.tfevents.*"))
    return [event_pb2.Event.FromString(r) for r in read_records(path, whole)]


def scalars(events):
    """{tag: [(step, value), ...]} of the simple-value summaries, in file order."""
    out = {}
    for e in events:
        if e.WhichOneof("what") == "summary":
            for v in e.summary.value:
                if v.WhichOneof("value") == "simple_value":
                    out.setdefault(v.tag, []).append((e.step, v.simple_value))
    return out


def texts(events):
    return {v.tag: (v.metadata.plugin_data.plugin_name, [s.decode() for s in v.tensor.string_val])
            for e in events if e.WhichOneof("what") == "summary" for v in e.summary.value
            if v.WhichOneof("value") == "tensor"}


def same_f32(a, b):
    a, b = np.float32(a), np.float32(b)
    return (np.isnan(a) and np.isnan(b)) or a == b


def check_curve(got, expected):
    assert [s for s, _ in got] == [s for s, _ in expected]
    assert all(same_f32(g, e) for (_, g), (_, e) in zip(got, expected)), (got, expected)


PPO_ROWS = [
    {"iteration": 1, "env_steps": 1024, "mean_return": NAN, "episodes": 0, "pg_loss": -0.0123, "v_loss": 31.7,
     "entropy": 0.6931, "approx_kl": 1.5e-4, "seconds": 0.0},
    {"iteration": 2, "env_steps": 2048, "mean_return": 21.25, "episodes": 45, "pg_loss": -0.0201, "v_loss": 27.03,
     "entropy": 0.6902, "approx_kl": 3.1e-3, "seconds": 0.7},
    {"iteration": 3, "env_steps": 3072, "mean_return": 33.1, "episodes": 77, "pg_loss": NAN, "v_loss": INF,
     "entropy": 0.68, "approx_kl": 2.2e-3, "seconds": 1.3, "clipfrac": 0.125},
]
REINFORCE_ROWS = [
    {"iteration": 1, "env_steps": 512, "mean_return": 14.0, "episodes": 30, "loss": 2.75, "entropy": 0.69,
     "seconds": 0.25},
    {"iteration": 2, "env_steps": 1024, "mean_return": 19.5, "episodes": 52, "loss": -INF, "entropy": 0.675,
     "seconds": 0.4},
]


def expected_curves(rows):
    out = {}
    for r in rows:
        for k, v in r.items():
            if k in ("iteration", "env_steps", "seconds") or (k == "mean_return" and math.isnan(v)):
                continue
            out.setdefault(CLEANRL_NAMES.get(k, f"charts/{k}"), []).append((r["env_steps"], v))
        if r["seconds"] > 0:
            out.setdefault("charts/SPS", []).append((r["env_steps"], int(r["env_steps"] / r["seconds"])))
    return out


def write_run(logdir, algo, rows, args_dict):
    log = TensorBoardLog(logdir, algo, args_dict)
    for r in rows:
        log.write(dict(r))
    log.close()
    log.close()
    return read_events(logdir)


def test_ppo_curves(tmp_path):
    pytest.importorskip("tensorboardX")
    logdir = str(tmp_path / "runs" / "ppo")  # parents are created
    events = write_run(logdir, "ppo", PPO_ROWS, {"env": "CartPole-v1", "lr": 2.5e-4, "num_envs": 8})
    assert events[0].file_version.startswith("brain.Event:")
    got = scalars(events)
    assert set(got) == {"charts/episodic_return", "charts/episodes", "charts/SPS", "losses/policy_loss",
                        "losses/value_loss", "losses/entropy", "losses/approx_kl", "charts/clipfrac"}
    assert got["charts/episodic_return"] == [(2048, np.float32(21.25)), (3072, np.float32(33.1))]  # NaN skipped
    assert got["charts/SPS"] == [(2048, 2925), (3072, 2363)]  # int(env_steps / seconds); none at seconds 0
    assert math.isnan(got["losses/policy_loss"][-1][1]) and got["losses/value_loss"][-1][1] == INF
    assert got["charts/clipfrac"] == [(3072, np.float32(0.125))]
    expected = expected_curves(PPO_ROWS)
    assert set(expected) == set(got)
    for tag in got:
        check_curve(got[tag], expected[tag])


def test_reinforce_curves(tmp_path):
    pytest.importorskip("tensorboardX")
    got = scalars(write_run(str(tmp_path), "reinforce", REINFORCE_ROWS, {"nstep": None}))
    assert set(got) == {"charts/episodic_return", "charts/episodes", "charts/SPS", "losses/loss",
                        "losses/entropy"}
    assert got["losses/loss"] == [(512, np.float32(2.75)), (1024, -INF)]
    assert got["charts/episodes"] == [(512, 30.0), (1024, 52.0)]
    expected = expected_curves(REINFORCE_ROWS)
    for tag in got:
        check_curve(got[tag], expected[tag])


def test_hyperparameters_text(tmp_path):
    pytest.importorskip("tensorboardX")
    args = {"env": "CartPole-v1", "lr": 2.5e-4, "num_envs": 8, "anneal_lr": True, "obs_shape": None,
            "note": "a|b"}
    found = texts(write_run(str(tmp_path), "ppo", PPO_ROWS[:1], args))
    assert set(found) == {"hyperparameters/text_summary"}
    plugin, (text,) = found["hyperparameters/text_summary"]
    assert plugin == "text"
    assert text == ("|param|value|\n|-|-|\n|algo|ppo|\n|env|CartPole-v1|\n|lr|0.00025|\n|num_envs|8|\n"
                    "|anneal_lr|True|\n|obs_shape|None|\n|note|a\\|b|")
    plugin, (text,) = texts(write_run(str(tmp_path / "none"), "reinforce", [], None))["hyperparameters/text_summary"]
    assert text == "|param|value|\n|-|-|\n|algo|reinforce|"


def test_rows_reach_disk_before_close(tmp_path):
    pytest.importorskip("tensorboardX")
    log = TensorBoardLog(str(tmp_path), "ppo")
    try:
        log.write(dict(PPO_ROWS[1]))
        deadline = time.monotonic() + 20
        while "losses/approx_kl" not in scalars(read_events(str(tmp_path), whole=False)):
            assert time.monotonic() < deadline, "the row was not written within 20 s of write()"
            time.sleep(0.1)
    finally:
        log.close()


def test_bad_logdir_names_the_path(tmp_path):
    pytest.importorskip("tensorboardX")
    a_file = tmp_path / "taken"
    a_file.write_text("")
    for logdir in (a_file, a_file / "sub"):
        with pytest.raises(TensorBoardDirError, match=f"cannot write --tensorboard {logdir}: ") as e:
            TensorBoardLog(logdir, "ppo")
        assert isinstance(e.value, ArgError)
    with pytest.raises(TensorBoardDirError, match="it is a file, not a directory"):
        TensorBoardLog(a_file, "ppo")


def test_missing_tensorboardx(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "tensorboardX", None)
    logdir = tmp_path / "never"
    with pytest.raises(TensorBoardMissing) as e:
        TensorBoardLog(str(logdir), "ppo", {"lr": 1e-3})
    assert str(e.value) == ('--tensorboard needs tensorboardX, which the quick start leaves out: '
                            'pip install -e ".[tensorboard]"')
    assert isinstance(e.value, ImportError) and isinstance(e.value, ArgError)
    assert not logdir.exists()


def test_names_are_cleanrls():
    assert CLEANRL_NAMES == {"mean_return": "charts/episodic_return", "episodes": "charts/episodes",
                             "pg_loss": "losses/policy_loss", "v_loss": "losses/value_loss",
                             "entropy": "losses/entropy", "approx_kl": "losses/approx_kl", "loss": "losses/loss"}
    assert SPS_TAG == "charts/SPS"
    for tag in list(CLEANRL_NAMES.values()) + [SPS_TAG]:
        assert tag in tensorboard.__doc__
    assert "tensorboard --logdir DIR" in tensorboard.__doc__
