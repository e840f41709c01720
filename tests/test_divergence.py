"""Divergence in meta-training: injected faults (``meta_faults``: a
population that poisons an agent or the meta-gradient, and a hook that
damages a checkpoint) and what the launcher does about them: diverged
agents restart, non-finite meta-updates are skipped and, too many in a row,
stop the run with exit status 3; checkpoints and exports stay finite; a
resumed run falls back past a damaged checkpoint.

The runs share one plan (one traced program, with the tiny LPG rule of
``meta_settings``: the machinery under test does not depend on the rule); it
is the program of ``test_population.py``'s poisoned population too (the
``MIXED`` groups with fault injection, whose schedule is an argument of the
program), so it compiles once.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from disco import errors
from disco import weights as weights_lib
from disco.meta import checkpoints as ckpt_lib
from disco.meta import history as history_lib
from disco.meta import hooks
from disco.meta import plan as plan_lib
from disco.meta import run_folder
from disco.meta import settings as settings_lib
from disco.meta import trainer as mt

from meta_faults import corrupt_checkpoint
from meta_faults import with_faults
from meta_settings import MIXED
from meta_settings import TINY_LPG
from meta_settings import flip_one_bit
from meta_settings import subprocess_env
from meta_settings import tiny_config


def faulty_config(output_dir):
  return tiny_config(
      **TINY_LPG,
      output_dir=str(output_dir),
      population=MIXED,
      lifetime_meta_steps=2,
  )


class CorruptCheckpointAt(hooks.Hook):
  """Damages the checkpoint of meta-step ``step`` once it is written."""

  def __init__(self, step: int):
    self.step = step

  def after_step(self, progress):
    path = progress.plan.output_dir / run_folder.CHECKPOINT_DIR / str(self.step)
    if progress.step == self.step and path.is_dir():
      corrupt_checkpoint(path)


def all_finite(tree) -> bool:
  return all(
      np.isfinite(np.asarray(x)).all()
      for x in jax.tree.leaves(tree)
      if np.issubdtype(np.asarray(x).dtype, np.inexact)
  )


# ------------------------------------------------------ checkpoints ----


def _tree(x):
  return {"a": jnp.full([3], x, jnp.float32), "n": jnp.array(1, jnp.int32)}


def test_checkpoints_are_never_saved_with_non_finite_values(tmp_path):
  with ckpt_lib.CheckpointManager(tmp_path / "c", keep=1) as manager:
    manager.save(_tree(1.0), step=1)
    for bad in (jnp.nan, jnp.inf):
      with pytest.raises(ckpt_lib.CheckpointError, match="non-finite"):
        manager.save(_tree(bad), step=2)
    # Nothing written, so the finite one was not rotated out.
    assert manager.all_steps() == [1]


def _random_tree(seed):
  return {
      "a": jax.random.normal(jax.random.PRNGKey(seed), [64, 64]),
      "n": jnp.array(seed, jnp.int32),
  }


def test_flipped_bit_moves_the_checkpoint_aside(tmp_path):
  """One flipped bit in an array data file (which orbax reads back with
  other values, without complaint) fails the file's digest: the strict
  restore refuses it, and the fallback moves it aside in one line and goes
  back to the previous checkpoint, exactly; with none left, it gives None
  (the launcher then refuses to resume, in one line)."""
  template = jax.eval_shape(lambda: _random_tree(0))
  logs = []
  with ckpt_lib.CheckpointManager(tmp_path / "c", keep=3) as manager:
    for step in (1, 2):
      manager.save(_random_tree(step), step=step)
    flipped = flip_one_bit(manager.path(2))
    name = flipped.relative_to(manager.path(2)).as_posix()
    with pytest.raises(ckpt_lib.CorruptCheckpointError) as info:
      manager.restore(template)
    assert f"{name} differs from its digest" in str(info.value)
    restored = manager.restore_newest_readable(template, logs.append)
    assert restored.step == 1 and manager.all_steps() == [1]
    np.testing.assert_array_equal(restored.state["a"], _random_tree(1)["a"])
    assert (tmp_path / "c" / "2.damaged" / name).is_file()
    (line,) = logs
    assert line.startswith("Checkpoint 2 is damaged (") and "\n" not in line
    assert name in line and "2.damaged" in line and "falling back" in line
    flip_one_bit(manager.path(1))
    assert manager.restore_newest_readable(template, logs.append) is None
    assert manager.all_steps() == [] and len(logs) == 2


def test_missing_file_or_digest_manifest_is_damage(tmp_path):
  template = jax.eval_shape(lambda: _random_tree(0))
  with ckpt_lib.CheckpointManager(tmp_path / "c", keep=3) as manager:
    manager.save(_random_tree(1), step=1)
    folder = manager.path(1)
    assert manager.restore(template).step == 1  # reading changes no file
    removed = folder / "state" / "manifest.ocdbt"
    content = removed.read_bytes()
    removed.unlink()
    with pytest.raises(
        ckpt_lib.CorruptCheckpointError,
        match="state/manifest.ocdbt is missing",
    ):
      manager.restore(template)
    removed.write_bytes(content)
    (folder / ckpt_lib.DIGESTS_FILE).unlink()  # e.g. a crash before it
    with pytest.raises(
        ckpt_lib.CorruptCheckpointError, match="file_digests.json is missing"
    ):
      manager.restore(template)
    (folder / ckpt_lib.DIGESTS_FILE).write_text("{")
    with pytest.raises(ckpt_lib.CorruptCheckpointError, match="unreadable"):
      manager.restore(template)


def test_checkpoint_of_before_digests_is_read_unchecked(tmp_path):
  """A checkpoint written before file digests (no manifest, and a record
  that does not ask for one) restores as before, unverified."""
  template = jax.eval_shape(lambda: _random_tree(0))
  with ckpt_lib.CheckpointManager(tmp_path / "c", keep=3) as manager:
    manager.save(_random_tree(1), step=1)
    folder = manager.path(1)
    (folder / ckpt_lib.DIGESTS_FILE).unlink()
    record_file = folder / ckpt_lib.RECORD_ITEM / "metadata"
    record = json.loads(record_file.read_text())
    del record[ckpt_lib.DIGESTS_KEY]
    record_file.write_text(json.dumps(record))
    restored = manager.restore(template)
    np.testing.assert_array_equal(restored.state["a"], _random_tree(1)["a"])


def test_restore_falls_back_past_damaged_checkpoints(tmp_path):
  logs = []
  with ckpt_lib.CheckpointManager(tmp_path / "c", keep=3) as manager:
    for step in (1, 2, 3):
      manager.save(_tree(float(step)), step=step)
    corrupt_checkpoint(manager.path(3))
    with pytest.raises(ckpt_lib.CorruptCheckpointError):
      manager.restore(_tree(0.0))  # the strict restore refuses it
    restored = manager.restore_newest_readable(_tree(0.0), logs.append)
    assert restored.step == 2
    np.testing.assert_array_equal(restored.state["a"], [2.0] * 3)
    assert manager.all_steps() == [1, 2]
    # Moved aside, not deleted; a second damaged 3 gets another name.
    assert (tmp_path / "c" / "3.damaged" / "state").is_dir()
    manager.save(_tree(3.0), step=3)
    corrupt_checkpoint(manager.path(3))
    manager.restore_newest_readable(_tree(0.0), logs.append)
    assert (tmp_path / "c" / "3.damaged-2").is_dir()
  assert len(logs) == 2 and "Checkpoint 3 is damaged" in logs[0]
  assert "3.damaged" in logs[0] and "falling back" in logs[0]


# ------------------------------------------------ poisoned launcher ----

# One plan (so one traced program) serves the launcher tests: the first
# catch-5x5 agent diverges at meta-step 2, the meta-gradient at 3 and at
# 5, 6, 7, so a run of 4 meta-steps finishes and one that goes on stops at 7.
AGENT_STEPS, GRAD_STEPS = (2,), (3, 5, 6, 7)


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
  out = tmp_path_factory.mktemp("diverge") / "poisoned"
  config = faulty_config(out)
  config.update(num_meta_steps=4, checkpoint_every=2, max_consecutive_skips=3)
  return with_faults(
      plan_lib.build(config),
      poison_agent_at_steps=AGENT_STEPS,
      poison_meta_grad_at_steps=GRAD_STEPS,
  )


@pytest.fixture(scope="module")
def poisoned_run(plan):
  """4 meta-steps with checkpoints at 2 and 4; the one at 4 is damaged."""
  lines = []
  result = mt.run(plan, lines.append, False, hooks=[CorruptCheckpointAt(4)])
  summary = mt.write(plan, result, lines.append)
  return dict(out=plan.output_dir, summary=summary, lines=lines)


def test_poisoned_agent_and_meta_gradient(poisoned_run):
  out, lines = poisoned_run["out"], poisoned_run["lines"]
  history = history_lib.MetricsHistory.read_csv(out / run_folder.METRICS_FILE)
  columns = {
      "catch-5x5/diverged_agents": [0, 1, 0, 0],
      "catch-6x6/diverged_agents": [0, 0, 0, 0],
      "diverged_agents": [0, 1, 0, 0],
      "catch-5x5/restarted_agents": [0, 1, 1, 1],
      "restarted_agents": [0, 1, 1, 1],
      "meta_update_skipped": [0, 0, 1, 0],
      "skipped_updates": [0, 0, 1, 1],
      "consecutive_skips": [0, 0, 1, 0],
  }
  for name, expected in columns.items():
    np.testing.assert_array_equal(history.column(name), expected, name)
  # The diverged agent is left out of the means: no NaN in the metrics.
  for name in ("meta_loss", "catch-5x5/meta_loss", "rewards", "pg_loss"):
    assert np.isfinite(history.column(name)).all(), name
  assert not np.isfinite(history.column("meta_grad_norm")[2])
  assert any(
      "Meta-step 2: agent(s) diverged (1 of catch-5x5" in x for x in lines
  )
  assert any("Meta-step 3: non-finite meta-gradient" in x for x in lines)
  # The run finishes with finite meta-parameters, exported (loading refuses
  # non-finite ones).
  summary = poisoned_run["summary"]
  assert summary["meta_steps"] == 4
  assert summary["divergence"]["skipped_updates"] == 1
  assert summary["divergence"]["restarted_agents"] == 1
  exported = weights_lib.load_meta_params(out / run_folder.META_PARAMS_FILE)
  assert all_finite(exported)


def test_resume_falls_back_then_repeated_skips_stop(
    plan, poisoned_run, tmp_path
):
  """Resuming moves the damaged checkpoint 4 aside, continues from 2 and
  recomputes 3 and 4 exactly (the faults included); skips at 5, 6 and 7
  then stop the run: no new checkpoint (they come only after applied
  updates) and no export."""
  out = tmp_path / "run"
  shutil.copytree(poisoned_run["out"], out)
  config = faulty_config(out)
  config.update(
      num_meta_steps=8, checkpoint_every=2, max_consecutive_skips=3, resume=True
  )
  settings = settings_lib.MetaTrainSettings.from_config(config)
  # The plan's population: the same faults.
  resumed_plan = dataclasses.replace(plan, run_settings=settings)
  lines = []
  with pytest.raises(errors.Diverged) as info:
    mt.run(resumed_plan, lines.append, False)
  text = "\n".join(lines)
  assert "Checkpoint 4 is damaged" in text and "4.damaged" in text
  assert "Resuming from" in text and "meta-step 2)" in text
  assert (out / run_folder.CHECKPOINT_DIR / "4.damaged" / "state").is_dir()
  message = str(info.value)
  assert "\n" not in message
  assert message.startswith("Meta-training diverged at meta-step 7: ")
  assert "3 meta-steps in a row (from meta-step 5" in message
  assert f"{out / run_folder.CHECKPOINT_DIR / '4'} (meta-step 4)" in message
  assert "update skipped (1 in a row" in text
  # Bit for bit up to 4 (NaN norm included), then the skips.
  original = (
      (poisoned_run["out"] / run_folder.METRICS_FILE).read_text().splitlines()
  )
  resumed = (out / run_folder.METRICS_FILE).read_text().splitlines()
  assert resumed[:5] == original
  history = history_lib.MetricsHistory.read_csv(out / run_folder.METRICS_FILE)
  assert list(history.steps) == [1, 2, 3, 4, 5, 6, 7]
  np.testing.assert_array_equal(
      history.column("consecutive_skips"), [0, 0, 1, 0, 1, 2, 3]
  )
  np.testing.assert_array_equal(
      history.column("skipped_updates"), [0, 0, 1, 1, 2, 3, 4]
  )
  # The export of the first run is left alone.
  assert (
      weights_lib.load_metadata(out / run_folder.META_PARAMS_FILE)["meta_step"]
      == 4
  )
  template = plan_lib.abstract_state(plan.population, plan.rule)
  with ckpt_lib.CheckpointManager(out / run_folder.CHECKPOINT_DIR) as manager:
    assert manager.all_steps() == [2, 4]
    for step in manager.all_steps():
      restored = manager.restore(template, step)  # refuses non-finite ones
      assert all_finite(restored.state)
  assert restored.extra["divergence"]["skipped_updates"] == 1


def test_flipped_bit_in_the_newest_checkpoint_is_caught_on_resume(
    plan, poisoned_run, tmp_path
):
  """A run resumed to meta-step 4 writes a sound checkpoint 4; one bit of
  its data flipped, resuming again moves it aside in one line, continues
  from checkpoint 2 and ends bit for bit as the uninterrupted run (metrics,
  export and checkpoint 4)."""
  out = tmp_path / "run"
  shutil.copytree(poisoned_run["out"], out)
  shutil.rmtree(out / run_folder.CHECKPOINT_DIR / "4")  # the garbage one
  config = faulty_config(out)
  config.update(
      num_meta_steps=4, checkpoint_every=2, max_consecutive_skips=3, resume=True
  )
  settings = settings_lib.MetaTrainSettings.from_config(config)
  # The plan's population: the same faults.
  resumed_plan = dataclasses.replace(plan, run_settings=settings)
  mt.run(resumed_plan, lambda _: None, False)
  template = plan_lib.abstract_state(plan.population, plan.rule)
  sound = ckpt_lib.restore_latest(out / run_folder.CHECKPOINT_DIR, template)
  assert sound.step == 4
  flipped = flip_one_bit(out / run_folder.CHECKPOINT_DIR / "4")
  lines = []
  result = mt.run(resumed_plan, lines.append, False)
  mt.write(resumed_plan, result, lines.append)
  damaged = [line for line in lines if "is damaged" in line]
  assert len(damaged) == 1 and damaged[0].startswith("Checkpoint 4 is damaged")
  assert f"{flipped.name} differs from its digest" in damaged[0]
  assert "4.damaged" in damaged[0]
  assert any("Resuming from" in x and "meta-step 2)" in x for x in lines)
  assert (out / run_folder.METRICS_FILE).read_text() == (
      poisoned_run["out"] / run_folder.METRICS_FILE
  ).read_text()
  exported = weights_lib.load_meta_params(out / run_folder.META_PARAMS_FILE)
  uninterrupted = weights_lib.load_meta_params(
      poisoned_run["out"] / run_folder.META_PARAMS_FILE
  )
  for a, b in zip(
      jax.tree.leaves(exported), jax.tree.leaves(uninterrupted), strict=True
  ):
    np.testing.assert_array_equal(a, b)
  again = ckpt_lib.restore_latest(out / run_folder.CHECKPOINT_DIR, template)
  assert again.step == 4
  for a, b in zip(
      jax.tree.leaves(again.state), jax.tree.leaves(sound.state), strict=True
  ):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_diverged_exits_with_status_3_and_one_line(tmp_path):
  code = (
      "from disco import errors\n"
      "from disco.launch import common\n"
      "def body(config):\n"
      "  raise errors.Diverged('Meta-training diverged at meta-step 7:\\nx')\n"
      "common.run_launcher('disco-meta-train', '', 'meta_train', body)\n"
  )
  result = subprocess.run(
      [sys.executable, "-c", code],
      cwd=tmp_path,
      env=subprocess_env(),
      capture_output=True,
      text=True,
      timeout=300,
  )
  assert result.returncode == 3, result.stderr[-3000:]
  assert result.stderr.splitlines() == [
      "disco-meta-train: error: Meta-training diverged at meta-step 7: x"
  ]
