"""Tests for experiment tracking (disco.tracking) and its launcher hooks.

What the launchers write to TensorBoard is read back with TensorBoard's own
reader (``EventAccumulator``) and compared with their CSV files.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
import struct
import subprocess
import sys
import time

import pytest
from tensorboard.backend.event_processing import event_accumulator

from disco import checks
from disco import comparison
from disco import errors
from disco import evaluation
from disco import tracking
from disco.meta import plan
from disco.meta import trainer

import meta_settings
import test_evaluate_launcher


def _events(directory: Path) -> event_accumulator.EventAccumulator:
  """The scalars and texts of the event files in ``directory``."""
  assert list(directory.glob("events.out.tfevents.*")), list(
      directory.iterdir()
  )
  acc = event_accumulator.EventAccumulator(
      str(directory), size_guidance={event_accumulator.SCALARS: 0}
  )
  acc.Reload()
  return acc


def _scalars(acc, tag) -> dict[int, float]:
  return {e.step: e.value for e in acc.Scalars(tag)}


def _same(a: float, b: float) -> bool:
  """Equal as float32 (what event files store); NaN equals NaN."""
  if math.isnan(a) or math.isnan(b):
    return math.isnan(a) and math.isnan(b)
  return struct.pack("f", a) == struct.pack("f", b)


def test_parse_names_the_backends():
  assert tracking.parse("") == ("csv",)
  assert tracking.parse(None) == ("csv",)
  assert tracking.parse("csv") == ("csv",)
  assert tracking.parse(" CSV, tensorboard ,csv") == ("csv", "tensorboard")
  assert tracking.parse(("tensorboard",)) == ("tensorboard",)


def test_unknown_or_missing_backends_are_errors(monkeypatch):
  with pytest.raises(tracking.TrackingError, match="Unknown tracking backend"):
    tracking.parse("csv,mlflow")
  monkeypatch.setattr(tracking, "_installed", lambda package: False)
  with pytest.raises(tracking.TrackingError) as info:
    tracking.parse("wandb")
  assert str(info.value) == (
      "tracking 'wandb' needs the wandb package: pip install "
      "'disco-rl-harness[wandb]'."
  )
  with pytest.raises(errors.UsageError, match="config.tracking: tracking"):
    checks.check_tracking("csv,tensorboard")


def test_tensorboard_tracker_writes_what_it_is_given(tmp_path):
  with tracking.open_tracker(
      "tensorboard", tmp_path, config=dict(lr=0.5, net=(8, 8))
  ) as tracker:
    tracker.scalars(1, {"loss": 2.5, "group/a": 1, "name": "text"})
    tracker.scalars(3, {"loss": float("nan")})
    tracker.summary({"return": 0.75, "per_seed": [1, 2]}, 3)
  acc = _events(tmp_path / "tensorboard")
  tags = acc.Tags()
  assert set(tags["scalars"]) == {"loss", "group/a", "final/return"}
  loss = _scalars(acc, "loss")
  assert loss[1] == 2.5 and math.isnan(loss[3]) and set(loss) == {1, 3}
  assert _scalars(acc, "final/return") == {3: 0.75}
  text = acc.Tensors("config/text_summary")[0].tensor_proto.string_val[0]
  assert b'"lr": 0.5' in text


def test_csv_alone_writes_no_other_files(tmp_path):
  tracker = tracking.open_tracker("csv", tmp_path, config=dict(a=1))
  tracker.scalars(1, {"x": 1.0})
  tracker.close()
  assert not list(tmp_path.iterdir())


def _wandb_records(run_dir: Path) -> list:
  """The records of an offline W&B run's ``.wandb`` file, once its ``exit``
  record is there (W&B's service may write the file after ``finish``
  returns)."""
  for _ in range(600):
    records = _read_wandb_file(run_dir)
    if any(r.WhichOneof("record_type") == "exit" for r in records):
      return records
    time.sleep(0.1)
  raise AssertionError(f"No complete W&B run in {run_dir}")


def _read_wandb_file(run_dir: Path) -> list:
  """The records of the ``.wandb`` file in ``run_dir`` (a log of 32 KiB
  blocks of records, each with a 7-byte header, after a 7-byte file
  header)."""
  from wandb.proto import wandb_internal_pb2

  (path,) = run_dir.glob("offline-run-*/run-*.wandb")
  data, pos, block, records, part = path.read_bytes(), 7, 32768, [], b""
  while pos + 7 <= len(data):
    if block - pos % block < 7:
      pos += block - pos % block
      continue
    _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
    if (length == 0 and kind == 0) or pos + 7 + length > len(data):
      break  # the end, or a record still being written
    part += data[pos + 7 : pos + 7 + length]
    pos += 7 + length
    if kind in (1, 4):  # a whole record, or the last part of one
      record = wandb_internal_pb2.Record()
      record.ParseFromString(part)
      records.append(record)
      part = b""
  return records


def test_wandb_offline_needs_no_account(tmp_path, monkeypatch):
  pytest.importorskip(
      "wandb", reason="wandb is optional: pip install 'disco-rl-harness[wandb]'"
  )
  monkeypatch.delenv("WANDB_MODE", raising=False)
  monkeypatch.delenv("WANDB_API_KEY", raising=False)
  monkeypatch.setenv("WANDB_SILENT", "true")
  with tracking.open_tracker(
      "wandb", tmp_path, name="tiny", config=dict(lr=0.5)
  ) as tracker:
    tracker.scalars(1, {"loss": 2.5, "group/a": 1.0})
    tracker.scalars(2, {"loss": 1.5})
    tracker.summary({"return": 0.75}, 2)
  history = [
      {
          key: float(item.value_json)
          for item in r.history.item
          for key in [item.key or "/".join(item.nested_key)]
          if not key.startswith("_")
      }
      for r in _wandb_records(tmp_path / "wandb")
      if r.WhichOneof("record_type") == "history"
  ]
  assert history == [{"loss": 2.5, "group/a": 1.0}, {"loss": 1.5}]


# --------------------------------------------------------- launchers ----


def test_disco_eval_writes_its_metrics_to_tensorboard(tmp_path):
  config = test_evaluate_launcher.tiny_config(
      tmp_path, tracking="csv,tensorboard"
  )
  summary = evaluation.evaluate(config, log=lambda _: None, progress=False)
  out = tmp_path / "run"
  with open(out / "metrics.csv", newline="") as f:
    rows = list(csv.DictReader(f))
  acc = _events(out / "tensorboard")
  names = [k for k in rows[0] if k not in ("seed", "iteration", "env_steps")]
  assert "episode_return" in names or "return" in " ".join(names), names
  expected = {f"{k}/seed_{s}" for k in names for s in (3, 4)}
  assert expected <= set(acc.Tags()["scalars"])
  for row in rows:  # every CSV value, at its environment step
    for name in names:
      written = _scalars(acc, f"{name}/seed_{row['seed']}")
      assert _same(written[int(row["env_steps"])], float(row[name])), name
  final = _scalars(acc, "final/final_return_mean")
  assert _same(list(final.values())[0], summary["final_return_mean"])
  # The config (the rule's settings too) is recorded as text.
  text = acc.Tensors("config/text_summary")[0].tensor_proto.string_val[0]
  assert b'"entropy_cost"' in text


def test_disco_meta_train_writes_its_rows_to_tensorboard(tmp_path):
  # What is logged does not depend on the rule: the tiny LPG rule, whose
  # meta-step traces faster than Disco's.
  config = meta_settings.tiny_config(
      **meta_settings.TINY_LPG,
      num_meta_steps=2,
      output_dir=str(tmp_path / "meta"),
      tracking="tensorboard",
  )
  trainer.train(config, log=lambda _: None, progress=False)
  out = tmp_path / "meta"
  with open(out / "metrics.csv", newline="") as f:
    rows = list(csv.DictReader(f))
  assert [int(r["meta_step"]) for r in rows] == [1, 2]
  acc = _events(out / "tensorboard")
  for name in ("meta_loss", "rewards", "pos_reward_frac"):
    written = _scalars(acc, name)
    assert set(written) == {1, 2}
    for row in rows:
      assert _same(written[int(row["meta_step"])], float(row[name])), name
  # Every CSV column is there.
  assert set(rows[0]) - {"meta_step"} <= set(acc.Tags()["scalars"])


def test_disco_compare_passes_tracking_to_every_run(tmp_path):
  config = comparison.default_config()
  config.tracking = "tensorboard"
  config.output_dir = str(tmp_path / "cmp")
  settings = comparison.CompareSettings.from_config(config)
  cell, *_ = comparison.runs.make_cells(settings, tmp_path / "cmp")
  assert cell.eval_config(settings).tracking == "tensorboard"


def test_bad_backend_is_one_line_and_exit_2_before_training(tmp_path):
  for module in ("disco.launch.evaluate", "disco.launch.meta_train"):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            module,
            "--config.tracking=csv,tensorbord",
            f"--config.output_dir={tmp_path / module}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Unknown tracking backend 'tensorbord'" in (
        lines[0]
    ), result.stderr
    assert not (tmp_path / module).exists()


def test_missing_backend_package_fails_the_build(tmp_path, monkeypatch):
  monkeypatch.setattr(tracking, "_installed", lambda package: False)
  config = test_evaluate_launcher.tiny_config(tmp_path, tracking="wandb")
  with pytest.raises(errors.UsageError) as info:
    evaluation.build(config)
  assert "pip install 'disco-rl-harness[wandb]'" in str(info.value)
  with pytest.raises(errors.UsageError, match="needs the tensorboardX"):
    plan.build(meta_settings.tiny_config(tracking="tensorboard"))
