"""Run-folder fault probes (issue 45): what each launcher does, and leaves on
disk, when its folder, its inputs, the disk, the device memory or a signal
misbehave.

  python benchmarks/fault_probes.py --checkout before=/tmp/old --checkout after=.
  python benchmarks/fault_probes.py --probes npy zip_bomb   # some probes only

Every probe runs the launchers from the command line (``python -m
disco.launch.<launcher>``) in a fresh temporary folder, with the code of each
``--checkout NAME=DIR`` first on ``PYTHONPATH`` (``DIR`` holds ``disco/`` and
``configs/``; ``git archive <commit> | tar -x -C DIR`` makes one, then link
``DIR/disco/configs`` to ``DIR/configs`` so that the older code reads its own
configs), and prints one markdown table: per probe and checkout, the exit
status, the lines on stderr (and how many of them are tracebacks), the peak
memory of the process, and what was left on disk. Faults that cannot be made
for real on a shared machine (a full disk, an exhausted device memory, a
signal at a given moment) are injected by a small wrapper that patches one
function of the process before the launcher starts (``tests/faults.py``); no
shipped config has a switch for them.
"""

from __future__ import annotations

import bz2
from collections.abc import Iterator
import contextlib
import importlib.util
import json
import os
from pathlib import Path
import pickle
import random
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time
import zipfile

import numpy as np

if not __package__:  # run as a file: import the other scripts as a package
  sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks import cli
from benchmarks import timing


def _load_faults():
  """``tests/faults.py`` (the faults the tests inject), read from its file:
  the tests are not a package."""
  path = Path(__file__).resolve().parents[1] / "tests" / "faults.py"
  spec = importlib.util.spec_from_file_location("faults", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


faults = _load_faults()

EVAL_FLAGS = faults.TINY_EVAL_FLAGS
COMPARE_FLAGS = faults.TINY_COMPARE_FLAGS
META_FLAGS = (
    "--config.rule=lpg",
    "--config.rule_kwargs.net.hidden_size=8",
    "--config.batch_size=2",
    "--config.rollout_len=3",
    "--config.inner_steps=1",
    "--config.agent.network.dense=(16,)",
    "--config.value_fn.dense=(8,8)",
    "--config.num_meta_steps=2",
    "--config.checkpoint_every=1",
)


class Runner:
  """Runs launchers with one checkout's code."""

  def __init__(self, code: Path):
    self.code = code.resolve()

  def env(self, **extra) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(self.code), *filter(None, [env.get("PYTHONPATH")])]
    )
    env["JAX_PLATFORMS"] = "cpu"
    env.update(extra)
    return env

  def run(
      self,
      launcher: str,
      args,
      cwd: Path,
      fault: str | None = None,
      extra_path: str | None = None,
      wait: bool = True,
      preexec_fn=None,
  ):
    """``(exit status, stderr, peak RSS in MB)`` of one launcher run (or the
    ``Popen`` when not ``wait``)."""
    command = faults.command(launcher, args, fault)
    env = self.env()
    if extra_path:
      env["PYTHONPATH"] = extra_path + os.pathsep + env["PYTHONPATH"]
    proc = subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=preexec_fn,
    )
    if not wait:
      return proc
    return self.finish(proc)

  @staticmethod
  def finish(proc):
    stderr = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, stderr, usage.ru_maxrss / 1024


_PROGRESS = re.compile(r"^.*\[\d+:\d\d[<\]][^\]]*\]")
_TMP = re.compile(r"/tmp/probe-[a-z_]+-[a-z0-9_]+")


def _messages(stderr: str) -> list[str]:
  """The lines of ``stderr`` without progress bars (tqdm's end with
  ``[00:01<00:00, ...]``; a message may follow one on its line)."""
  lines = (_PROGRESS.sub("", line) for line in stderr.splitlines())
  return [line for line in lines if line.strip()]


def _result(status, stderr, rss, disk: str) -> dict:
  lines = _messages(stderr)
  last = lines[-1] if lines else ""
  return dict(
      status=status,
      lines=len(lines),
      tracebacks=sum("Traceback" in line for line in lines),
      rss=rss,
      disk=disk,
      last=last,
  )


def _valid_json(path: Path) -> str:
  if not path.exists():
    return "absent"
  try:
    json.loads(path.read_text())
    return "valid"
  except ValueError:
    return f"INVALID ({path.stat().st_size} bytes)"


