"""Run folders a team can trust (issue 45): atomic outputs, one writer per
folder, no stale reuse, no code from data files, one line for bad files,
full disks, exhausted memory and signals.

Most tests run a launcher from the command line, as a user would, at tiny
sizes; the faults a shared machine cannot make for real (a full disk, an
exhausted device memory, a signal at a given moment) are injected by
``tests/faults.py``.
"""

from __future__ import annotations

import bz2
import errno
import json
import logging
import os
from pathlib import Path
import pickle
import shutil
import signal
import subprocess
import sys
import time
import tracemalloc
import warnings
import zipfile

import faults
import filelock
import numpy as np
import pytest

from disco import comparison
from disco import compile_cache
from disco import errors
from disco import evaluation
from disco import files
from disco import run_folders
from disco import stopping
from disco import weights
from disco.environments import xminigrid_envs
from disco.meta import checkpoints as ckpt_lib
from disco.meta import follower
from disco.meta import run_folder as meta_run_folder
from disco.meta import trainer as mt
from disco.update_rules import resolve

from meta_settings import TINY_FLAGS
from meta_settings import TINY_LPG_FLAGS
from meta_settings import subprocess_env
from meta_settings import tiny_config
from test_evaluate_launcher import tiny_config as tiny_eval_config

EVAL_FLAGS = faults.TINY_EVAL_FLAGS
COMPARE_FLAGS = faults.TINY_COMPARE_FLAGS
META_FLAGS = [
    *TINY_FLAGS,
    *TINY_LPG_FLAGS,
    "--config.num_meta_steps=2",
]


def launch(launcher, args, cwd, fault=None):
  return subprocess.run(
      faults.command(launcher, args, fault),
      cwd=cwd,
      env=subprocess_env(),
      capture_output=True,
      text=True,
      timeout=600,
  )


def error_lines(result) -> list[str]:
  """stderr without progress bars."""
  return [
      line
      for line in result.stderr.splitlines()
      if line.strip() and "<" not in line.partition("[")[2][:12]
  ]


def assert_one_line(result, status: int, program: str, match: str) -> str:
  lines = error_lines(result)
  assert result.returncode == status, result.stderr[-3000:]
  assert len(lines) == 1, result.stderr[-3000:]
  assert lines[0].startswith(f"{program}: error: "), lines[0]
  assert match in lines[0], lines[0]
  return lines[0]


# ------------------------------------------------- no code from data ----


def _payload_pickle(path: Path, marker: Path) -> None:
  class Payload:

    def __reduce__(self):
      return (Path.touch, (marker,))

  with bz2.open(path, "wb") as f:
    pickle.dump(dict(goals=Payload()), f)


def test_a_crafted_run_folder_runs_no_code(tmp_path):
  """disco-validate on someone else's run folder whose config imports a
  module of the folder and names a pickle as an XLand ruleset file: one
  line, exit 2, and neither ran (no marker file)."""
  marker = tmp_path / "MARKER"
  run = tmp_path / "their-run"
  run.mkdir()
  _payload_pickle(run / "ruleset.bz2", marker)
  (run / "helper_rules.py").write_text(
      f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n"
  )
  saved = dict(
      imports="helper_rules",
      population=[
          dict(
              env="xminigrid/XLand-MiniGrid-R1-9x9",
              env_settings=dict(benchmark_path=str(run / "ruleset.bz2")),
          )
      ],
  )
  (run / "config.json").write_text(json.dumps(dict(config=saved)))
  result = launch("validate", [str(run)], cwd=run)  # the module is on sys.path
  line = assert_one_line(result, 2, "disco-validate", "--config.imports=")
  assert "helper_rules" in line and "--config.benchmark_paths=" in line
  assert not marker.exists()


def test_code_settings_run_only_when_the_command_line_repeats_them(tmp_path):
  saved = dict(
      imports="a,b",
      population=[dict(env="catch", env_settings=dict(benchmark_path="x.bz2"))],
  )
  with pytest.raises(errors.UsageError, match="imports module.s. b"):
    follower.check_code_settings(saved, tmp_path, "a", "x.bz2")
  with pytest.raises(errors.UsageError, match=r"ruleset file.s. x.bz2"):
    follower.check_code_settings(saved, tmp_path, "a,b", "")
  follower.check_code_settings(saved, tmp_path, "b,a", "./x.bz2")


