"""Faults injected into a launcher process started from the command line.

A fault is a patch of one function, applied by a wrapper (``command``) before
the launcher's module runs as ``__main__``; nothing in the shipped configs
switches them on. The tests of issue 45 and ``benchmarks/fault_probes.py``
use them. Each patched target exists in the code before and after issue 45,
so the probes run against both. ``lying_bzip2_npz`` crafts an input file
both use (issue 67).
"""

from __future__ import annotations

import json
from pathlib import Path
import sys
import zipfile

import numpy as np

# Tiny disco-eval and disco-compare runs (seconds on a CPU) to inject into.
TINY_EVAL_FLAGS = (
    "--config.rule=actor_critic",
    "--config.env_settings.rows=5",
    "--config.env_settings.columns=5",
    "--config.total_env_steps=200",
    "--config.num_envs=2",
    "--config.rollout_len=5",
    "--config.batch_size=4",
    "--config.replay_capacity=16",
    "--config.min_replay_size=4",
    "--config.iterations_per_call=10",
    "--config.num_seeds=2",
    "--config.seed=3",
    "--config.last_episodes=20",
)
TINY_COMPARE_FLAGS = (
    "--config.rules=('actor_critic',)",
    "--config.envs=('catch:rows=5,columns=5',)",
    "--config.num_seeds=2",
    "--config.total_env_steps=200",
    "--config.num_envs=2",
    "--config.rollout_len=5",
    "--config.batch_size=2",
    "--config.replay_capacity=0",
    "--config.min_replay_size=0",
    "--config.iterations_per_call=10",
    "--config.last_episodes=20",
    "--config.bootstrap_reps=20",
    "--config.num_points=3",
)

FAULTS = {
    # The training call runs out of device memory.
    "oom": """
import jax
from disco.training import loop as _loop
def _run(self, *a, **k):
  raise jax.errors.JaxRuntimeError(
      "RESOURCE_EXHAUSTED: Out of memory while trying to allocate "
      "17179869184 bytes.")
_loop.EvalLoop.run = _run
""",
    # The disk is full when a checkpoint is saved.
    "enospc_checkpoint": """
import errno
from disco.meta import checkpoints as _ckpt
def _save(self, *a, **k):
  raise OSError(errno.ENOSPC, "No space left on device", str(self.directory))
_ckpt.CheckpointManager.save = _save
""",
    # The disk fills after 100 bytes of any file whose name holds
    # summary.json (however it is opened: open, Path.write_text, os.fdopen).
    "enospc_summary": """
import builtins, errno, io, os
_open = io.open
class _Full:
  def __init__(self, f, name):
    self._f, self._name, self._n = f, name, 0
  def write(self, data):
    room = 100 - self._n
    if len(data) > room:
      self._f.write(data[:max(room, 0)])
      self._f.flush()
      raise OSError(errno.ENOSPC, "No space left on device", self._name)
    self._n += len(data)
    return self._f.write(data)
  def __enter__(self):
    return self
  def __exit__(self, *exc):
    return self._f.__exit__(*exc)
  def __getattr__(self, name):
    return getattr(self._f, name)
def _patched(file, mode="r", *a, **k):
  f = _open(file, mode, *a, **k)
  name = file
  if isinstance(file, int):
    name = os.readlink(f"/proc/self/fd/{file}")
  if "summary.json" in os.fspath(name) and any(m in mode for m in "wax"):
    return _Full(f, os.fspath(name))
  return f
io.open = builtins.open = _patched
""",
    # SIGTERM once the first metrics row of a meta-training run is written,
    # and again at the start of every checkpoint save.
    "sigterm_twice": """
import os, signal
from disco.meta import checkpoints as _ckpt
from disco.meta import history as _history
_append = _history.MetricsHistory.append_csv
_save = _ckpt.CheckpointManager.save
def _append_csv(self, path, row):
  _append(self, path, row)
  os.kill(os.getpid(), signal.SIGTERM)
def _save_and_signal(self, *a, **k):
  os.kill(os.getpid(), signal.SIGTERM)
  return _save(self, *a, **k)
_history.MetricsHistory.append_csv = _append_csv
_ckpt.CheckpointManager.save = _save_and_signal
""",
}


def command(launcher: str, args, fault: str | None = None) -> list[str]:
  """The command line of ``python -m disco.launch.<launcher> ARGS``, with
  ``fault`` (a key of ``FAULTS``) injected first."""
  module = f"disco.launch.{launcher}"
  if fault is None:
    return [sys.executable, "-m", module, *args]
  wrapper = (
      f"import sys\nsys.argv = {[module, *args]!r}\n"
      + FAULTS[fault]
      + f"\nimport runpy\nrunpy.run_module({module!r}, run_name='__main__')"
  )
  return [sys.executable, "-c", wrapper]


def lying_bzip2_npz(path: Path, inflated: int) -> Path:
  """A small .npz whose array member is bzip2-compressed and declares 144
  bytes (a 16-byte array) in its zip entries but inflates to ``inflated``
  bytes: ``zipfile`` decompresses bzip2 without bounding the output, so
  merely reading the member's .npy header takes that much memory."""
  name = "lstm/w.npy"
  with zipfile.ZipFile(path, "w", zipfile.ZIP_BZIP2) as z:
    with z.open("__disco_metadata__.npy", "w") as f:
      np.lib.format.write_array(f, np.array(json.dumps(dict(rule="lpg"))))
    with z.open(name, "w", force_zip64=True) as f:
      np.lib.format.write_array(f, np.zeros(4, np.float32))
      chunk = bytes(1 << 22)
      for _ in range(inflated // len(chunk)):
        f.write(chunk)
  content = bytearray(path.read_bytes())
  # The uncompressed size in the local and the central header (signature,
  # offset of the size, offset of the name).
  for signature, size_at, name_at in (
      (b"PK\x03\x04", 22, 30),
      (b"PK\x01\x02", 24, 46),
  ):
    start = 0
    while (start := content.find(signature, start)) >= 0:
      if content[start + name_at :].startswith(name.encode()):
        content[start + size_at : start + size_at + 4] = (144).to_bytes(
            4, "little"
        )
      start += 4
  path.write_bytes(bytes(content))
  with zipfile.ZipFile(path) as z:
    assert z.getinfo(name).file_size == 144
  return path