# ---------------------------------------------------------------- probes ----


def _crafted_run(tmp: Path, saved: dict) -> Path:
  run = tmp / "someone-elses-run"
  run.mkdir()
  (run / "config.json").write_text(json.dumps(dict(config=saved)))
  return run


def probe_crafted_xland(r: Runner, tmp: Path) -> dict:
  marker = tmp / "MARKER"

  class Payload:

    def __reduce__(self):
      return (os.system, (f"touch {marker}",))

  evil = tmp / "ruleset.bz2"
  with bz2.open(evil, "wb") as f:
    pickle.dump(dict(goals=Payload()), f)
  run = _crafted_run(
      tmp,
      dict(
          population=[
              dict(
                  env="xminigrid/XLand-MiniGrid-R1-9x9",
                  env_settings=dict(benchmark_path=str(evil)),
              )
          ]
      ),
  )
  out = r.run("validate", [str(run)], cwd=tmp)
  return _result(*out, f"code ran (marker file): {marker.exists()}")


def probe_crafted_imports(r: Runner, tmp: Path) -> dict:
  marker = tmp / "MARKER"
  run = _crafted_run(tmp, dict(imports="helper_rules"))
  (run / "helper_rules.py").write_text(
      f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n"
  )
  out = r.run("validate", [str(run)], cwd=run)
  return _result(*out, f"code ran (marker file): {marker.exists()}")


def _eval(r, tmp, out, *extra, **kw):
  return r.run(
      "evaluate", [*EVAL_FLAGS, f"--config.output_dir={out}", *extra], tmp, **kw
  )


def probe_overwrite_fewer_seeds(r: Runner, tmp: Path) -> dict:
  out = tmp / "run"
  _eval(r, tmp, out)
  result = _eval(r, tmp, out, "--config.num_seeds=1", "--config.overwrite=True")
  left = sorted(p.name for p in out.glob("params_seed*.npz"))
  return _result(
      *result, f"seed files after the 1-seed rerun: {', '.join(left)}"
  )


def probe_npz_mode(r: Runner, tmp: Path) -> dict:
  out = tmp / "run"
  result = _eval(r, tmp, out, "--config.num_seeds=1")
  modes = {
      f"{p.stat().st_mode & 0o777:04o}"
      for p in out.iterdir()
      if p.suffix in (".npz", ".json", ".csv", ".png")
  }
  npz = out / "params_seed3.npz"
  mode = f"{npz.stat().st_mode & 0o777:04o}" if npz.exists() else "absent"
  return _result(
      *result, f"params_seed3.npz mode {mode}; all outputs {sorted(modes)}"
  )


def _compare(r, tmp, out, *extra):
  return r.run(
      "compare",
      [*COMPARE_FLAGS, f"--config.output_dir={out}", *extra],
      tmp,
  )


def _cell(out: Path) -> Path:
  return out / "runs" / "actor_critic" / "catch_5x5"


def probe_compare_truncated_summary(r: Runner, tmp: Path) -> dict:
  out = tmp / "sweep"
  _compare(r, tmp, out)
  summary = _cell(out) / "summary.json"
  if summary.exists():
    summary.write_bytes(summary.read_bytes()[:100])
  result = _compare(r, tmp, out)
  return _result(
      *result,
      f"cell summary.json {_valid_json(summary)}; report.md "
      f"{'written' if (out / 'report.md').exists() else 'absent'}",
  )


def probe_compare_new_budget(r: Runner, tmp: Path) -> dict:
  out = tmp / "sweep"
  _compare(r, tmp, out)
  result = _compare(r, tmp, out, "--config.total_env_steps=400")
  summary = _cell(out) / "summary.json"
  steps = (
      json.loads(summary.read_text()).get("env_steps")
      if summary.exists()
      else None
  )
  return _result(
      *result, f"reported run's env steps per seed: {steps} (asked 400)"
  )


def probe_compare_rule_path(r: Runner, tmp: Path) -> dict:
  """A rule file given by a relative path with ``..`` segments and no
  ``.npz`` suffix (its label was the path itself)."""
  rule = tmp / "x" / "rulefile"
  rule.parent.mkdir()
  with open(rule, "wb") as f:
    metadata = json.dumps(dict(rule="actor_critic"))
    np.savez(f, __disco_metadata__=np.array(metadata))
  cwd = tmp / "work" / "deep"
  cwd.mkdir(parents=True)
  out = tmp / "out" / "sweep"
  result = r.run(
      "compare",
      [
          *COMPARE_FLAGS,
          f"--config.output_dir={out}",
          "--config.rules=('../../x/rulefile',)",
      ],
      cwd,
  )
  escaped = sorted(
      str(p.parent.relative_to(tmp))
      for p in tmp.rglob("summary.json")
      if not p.resolve().is_relative_to(out.resolve())
  )
  return _result(
      *result, f"run folders outside output_dir: {', '.join(escaped) or 'none'}"
  )