def test_xland_rulesets_load_without_running_code(tmp_path):
  marker = tmp_path / "MARKER"
  _payload_pickle(tmp_path / "evil.bz2", marker)
  with pytest.raises(ValueError, match="only NumPy arrays are read"):
    xminigrid_envs.load_ruleset(tmp_path / "evil.bz2", 0)
  assert not marker.exists()
  # xminigrid's own format (NumPy or JAX arrays) still loads.
  jnp = pytest.importorskip("jax.numpy")
  good = dict(
      goals=jnp.zeros((2, 5), jnp.uint8),
      rules=np.zeros((2, 1, 7), np.uint8),
      init_tiles=np.zeros((2, 2, 2), np.uint8),
      num_rules=np.zeros((2, 1), np.uint8),
  )
  with bz2.open(tmp_path / "good.bz2", "wb") as f:
    pickle.dump(good, f, protocol=pickle.HIGHEST_PROTOCOL)
  loaded = xminigrid_envs.load_benchmark(tmp_path / "good.bz2")
  assert {k: v.shape for k, v in loaded.items()} == {
      k: v.shape for k, v in good.items()
  }


# ------------------------------------------------------- rule files ----


def _zip_bomb(path: Path, declared: int = 64 << 20) -> Path:
  """A small .npz whose one array declares ``declared`` bytes of zeros (and
  whose metadata names a rule with meta-parameters)."""
  with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
    with z.open("__disco_metadata__.npy", "w") as f:
      np.lib.format.write_array(f, np.array(json.dumps(dict(rule="lpg"))))
    with z.open("lstm/w.npy", "w", force_zip64=True) as f:
      np.lib.format.write_array_header_1_0(
          f, dict(descr="<f4", fortran_order=False, shape=(declared // 4,))
      )
      chunk = bytes(1 << 22)
      for _ in range(declared // len(chunk)):
        f.write(chunk)
  return path


def _bad_rule_file(kind: str, folder: Path) -> Path:
  if kind == "npy":
    path = folder / "rule.npy"
    np.save(path, np.zeros(3, np.float32))
  elif kind == "text":
    path = folder / "rule.npz"
    path.write_text("<html>404 not found</html>\n")
  else:
    path = _zip_bomb(folder / "bomb.npz")
  return path


def _evaluate_rule_file(path: Path, tmp_path: Path):
  """disco-eval of the rule file ``path`` into ``tmp_path/o``."""
  return launch(
      "evaluate",
      [
          *EVAL_FLAGS,
          f"--config.rule={path}",
          f"--config.output_dir={tmp_path}/o",
      ],
      cwd=tmp_path,
  )


@pytest.mark.parametrize(
    "kind, match",
    [
        ("npy", "is a single .npy array"),
        ("text", "not a valid .npz archive"),
        ("zip_bomb", "refused before decompressing"),
    ],
)
def test_bad_rule_files_are_one_line(kind, match, tmp_path):
  path = _bad_rule_file(kind, tmp_path)
  result = _evaluate_rule_file(path, tmp_path)
  line = assert_one_line(result, 2, "disco-eval", match)
  assert "allow_pickle" not in line  # numpy's hint to load it unsafely


def test_a_zip_bomb_is_refused_with_bounded_memory(tmp_path):
  path = _zip_bomb(tmp_path / "bomb.npz")
  assert path.stat().st_size < (1 << 20)
  tracemalloc.start()
  try:
    with pytest.raises(errors.UsageError, match="refused before"):
      resolve.resolve_rule(str(path))
    with pytest.raises(weights.WeightsError, match="refused before"):
      weights.load_meta_params(path)
    peak = tracemalloc.get_traced_memory()[1]
  finally:
    tracemalloc.stop()
  assert peak < (16 << 20), peak


def test_a_lying_bzip2_archive_is_refused_unread(tmp_path):
  """Only stored and deflate members are read (zipfile bounds those by the
  declared size while inflating): the bzip2 member is refused before a byte
  of it is decompressed, in one line from the command line."""
  path = faults.lying_bzip2_npz(tmp_path / "bomb.npz", 256 << 20)
  assert path.stat().st_size < (64 << 10)
  tracemalloc.start()
  try:
    with pytest.raises(errors.UsageError, match="stored or deflate"):
      resolve.resolve_rule(str(path))
    peak = tracemalloc.get_traced_memory()[1]
  finally:
    tracemalloc.stop()
  assert peak < (16 << 20), peak
  result = _evaluate_rule_file(path, tmp_path)
  assert_one_line(result, 2, "disco-eval", "bzip2")
  assert not (tmp_path / "o").exists()


def test_shapes_are_checked_before_the_data_is_read(tmp_path, monkeypatch):
  path = weights.save_meta_params(
      tmp_path / "p.npz", {"m": {"w": np.ones((3, 4), np.float32)}}
  )
  read = []
  original = np.lib.format.read_array
  monkeypatch.setattr(
      np.lib.format,
      "read_array",
      lambda *a, **k: read.append(1) or original(*a, **k),
  )
  expected = {"m": {"w": np.zeros((4, 3), np.float32)}}
  with pytest.raises(weights.WeightsError, match="shape mismatch"):
    weights.load_meta_params(path, expected)
  assert not read


@pytest.mark.parametrize(
    "metadata, match",
    [
        (
            dict(settings=dict(learning_rate=-1e9)),
            "learning_rate=-1000000000.0",
        ),
        (dict(settings=dict(adam_eps=0.0)), "adam_eps=0.0"),
        (dict(settings=dict(max_grad_norm=-3)), "max_grad_norm=-3"),
        (dict(settings=dict(loss_mask="all")), "loss_mask='all'"),
        (
            dict(settings=dict(hyper_params=dict(discount_factor=1.5))),
            "hyper_params.discount_factor=1.5",
        ),
        (
            dict(rule_kwargs=dict(moving_average_decay=5)),
            "moving_average_decay=5",
        ),
        (
            dict(rule_kwargs=dict(moving_average_eps=-1)),
            "moving_average_eps=-1",
        ),
    ],
)
def test_settings_in_a_rule_file_are_checked_like_flags(
    metadata, match, tmp_path
):
  path = weights.save_meta_params(
      tmp_path / "rule.npz", {}, metadata=dict(rule="actor_critic", **metadata)
  )
  with pytest.raises(errors.UsageError) as info:
    resolve.resolve_rule(str(path))
  assert str(info.value).startswith(
      f"The settings in the metadata of rule file {path}: "
  )
  assert match in str(info.value)


def test_a_rule_file_with_an_out_of_range_setting_is_one_line(tmp_path):
  path = weights.save_meta_params(
      tmp_path / "rule.npz",
      {},
      metadata=dict(rule="actor_critic", settings=dict(learning_rate=-1e9)),
  )
  result = _evaluate_rule_file(path, tmp_path)
  assert_one_line(result, 2, "disco-eval", "must be a finite number > 0")
  assert not (tmp_path / "o").exists()
  flag = launch(  # the same value as a flag: refused alike
      "evaluate",
      [
          *EVAL_FLAGS,
          "--config.hyper_params.td_lambda=2",
          f"--config.output_dir={tmp_path}/f",
      ],
      cwd=tmp_path,
  )
  assert_one_line(flag, 2, "disco-eval", "hyper_params.td_lambda=2")


# ------------------------------------------------------ atomic files ----


def test_atomic_files_have_normal_permissions_and_survive_failures(tmp_path):
  old = os.umask(0o022)
  try:
    npz = weights.save_meta_params(
        tmp_path / "p.npz", {"m": {"w": np.ones(2, np.float32)}}
    )
    text = files.write_json(tmp_path / "a.json", dict(x=1))
  finally:
    os.umask(old)
  expected = 0o666 & ~files._UMASK  # pylint: disable=protected-access
  assert npz.stat().st_mode & 0o777 == expected
  assert text.stat().st_mode & 0o777 == expected
  # A write that fails half-way leaves the old file whole, and no
  # temporary file.
  with pytest.raises(OSError):
    with files.atomic_write(text) as f:
      f.write(b'{"x": ')
      raise OSError(errno.ENOSPC, "No space left on device")
  assert json.loads(text.read_text()) == dict(x=1)
  assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "p.npz"]


# ---------------------------------------------------------- overwrite ----


def test_overwrite_with_fewer_seeds_leaves_no_old_seed_files(tmp_path):
  """In this process (disco-eval's library call; the launcher only parses
  flags into the same config)."""
  config = tiny_eval_config(tmp_path)
  out = Path(config.output_dir)
  evaluation.evaluate(config, log=lambda _: None, progress=False)
  assert {p.name for p in out.glob("params_seed*")} == {
      "params_seed3.npz",
      "params_seed4.npz",
  }
  assert run_folders.read_marker(out)["kind"] == "eval"
  config.update(num_seeds=1, overwrite=True)
  evaluation.evaluate(config, log=lambda _: None, progress=False)
  assert [p.name for p in out.glob("params_seed*")] == ["params_seed3.npz"]
  assert json.loads((out / "summary.json").read_text())["seeds"] == [3]


def _tree(folder: Path) -> dict[str, bytes]:
  return {
      p.relative_to(folder).as_posix(): p.read_bytes()
      for p in sorted(folder.rglob("*"))
      if p.is_file() and not p.name.startswith(".disco-lock")
  }


def _meta_train_folder(out: Path) -> None:
  """A meta-training run folder as disco-meta-train leaves it (its marker,
  a checkpoint, the exported rule, its config)."""
  with run_folders.claim_output_dir(out, "disco-meta-train") as lock:
    run_folders.open_run_folder(out, lock, meta_run_folder.RUN_KIND)
  (out / "checkpoints" / "2").mkdir(parents=True)
  (out / "checkpoints" / "2" / "state").write_bytes(b"weeks of compute")
  (out / "meta_params.npz").write_bytes(b"the discovered rule")
  (out / "config.json").write_text("{}")


@pytest.mark.parametrize("folder", ["project", "meta_train", "own_notes"])
def test_overwrite_refuses_a_folder_it_did_not_write(folder, tmp_path):
  """``disco-eval --config.overwrite=True`` removes only what an evaluation
  wrote: a project folder that happens to hold a config.json, a
  meta-training run, and an evaluation run to which the user added a file
  are each refused in one line naming what would be lost, and nothing in
  them changes."""
  out = tmp_path / "out"
  if folder == "project":
    (out / "src").mkdir(parents=True)
    (out / "src" / "model.py").write_text("print('mine')")
    (out / "data").mkdir()
    (out / "config.json").write_text('{"lr": 3}')
    match = "holds files an evaluation run does not write (data, src)"
  elif folder == "meta_train":
    _meta_train_folder(out)
    match = "holds a meta-training run (.disco-run)"
  else:
    config = tiny_eval_config(tmp_path, output_dir=str(out))
    evaluation.evaluate(config, log=lambda _: None, progress=False)
    (out / "notes.txt").write_text("what I saw")
    match = "does not write (notes.txt)"
  before = _tree(out)
  result = launch(
      "evaluate",
      [*EVAL_FLAGS, f"--config.output_dir={out}", "--config.overwrite=True"],
      cwd=tmp_path,
  )
  assert_one_line(result, 2, "disco-eval", match)
  assert _tree(out) == before


def test_a_run_folder_of_an_older_disco_is_not_overwritten(tmp_path):
  """A run folder without the marker (written before it existed, or by
  hand) holds nothing overwrite may remove."""
  config = tiny_eval_config(tmp_path)
  out = Path(config.output_dir)
  evaluation.evaluate(config, log=lambda _: None, progress=False)
  (out / run_folders.MARKER_FILE).unlink()
  before = _tree(out)
  config.update(overwrite=True)
  with pytest.raises(errors.UsageError, match="has no .disco-run marker"):
    evaluation.evaluate(config, log=lambda _: None, progress=False)
  assert _tree(out) == before


def test_a_run_without_config_json_is_still_a_run(tmp_path):
  """The no-overwrite check sees a run where overwrite would: seed files
  and a summary without config.json are refused, not silently mixed with
  the next run's."""
  config = tiny_eval_config(tmp_path)
  out = Path(config.output_dir)
  evaluation.evaluate(config, log=lambda _: None, progress=False)
  (out / "config.json").unlink()
  result = launch(
      "evaluate",
      [*EVAL_FLAGS, f"--config.output_dir={out}", "--config.num_seeds=1"],
      cwd=tmp_path,
  )
  assert_one_line(result, 2, "disco-eval", "already holds an evaluation run")
  assert (out / "params_seed4.npz").exists()


def test_the_next_run_removes_temporary_files_of_interrupted_writes(tmp_path):
  target = tmp_path / "summary.json"
  stale = tmp_path / ".summary.json.abc123.tmp"
  stale.write_bytes(b"half")
  other = tmp_path / ".metrics.csv.def456.tmp"
  other.write_bytes(b"half")
  files.write_json(target, dict(x=1))
  assert not stale.exists() and other.exists()  # that file's own only
  kind = run_folders.RunKind("eval", "an evaluation run", ("*.json",), "")
  with run_folders.claim_output_dir(tmp_path, "test") as lock:
    run_folders.open_run_folder(tmp_path, lock, kind, resume=True)
  assert not other.exists()
  assert json.loads(target.read_text()) == dict(x=1)


# -------------------------------------------------------- one writer ----


def test_a_second_process_on_a_locked_folder_gets_one_line(tmp_path):
  out = tmp_path / "run"
  out.mkdir()
  # Held here as a launcher holds it (the file disco.files.FolderLock locks).
  with filelock.FileLock(str(out / ".disco-lock"), timeout=0):
    (out / ".disco-lock.owner").write_text(
        json.dumps(dict(program="disco-eval", pid=os.getpid(), host="here"))
    )
    result = launch(
        "evaluate", [*EVAL_FLAGS, f"--config.output_dir={out}"], tmp_path
    )
  line = assert_one_line(result, 2, "disco-eval", "is in use by disco-eval")
  assert f"pid {os.getpid()}" in line
  assert not (out / "config.json").exists()


def test_a_deleted_lock_file_does_not_admit_a_second_writer(tmp_path):
  """The writer also holds a lock on the folder itself: deleting
  ``.disco-lock`` (and its owner file) during a run leaves the folder
  locked."""
  out = tmp_path / "run"
  with run_folders.claim_output_dir(out, "disco-eval"):
    (out / files.LOCK_FILE).unlink()
    (out / (files.LOCK_FILE + files.OWNER_SUFFIX)).unlink()
    result = launch(
        "evaluate", [*EVAL_FLAGS, f"--config.output_dir={out}"], tmp_path
    )
    assert_one_line(result, 2, "disco-eval", "is in use by")
    assert not (out / "config.json").exists()
  with run_folders.claim_output_dir(out, "disco-eval"):  # free again
    pass


def test_a_run_that_died_is_named_at_the_next_start(tmp_path):
  """A run killed outright (as an abort out of host memory kills it) cannot
  say so; the next run in its folder does, in one warning line, and goes
  on."""
  out = tmp_path / "run"
  first = subprocess.Popen(
      faults.command("evaluate", [*EVAL_FLAGS, f"--config.output_dir={out}"]),
      cwd=tmp_path,
      env=subprocess_env(),
      stdout=subprocess.DEVNULL,
      stderr=subprocess.DEVNULL,
  )
  try:
    while not (out / "config.json").exists() and first.poll() is None:
      time.sleep(0.05)
  finally:
    first.kill()
    first.wait()
  assert first.returncode == -signal.SIGKILL
  result = launch(
      "evaluate",
      [*EVAL_FLAGS, f"--config.output_dir={out}", "--config.overwrite=True"],
      tmp_path,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  (line,) = error_lines(result)
  assert line.startswith(f"disco-eval: warning: the last run in {out} ")
  assert f"pid {first.pid}" in line and "ended without finishing" in line
  assert (out / "summary.json").exists()


def test_folders_a_killed_grid_left_are_named_in_one_line(tmp_path, capsys):
  """A killed vmapped tuning grid leaves every point's folder with its owner
  file; resumed, it names them in one line per earlier holder."""
  grid = dict(program="disco-compare", pid=4242, host="h", since="then")
  other = dict(grid, pid=77)
  folders = [tmp_path / "tune" / f"point{i}" for i in range(3)]
  folders.append(tmp_path / "alone")
  for folder, owner in zip(folders, [grid, grid, grid, other], strict=True):
    folder.mkdir(parents=True)
    files.write_json(folder / (files.LOCK_FILE + files.OWNER_SUFFIX), owner)
  locks = [
      run_folders.claim_output_dir(f, "disco-compare", warn=False)
      for f in folders
  ]
  try:
    assert not capsys.readouterr().err
    run_folders.warn_abandoned("disco-compare", locks)
  finally:
    for lock in locks:
      lock.release()
  lines = capsys.readouterr().err.splitlines()
  assert len(lines) == 2, lines
  assert lines[0].startswith(
      "disco-compare: warning: the last runs in 3 folders under "
      f"{tmp_path / 'tune'} (disco-compare (pid 4242 on host h, since then))"
  )
  assert lines[1].startswith(
      f"disco-compare: warning: the last run in {folders[3]} (disco-compare "
      "(pid 77 "
  )
  assert all("ended without finishing" in line for line in lines)


def test_one_writer_per_folder_in_every_launcher(tmp_path):
  out = tmp_path / "meta"
  with files.FolderLock(out, "someone"):
    with pytest.raises(errors.UsageError, match="in use by someone"):
      mt.train(tiny_config(output_dir=str(out)), progress=False)
    # A follower of the run takes its own lock: the run's does not stop it,
    # a second follower's does.
    with files.FolderLock(out, "disco-validate", follower.LOCK_FILE):
      with pytest.raises(files.FolderInUse, match="disco-validate"):
        files.FolderLock(out, "another", follower.LOCK_FILE).acquire()
  # Released: the folder is free again.
  with files.FolderLock(out, "next"):
    pass


# ------------------------------------------------------ disco-compare ----


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
  out = tmp_path_factory.mktemp("compare") / "sweep"
  result = launch(
      "compare", [*COMPARE_FLAGS, f"--config.output_dir={out}"], out.parent
  )
  assert result.returncode == 0, result.stderr[-3000:]
  return out


def _cell(out: Path) -> Path:
  return out / "runs" / "actor_critic" / "catch_5x5"


def test_a_truncated_summary_is_run_again(sweep, tmp_path):
  out = tmp_path / "sweep"
  shutil.copytree(sweep, out)
  summary = _cell(out) / "summary.json"
  summary.write_bytes(summary.read_bytes()[:100])
  result = launch(
      "compare", [*COMPARE_FLAGS, f"--config.output_dir={out}"], tmp_path
  )
  assert result.returncode == 0, result.stderr[-3000:]
  assert "0 finished already" in result.stdout
  assert "summary.json is damaged" in result.stdout
  assert json.loads(summary.read_text())["seeds"] == [0, 1]


def test_a_rerun_with_a_new_budget_does_not_report_old_runs(sweep, tmp_path):
  out = tmp_path / "sweep"
  shutil.copytree(sweep, out)
  result = launch(
      "compare",
      [
          *COMPARE_FLAGS,
          f"--config.output_dir={out}",
          "--config.total_env_steps=400",
      ],
      tmp_path,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  assert "0 finished already" in result.stdout
  assert "total_env_steps: saved 200, now 400" in result.stdout
  summary = json.loads((_cell(out) / "summary.json").read_text())
  assert summary["env_steps"] == 400
  stats = json.loads((out / "statistics.json").read_text())
  assert stats["evaluation_points"][-1] == 400


def test_compare_run_folders_stay_inside_output_dir(tmp_path, monkeypatch):
  rule = tmp_path / "x" / "my rule"  # a rule file without .npz
  rule.parent.mkdir()
  with open(rule, "wb") as f:
    metadata = json.dumps(dict(rule="actor_critic"))
    np.savez(f, __disco_metadata__=np.array(metadata))
  (tmp_path / "work" / "deep").mkdir(parents=True)
  monkeypatch.chdir(tmp_path / "work" / "deep")
  config = comparison.default_config()
  config.update(
      rules=("../../x/my rule", str(rule), "actor_critic"),
      envs=("catch:rows=5,columns=5",),
      num_seeds=2,
      output_dir=str(tmp_path / "out" / "sweep"),
  )
  with pytest.raises(errors.UsageError, match="twice"):  # one label
    comparison.build(config)
  config.rules = ("../../x/my rule", "actor_critic")
  plan = comparison.build(config)
  runs = (tmp_path / "out" / "sweep" / "runs").resolve()
  for cell in plan.cells:
    assert cell.output_dir.resolve().is_relative_to(runs), cell
  assert [c.label for c in plan.cells] == ["my_rule", "actor_critic"]


# -------------------------------------------------- resources, signals ----


def test_out_of_memory_is_one_line_and_exit_1(tmp_path):
  out = tmp_path / "run"
  result = launch(
      "evaluate", [*EVAL_FLAGS, f"--config.output_dir={out}"], tmp_path, "oom"
  )
  line = assert_one_line(result, 1, "disco-eval", "Out of device memory")
  assert "--config.overwrite=True" in line


def test_a_full_disk_is_one_line_and_exit_1(tmp_path):
  out = tmp_path / "run"
  result = launch(
      "evaluate",
      [*EVAL_FLAGS, f"--config.output_dir={out}"],
      tmp_path,
      "enospc_summary",
  )
  line = assert_one_line(result, 1, "disco-eval", "The disk is full")
  assert "--config.overwrite=True" in line
  # Not a summary cut short: none (the run is unfinished).
  assert not (out / "summary.json").exists()
  assert not list(out.glob(".*.tmp"))


def test_a_full_disk_at_a_checkpoint_is_one_line_with_the_resume_command(
    tmp_path,
):
  out = tmp_path / "meta"
  result = launch(
      "meta_train",
      [
          *META_FLAGS,
          "--config.checkpoint_every=1",
          f"--config.output_dir={out}",
      ],
      tmp_path,
      "enospc_checkpoint",
  )
  line = assert_one_line(result, 1, "disco-meta-train", "The disk is full")
  assert f"--config.resume=True --config.output_dir={out}" in line


def _small_tmpfs(folder: Path, size: str) -> Path:
  """A tmpfs of ``size`` mounted at ``folder`` (skips the test where this
  process may not mount one); unmounted by the caller."""
  folder.mkdir()
  if os.geteuid() != 0 or shutil.which("mount") is None:
    pytest.skip("mounting a small tmpfs needs root")
  done = subprocess.run(
      ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
      capture_output=True,
      check=False,
  )
  if done.returncode != 0:
    pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
  return folder


def test_a_tmpfs_filling_during_a_checkpoint_gives_one_line(tmp_path):
  """A real full disk (a 96 KB tmpfs) in the middle of orbax's save: its
  writer threads' tracebacks are folded into the launcher's one line."""
  disk = _small_tmpfs(tmp_path / "disk", "96k")
  try:
    out = disk / "meta"
    result = launch(
        "meta_train",
        [
            *META_FLAGS,
            "--config.checkpoint_every=1",
            f"--config.output_dir={out}",
        ],
        tmp_path,
    )
    line = assert_one_line(result, 1, "disco-meta-train", "The disk is full")
    assert f"--config.output_dir={out}" in line
    assert "Traceback" not in result.stderr
  finally:
    subprocess.run(["umount", str(disk)], check=False)


def test_a_failing_save_prints_nothing_but_its_error(capsys):
  """What a save logs (orbax, to the absl logger) and prints is let out
  when it completes and dropped when it raises."""
  absl_logger = logging.getLogger("absl")
  with ckpt_lib.held_output():
    absl_logger.warning("saved fine")
    print("and said so", file=sys.stderr)
  assert "and said so" in capsys.readouterr().err
  with pytest.raises(OSError):
    with ckpt_lib.held_output():
      absl_logger.error("writer thread: Traceback ...")
      print("Traceback (most recent call last): ...", file=sys.stderr)
      raise OSError(errno.ENOSPC, "No space left on device")
  assert "Traceback" not in capsys.readouterr().err


def test_a_full_compilation_cache_folder_is_one_warning(tmp_path, capsys):
  """JAX warns once per program it cannot write to the cache: the first
  becomes one line, the rest are dropped, other warnings go on as before."""
  with warnings.catch_warnings(record=True) as shown:
    warnings.simplefilter("always")
    try:
      compile_cache.enable(str(tmp_path / "cache"), "disco-eval")
      for name in ("jit_a", "jit_b", "jit_c"):
        warnings.warn(
            "Error writing persistent compilation cache entry for "
            f"'{name}': OSError: [Errno 28] No space left on device",
            stacklevel=1,
        )
      warnings.warn("something else", stacklevel=1)
    finally:
      compile_cache.enable("off", "disco-eval")
  (line,) = capsys.readouterr().err.strip().splitlines()
  assert line.startswith("disco-eval: warning: compiled programs cannot")
  assert "No space left on device" in line
  assert [str(w.message) for w in shown] == ["something else"]


def test_a_second_sigterm_does_not_cut_the_exit_save_short(tmp_path):
  out = tmp_path / "meta"
  result = launch(
      "meta_train",
      [
          *META_FLAGS,
          "--config.checkpoint_every=0",
          f"--config.output_dir={out}",
      ],
      tmp_path,
      "sigterm_twice",
  )
  assert result.returncode == 130, result.stderr[-3000:]
  assert "Traceback" not in result.stderr, result.stderr[-3000:]
  assert "Interrupted at meta-step 1; saved" in result.stdout
  with ckpt_lib.CheckpointManager(
      out / meta_run_folder.CHECKPOINT_DIR
  ) as manager:
    assert manager.all_steps() == [1]
    assert manager.read_record(1)["step"] == 1


def test_signals_set_a_flag_and_raise_nothing():
  state = stopping._STOP  # pylint: disable=protected-access
  saved = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)]
  stopping.install_stop_handlers("test")
  try:
    os.kill(os.getpid(), signal.SIGTERM)
    assert stopping.stop_requested()
    with pytest.raises(errors.Stopped, match="SIGTERM: stopped here"):
      stopping.check_stop("here")
    with stopping.signals_deferred():
      os.kill(os.getpid(), signal.SIGINT)  # noted, nothing raised
  finally:
    signal.signal(signal.SIGINT, saved[0])
    signal.signal(signal.SIGTERM, saved[1])
    state.event.clear()
    state.signal_name = None


def test_resource_errors_name_the_resource():
  hint = "do X."
  with pytest.raises(errors.ResourceError, match=r"disk is full .* then do X"):
    with errors.resource_errors(hint):
      raise OSError(errno.ENOSPC, "No space left on device", "/x/summary.json")
  with pytest.raises(errors.ResourceError, match="Out of device memory"):
    with errors.resource_errors(hint):
      raise RuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 8 GiB")
  with pytest.raises(errors.ResourceError, match="Out of host memory.*do X"):
    with errors.resource_errors(hint):
      raise MemoryError()
  with pytest.raises(KeyError):
    with errors.resource_errors(hint):
      raise KeyError("other")


def test_setting_differences_name_the_nested_setting_that_changed():
  saved = dict(
      seed=1,
      output_dir="a",
      rule_settings=dict(
          learning_rate=1e-3,
          rule_kwargs=dict(meta_learning_rate=1e-3, bounds=(0.0, 1.0)),
      ),
  )
  current = dict(
      seed=1,
      output_dir="b",
      rule_settings=dict(
          learning_rate=1e-3,
          rule_kwargs=dict(meta_learning_rate=3e-3, bounds=[0.0, 1.0]),
          loss_mask="valid",
      ),
  )
  assert run_folders.setting_differences(saved, current, ("output_dir",)) == [
      "rule_settings.loss_mask: saved '<absent>', now 'valid'",
      "rule_settings.rule_kwargs.meta_learning_rate: saved 0.001, now 0.003",
  ]
  assert run_folders.setting_differences(saved, saved) == []
  assert run_folders.setting_differences(
      dict(clip=float("nan"), cap=float("inf")),
      dict(clip=float("nan"), cap=float("-inf")),
  ) == ["cap: saved 'inf', now '-inf'"]