def _rule_file_probe(r: Runner, tmp: Path, path: Path) -> dict:
  out = tmp / "run"
  result = _eval(r, tmp, out, f"--config.rule={path}")
  return _result(
      *result, f"output folder: {'created' if out.exists() else 'none'}"
  )


def probe_npy(r: Runner, tmp: Path) -> dict:
  path = tmp / "rule.npy"
  np.save(path, np.zeros(3, np.float32))
  return _rule_file_probe(r, tmp, path)


def probe_text(r: Runner, tmp: Path) -> dict:
  path = tmp / "rule.npz"
  path.write_text("<html>404 not found</html>\n")
  return _rule_file_probe(r, tmp, path)


def probe_zip_bomb(r: Runner, tmp: Path) -> dict:
  """A 389 KB .npz that declares 400 MB (one float32 array of 1e8 zeros),
  with metadata naming a rule that has meta-parameters."""
  path = tmp / "bomb.npz"
  with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
    with z.open("__disco_metadata__.npy", "w") as f:
      np.lib.format.write_array(f, np.array(json.dumps(dict(rule="lpg"))))
    with z.open("lstm/w.npy", "w", force_zip64=True) as f:
      np.lib.format.write_array_header_1_0(
          f, dict(descr="<f4", fortran_order=False, shape=(100_000_000,))
      )
      chunk = bytes(1 << 22)
      for _ in range(400_000_000 // len(chunk)):
        f.write(chunk)
      f.write(bytes(400_000_000 % len(chunk)))
  return _rule_file_probe(r, tmp, path)


def probe_oom(r: Runner, tmp: Path) -> dict:
  out = tmp / "run"
  result = _eval(r, tmp, out, fault="oom")
  return _result(*result, f"summary.json {_valid_json(out / 'summary.json')}")


def probe_enospc_summary(r: Runner, tmp: Path) -> dict:
  out = tmp / "run"
  _eval(r, tmp, out)
  result = _eval(r, tmp, out, "--config.overwrite=True", fault="enospc_summary")
  return _result(
      *result,
      f"summary.json {_valid_json(out / 'summary.json')}; config.json "
      f"{_valid_json(out / 'config.json')}",
  )


def _meta(r, tmp, out, *extra, **kw):
  return r.run(
      "meta_train",
      [*META_FLAGS, f"--config.output_dir={out}", *extra],
      tmp,
      **kw,
  )


def _checkpoints(out: Path) -> str:
  steps = sorted(p.name for p in (out / "checkpoints").glob("*") if p.is_dir())
  return ", ".join(steps) or "none"


def probe_two_writers(r: Runner, tmp: Path) -> dict:
  """Two ``disco-meta-train --config.resume=True`` started together on one
  folder (resume lets a folder that holds a run pass the start check)."""
  out = tmp / "meta"
  procs = [
      _meta(
          r,
          tmp,
          out,
          "--config.resume=True",
          "--config.num_meta_steps=3",
          wait=False,
      )
      for _ in range(2)
  ]
  results = [Runner.finish(p) for p in procs]
  statuses = "/".join(str(s) for s, _, _ in results)
  rows = []
  if (out / "metrics.csv").exists():
    rows = (out / "metrics.csv").read_text().splitlines()[1:]
  disk = f"exits {statuses}; metrics.csv rows: {len(rows)} (3 meta-steps)"
  status, stderr, rss = max(results, key=lambda x: x[0])
  return _result(status, stderr, rss, disk)


def probe_enospc_checkpoint(r: Runner, tmp: Path) -> dict:
  out = tmp / "meta"
  result = _meta(r, tmp, out, fault="enospc_checkpoint")
  return _result(*result, f"checkpoints: {_checkpoints(out)}")


def probe_sigterm_twice(r: Runner, tmp: Path) -> dict:
  out = tmp / "meta"
  result = _meta(
      r, tmp, out, "--config.checkpoint_every=0", fault="sigterm_twice"
  )
  return _result(*result, f"checkpoints: {_checkpoints(out)}")


def probe_resume_damaged_config(r: Runner, tmp: Path) -> dict:
  out = tmp / "meta"
  _meta(r, tmp, out)
  config = out / "config.json"
  config.write_bytes(config.read_bytes()[:100])
  result = _meta(
      r, tmp, out, "--config.resume=True", "--config.num_meta_steps=3"
  )
  return _result(
      *result,
      f"checkpoints: {_checkpoints(out)}; config.json {_valid_json(config)}",
  )


def probe_world_writable_cache(r: Runner, tmp: Path) -> dict:
  cache = tmp / "cache"
  cache.mkdir()
  cache.chmod(0o777)
  result = r.run(
      "evaluate",
      ["--config.rule=nonexistent_rule", f"--config.compilation_cache={cache}"],
      tmp,
  )
  warned = "writable by every user" in result[1]
  return _result(*result, f"warned about the folder: {warned}")


# ------------------------------------------- issue 67: nothing lost ----


def _tree(folder: Path) -> dict[str, bytes]:
  if not folder.exists():
    return {}
  return {
      str(p.relative_to(folder)): p.read_bytes()
      for p in folder.rglob("*")
      if p.is_file() and ".disco-lock" not in p.name
  }


def _kept(before: dict, folder: Path) -> str:
  after = _tree(folder)
  lost = sorted(set(before) - set(after))
  changed = sorted(k for k in before if k in after and before[k] != after[k])
  if not lost and not changed:
    return "nothing removed or changed"
  return f"lost: {', '.join(lost[:4]) or '-'}; changed: {', '.join(changed[:4]) or '-'}"


def probe_overwrite_project(r: Runner, tmp: Path) -> dict:
  """A folder of the user's (its own config.json, src/, data/) given to
  disco-eval with overwrite=True."""
  out = tmp / "project"
  (out / "src").mkdir(parents=True)
  (out / "src" / "model.py").write_text("print('mine')\n")
  (out / "data").mkdir()
  (out / "data" / "train.csv").write_text("x\n1\n")
  (out / "config.json").write_text('{"lr": 3}\n')
  before = _tree(out)
  result = _eval(r, tmp, out, "--config.overwrite=True")
  return _result(*result, _kept(before, out))


def probe_overwrite_meta_run(r: Runner, tmp: Path) -> dict:
  """disco-eval with overwrite=True on a meta-training run's folder."""
  out = tmp / "meta"
  _meta(r, tmp, out)
  before = _tree(out)
  result = _eval(r, tmp, out, "--config.overwrite=True")
  return _result(
      *result, f"checkpoints: {_checkpoints(out)}; {_kept(before, out)}"
  )


def _rule_file(path: Path, shift: float) -> Path:
  """An LPG rule file (GRU of 8) whose meta-parameters are ``shift``, saved
  by this repository's code (its format is every checkout's)."""
  import jax  # pylint: disable=import-outside-toplevel

  from disco import weights  # pylint: disable=import-outside-toplevel
  from disco.update_rules import registry  # pylint: disable=import-outside-toplevel

  settings = registry.default_settings("lpg")
  settings = settings.replace(
      rule_kwargs=dict(
          settings.rule_kwargs,
          net=dict(settings.rule_kwargs["net"], hidden_size=8),
      )
  )
  shapes = registry.make_rule(settings).meta_param_shapes()
  params = jax.tree.map(lambda s: np.full(s.shape, shift, s.dtype), shapes)
  weights.save_meta_params(
      path,
      params,
      metadata=dict(rule="lpg", rule_kwargs=dict(net=dict(hidden_size=8))),
  )
  return path


def probe_compare_changed_rule(r: Runner, tmp: Path) -> dict:
  """disco-compare rerun after the rule file was rewritten at the same
  path with other meta-parameters."""
  _rule_file(tmp / "mine.npz", 0.01)
  out = tmp / "sweep"
  flags = ["--config.rules=('mine.npz',)"]
  _compare(r, tmp, out, *flags)
  summary = out / "runs" / "mine" / "catch_5x5" / "summary.json"
  first = summary.read_bytes() if summary.exists() else None
  _rule_file(tmp / "mine.npz", -0.02)
  result = _compare(r, tmp, out, *flags)
  again = summary.exists() and summary.read_bytes() != first
  return _result(
      *result, f"the rule file's run trained again: {'yes' if again else 'no'}"
  )


def _flip_middle_bit(path: Path) -> None:
  content = bytearray(path.read_bytes())
  content[len(content) // 2] ^= 1
  path.write_bytes(bytes(content))


def _meta_params_diff(a: Path, b: Path) -> str:
  if not (a.exists() and b.exists()):
    return "meta_params.npz missing"
  with np.load(a) as x, np.load(b) as y:
    keys = [k for k in x.files if not k.startswith("__")]
    diff = max(float(np.max(np.abs(x[k] - y[k]))) for k in keys)
  return f"meta-params vs an uninterrupted run: max |diff| {diff:.2g}"


def probe_checkpoint_bit_flip(r: Runner, tmp: Path) -> dict:
  """One bit flipped in the newest checkpoint's largest data file, then
  resume to meta-step 3; compared with an uninterrupted 3-step run."""
  clean, out = tmp / "clean", tmp / "meta"
  _meta(r, tmp, clean, "--config.num_meta_steps=3")
  _meta(r, tmp, out)
  data = [p for p in (out / "checkpoints" / "2").rglob("*") if p.is_file()]
  data = [p for p in data if p.parent.name == "d"] or data
  _flip_middle_bit(max(data, key=lambda p: p.stat().st_size))
  result = _meta(
      r, tmp, out, "--config.resume=True", "--config.num_meta_steps=3"
  )
  return _result(
      *result,
      f"checkpoints: {_checkpoints(out)}; "
      + _meta_params_diff(out / "meta_params.npz", clean / "meta_params.npz"),
  )


def probe_stored_program_changed(r: Runner, tmp: Path) -> dict:
  """A float constant of the stored (traced) meta-step changed on disk,
  then a new run with the same settings; compared with a run without the
  cache."""
  cache, clean, out = tmp / "cache", tmp / "clean", tmp / "meta"
  _meta(r, tmp, clean, "--config.compilation_cache=off")
  _meta(r, tmp, tmp / "first", f"--config.compilation_cache={cache}")
  stored = sorted(
      (cache / "exported").glob("*.jaxexport"), key=lambda p: -p.stat().st_size
  )
  if not stored:
    return _not_run("no stored program")
  content = stored[0].read_bytes()
  old, new = np.float32(0.999).tobytes(), np.float32(0.25).tobytes()
  what = "0.999 -> 0.25" if old in content else "a middle byte flipped"
  if old in content:
    stored[0].write_bytes(content.replace(old, new, 1))
  else:
    _flip_middle_bit(stored[0])
  result = _meta(r, tmp, out, f"--config.compilation_cache={cache}")
  return _result(
      *result,
      f"{what}; "
      + _meta_params_diff(out / "meta_params.npz", clean / "meta_params.npz"),
  )


def probe_rule_file_setting(r: Runner, tmp: Path) -> dict:
  """A rule file whose metadata sets learning_rate=-1e9."""
  path = tmp / "rule.npz"
  with open(path, "wb") as f:
    metadata = json.dumps(
        dict(rule="actor_critic", settings=dict(learning_rate=-1e9))
    )
    np.savez(f, __disco_metadata__=np.array(metadata))
  out = tmp / "run"
  result = _eval(r, tmp, out, f"--config.rule={path}")
  summary = out / "summary.json"
  return _result(*result, f"run: {'finished' if summary.exists() else 'none'}")


def probe_lock_file_deleted(r: Runner, tmp: Path) -> dict:
  """The lock file (and its owner file) deleted while disco-meta-train
  runs, then a second disco-meta-train --config.resume=True on the
  folder."""
  out = tmp / "meta"
  first = _meta(
      r,
      tmp,
      out,
      "--config.num_meta_steps=6",
      "--config.resume=True",
      wait=False,
  )
  lock = out / ".disco-lock"
  deadline = time.monotonic() + 120
  while not (out / "config.json").exists() and time.monotonic() < deadline:
    time.sleep(0.1)
  for path in (lock, out / ".disco-lock.owner"):
    path.unlink(missing_ok=True)
  second = _meta(
      r, tmp, out, "--config.num_meta_steps=6", "--config.resume=True"
  )
  first_status = Runner.finish(first)[0]
  rows = []
  if (out / "metrics.csv").exists():
    rows = (out / "metrics.csv").read_text().splitlines()[1:]
  return _result(
      *second,
      f"exits {first_status}/{second[0]}; metrics.csv rows: {len(rows)} "
      "(6 meta-steps)",
  )


def probe_stale_seed_file(r: Runner, tmp: Path) -> dict:
  """A 2-seed run whose config.json was removed, run again with 1 seed
  (no overwrite)."""
  out = tmp / "run"
  _eval(r, tmp, out)
  (out / "config.json").unlink()
  result = _eval(r, tmp, out, "--config.num_seeds=1")
  seeds = sorted(p.name for p in out.glob("params_seed*.npz"))
  return _result(*result, f"seed files after the rerun: {', '.join(seeds)}")


def probe_lying_bzip2(r: Runner, tmp: Path) -> dict:
  """A 1.2 KB .npz whose bzip2 member declares 144 bytes and inflates to
  1 GiB."""
  path = faults.lying_bzip2_npz(tmp / "bomb.npz", 1 << 30)
  result = _rule_file_probe(r, tmp, path)
  result["disk"] += f"; file {path.stat().st_size / 1024:.1f} KB"
  return result


def _not_run(why: str) -> dict:
  return dict(status=-1, lines=0, tracebacks=0, rss=0, disk=why, last="")


@contextlib.contextmanager
def _tmpfs(folder: Path, size: str) -> Iterator[bool]:
  """Whether a tmpfs of ``size`` is mounted at ``folder`` (it needs root);
  unmounted after the block."""
  folder.mkdir()
  done = subprocess.run(
      ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
      capture_output=True,
      check=False,
  )
  try:
    yield done.returncode == 0
  finally:
    if done.returncode == 0:
      subprocess.run(["umount", str(folder)], check=False)


def probe_tmpfs_checkpoint(r: Runner, tmp: Path) -> dict:
  """disco-meta-train writing to a 96 KB tmpfs (needs root): full during
  the first checkpoint."""
  with _tmpfs(tmp / "disk", "96k") as mounted:
    if not mounted:
      return _not_run("cannot mount a tmpfs")
    out = tmp / "disk" / "meta"
    return _result(*_meta(r, tmp, out), f"checkpoints: {_checkpoints(out)}")


def probe_tmpfs_cache(r: Runner, tmp: Path) -> dict:
  """disco-eval whose compilation cache folder is on a full 32 KB tmpfs
  (needs root)."""
  with _tmpfs(tmp / "disk", "32k") as mounted:
    if not mounted:
      return _not_run("cannot mount a tmpfs")
    out = tmp / "run"
    result = _eval(
        r, tmp, out, f"--config.compilation_cache={tmp / 'disk' / 'cache'}"
    )
    return _result(*result, f"summary.json {_valid_json(out / 'summary.json')}")


def probe_host_memory_abort(r: Runner, tmp: Path) -> dict:
  """disco-eval under a 1.8 GB address-space limit (XLA aborts while
  compiling: it cannot start a thread), then the same command with
  overwrite=True and no limit: the row is the rerun's."""
  out = tmp / "run"

  def limit():
    resource.setrlimit(resource.RLIMIT_AS, (1800 << 20, 1800 << 20))

  first = _eval(r, tmp, out, "--config.compilation_cache=off", preexec_fn=limit)
  again = _eval(r, tmp, out, "--config.overwrite=True")
  return _result(
      *again,
      f"first run: exit {first[0]}, {len(_messages(first[1]))} stderr lines",
  )


def probe_sigint_early(r: Runner, tmp: Path) -> dict:
  """SIGINT at 12 moments spread over the first 3 s of disco-eval (one
  drawn in each 0.25 s span): the worst exit (a status other than 130, or
  the most stderr lines) is the row's; every status is listed."""
  rng = random.Random(0)
  results = []
  for k in range(12):
    delay = 0.05 + 0.245 * (k + rng.random())
    proc = r.run(
        "evaluate",
        [*EVAL_FLAGS, f"--config.output_dir={tmp / f'run{k}'}"],
        tmp,
        wait=False,
    )
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    results.append(Runner.finish(proc))
  worst = max(results, key=lambda x: (x[0] != 130, len(_messages(x[1])), x[0]))
  statuses = ", ".join(str(x[0]) for x in results)
  finished = sum((tmp / f"run{k}" / "summary.json").exists() for k in range(12))
  return _result(
      *worst, f"exits: {statuses}; runs finished despite SIGINT: {finished}"
  )


def probe_long_name(r: Runner, tmp: Path) -> dict:
  """disco-eval with an output folder whose name is 300 characters."""
  out = tmp / ("a" * 300)
  return _result(*_eval(r, tmp, out), "")


def probe_huge_seed(r: Runner, tmp: Path) -> dict:
  """disco-eval --config.seed=9223372036854775807, then the same command
  with seed 3."""
  out = tmp / "run"
  result = _eval(r, tmp, out, "--config.seed=9223372036854775807")
  again = _eval(r, tmp, out, "--config.seed=3")
  return _result(*result, f"the corrected rerun's exit: {again[0]}")


def probe_key_under_string(r: Runner, tmp: Path) -> dict:
  """disco-meta-train --config.meta_optimizer.learning_rate=0.5 (a key
  under a string setting)."""
  out = tmp / "meta"
  return _result(
      *_meta(r, tmp, out, "--config.meta_optimizer.learning_rate=0.5"), ""
  )


def probe_tuple_twice(r: Runner, tmp: Path) -> dict:
  """disco-compare with --config.rules given twice: the first
  actor_critic, the second policy_gradient."""
  out = tmp / "sweep"
  result = _compare(
      r,
      tmp,
      out,
      "--config.rules=('actor_critic',)",
      "--config.rules=('policy_gradient',)",
  )
  rules = sorted(p.name for p in (out / "runs").glob("*"))
  return _result(*result, f"rules run: {', '.join(rules) or 'none'}")


PROBES = {
    "crafted_xland": (
        "disco-validate on a run folder whose XLand benchmark_path is a "
        "pickle that runs code",
        probe_crafted_xland,
    ),
    "crafted_imports": (
        "disco-validate on a run folder whose config.imports names a module "
        "in the folder",
        probe_crafted_imports,
    ),
    "overwrite_fewer_seeds": (
        "disco-eval overwrite=True with 1 seed over a 2-seed run",
        probe_overwrite_fewer_seeds,
    ),
    "npz_mode": ("disco-eval outputs' modes (umask 022)", probe_npz_mode),
    "two_writers": (
        "two disco-meta-train --config.resume=True started together on one "
        "folder",
        probe_two_writers,
    ),
    "compare_truncated_summary": (
        "disco-compare rerun after a cell's summary.json was cut to 100 bytes",
        probe_compare_truncated_summary,
    ),
    "compare_new_budget": (
        "disco-compare rerun at total_env_steps=400 over a 200-step sweep",
        probe_compare_new_budget,
    ),
    "compare_rule_path": (
        "disco-compare with a rule file whose name does not end in .npz",
        probe_compare_rule_path,
    ),
    "npy": ("disco-eval with a .npy as the rule", probe_npy),
    "zip_bomb": (
        "disco-eval with a 389 KB .npz declaring 400 MB as the rule",
        probe_zip_bomb,
    ),
    "text": ("disco-eval with a text file named .npz as the rule", probe_text),
    "oom": (
        "disco-eval, RESOURCE_EXHAUSTED in the training call (injected)",
        probe_oom,
    ),
    "enospc_summary": (
        "disco-eval overwrite=True, disk full 100 bytes into summary.json "
        "(injected)",
        probe_enospc_summary,
    ),
    "enospc_checkpoint": (
        "disco-meta-train, disk full at the first checkpoint (injected)",
        probe_enospc_checkpoint,
    ),
    "sigterm_twice": (
        "disco-meta-train, SIGTERM after meta-step 1 and again during the "
        "exit save (injected)",
        probe_sigterm_twice,
    ),
    "resume_damaged_config": (
        "disco-meta-train resume after config.json was cut to 100 bytes",
        probe_resume_damaged_config,
    ),
    "world_writable_cache": (
        "a launcher whose compilation cache folder is mode 0777",
        probe_world_writable_cache,
    ),
    "overwrite_project": (
        "disco-eval overwrite=True on a project folder (its own config.json, "
        "src/, data/)",
        probe_overwrite_project,
    ),
    "overwrite_meta_run": (
        "disco-eval overwrite=True on a meta-training run folder",
        probe_overwrite_meta_run,
    ),
    "compare_changed_rule": (
        "disco-compare rerun after its rule file was rewritten at the same "
        "path",
        probe_compare_changed_rule,
    ),
    "checkpoint_bit_flip": (
        "disco-meta-train resume after one bit of the newest checkpoint's "
        "data was flipped",
        probe_checkpoint_bit_flip,
    ),
    "stored_program_changed": (
        "disco-meta-train with a constant of its stored traced program "
        "changed on disk",
        probe_stored_program_changed,
    ),
    "rule_file_setting": (
        "disco-eval with a rule file whose metadata sets learning_rate=-1e9",
        probe_rule_file_setting,
    ),
    "lock_file_deleted": (
        "a second disco-meta-train after the first's .disco-lock was deleted",
        probe_lock_file_deleted,
    ),
    "stale_seed_file": (
        "disco-eval with 1 seed over a 2-seed run whose config.json is gone",
        probe_stale_seed_file,
    ),
    "lying_bzip2": (
        "disco-eval with a 1.3 KB .npz whose bzip2 member declares 144 bytes "
        "and inflates to 1 GiB",
        probe_lying_bzip2,
    ),
    "tmpfs_checkpoint": (
        "disco-meta-train on a 96 KB tmpfs, full during the first checkpoint",
        probe_tmpfs_checkpoint,
    ),
    "tmpfs_cache": (
        "disco-eval with its compilation cache on a full 32 KB tmpfs",
        probe_tmpfs_cache,
    ),
    "host_memory_abort": (
        "disco-eval aborted by XLA out of host memory (1.8 GB address-space "
        "limit), then run again",
        probe_host_memory_abort,
    ),
    "sigint_early": (
        "disco-eval sent SIGINT at 12 moments of its first 3 s (the worst "
        "of them)",
        probe_sigint_early,
    ),
    "long_name": (
        "disco-eval with an output folder name of 300 characters",
        probe_long_name,
    ),
    "huge_seed": (
        "disco-eval --config.seed=9223372036854775807",
        probe_huge_seed,
    ),
    "key_under_string": (
        "disco-meta-train --config.meta_optimizer.learning_rate=0.5",
        probe_key_under_string,
    ),
    "tuple_twice": (
        "disco-compare --config.rules=('actor_critic',) "
        "--config.rules=('policy_gradient',)",
        probe_tuple_twice,
    ),
}


def main() -> None:
  parser = cli.parser(__doc__)
  parser.add_argument(
      "--checkout",
      action="append",
      required=True,
      help="NAME=DIR: code to probe (DIR holds disco/ and configs/)",
  )
  parser.add_argument("--probes", nargs="*", default=list(PROBES))
  parser.add_argument(
      "--results",
      type=Path,
      help="folder where each probe's result is saved (NAME/PROBE.json)",
  )
  parser.add_argument(
      "--reuse",
      nargs="*",
      default=(),
      help="checkout names whose saved results (--results) are reused",
  )
  args = parser.parse_args()
  checkouts = [c.split("=", 1) for c in args.checkout]
  os.umask(0o022)
  rows = {}
  for key in args.probes:
    title, probe = PROBES[key]
    rows[key] = []
    for name, code in checkouts:
      clock = timing.Stopwatch()
      saved = args.results / name / f"{key}.json" if args.results else None
      if saved is not None and name in args.reuse and saved.exists():
        rows[key].append(json.loads(saved.read_text()))
        continue
      with tempfile.TemporaryDirectory(prefix=f"probe-{key}-") as tmp:
        result = probe(Runner(Path(code)), Path(tmp))
      if saved is not None:
        saved.parent.mkdir(parents=True, exist_ok=True)
        saved.write_text(json.dumps(result))
      print(
          f"{key} [{name}]: {result} ({clock.seconds():.0f} s)",
          file=sys.stderr,
          flush=True,
      )
      rows[key].append(result)
  header = ["probe"] + [
      f"{name}: {what}"
      for name, _ in checkouts
      for what in (
          "exit, stderr lines (tracebacks), peak MB",
          "last stderr line",
          "left on disk",
      )
  ]
  print(cli.table_header(header))
  for key, results in rows.items():
    cells = [PROBES[key][0]]
    for res in results:
      cells.append(
          f"{res['status']}, {res['lines']} ({res['tracebacks']}), "
          f"{res['rss']:.0f}"
      )
      last = _TMP.sub("$TMP", res["last"]).replace("|", "/")
      if len(last) > 100:
        last = last[:100].rstrip(".") + "..."
      cells.append(f"`{last}`" if last else "")
      cells.append(res["disk"])
    print(cli.table_row(cells))


if __name__ == "__main__":
  main()
