"""Several processes (hosts) as one run, on ``jax.distributed``.

Every process runs the same launcher command; ``config.distributed``
(``default_config``, checked by ``settings``) enables it: ``enabled=True`` alone
lets JAX detect the cluster (SLURM, Open MPI, Cloud TPU, Kubernetes);
``coordinator_address``, ``num_processes`` and ``process_id`` set it by hand.
``initialize`` checks the settings first (bad ones: one line, status 2).

JAX cannot continue without a process: a failed collective ends the others with
one line and status 1 (``ends_process_on_failure``); a silent one is detected
within ``heartbeat_timeout`` (JAX ends the others, status 134); a hung one after
``step_timeout`` (``Watchdog``). SIGTERM stops every process at the same step
(``preempted``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
import contextlib
import dataclasses
import os
import socket
import sys
import threading
import time
from typing import Any, NoReturn

import jax
from jax.experimental import multihost_utils
import numpy as np

from disco import checks
from disco import errors

# JAX's own timeouts run this much longer than ours, so that the launcher's
# clear message comes first.
_GRACE_S = 30
_PROBE_INTERVAL_S = 0.5


@dataclasses.dataclass(frozen=True)
class DistributedSettings:
  """Checked ``config.distributed`` values (None: detected by JAX)."""

  coordinator_address: str | None
  num_processes: int | None
  process_id: int | None
  local_device_ids: tuple[int, ...] | None
  initialization_timeout: int
  heartbeat_timeout: int
  step_timeout: int


class Preempted(errors.Stopped):
  """Every process reached JAX's preemption sync point (after SIGTERM)."""


# ------------------------------------------------------------- settings ----


def default_config() -> dict[str, Any]:
  """The ``distributed`` block of the launcher configs (not enabled)."""
  return dict(
      enabled=False,  # True alone: JAX detects the cluster
      coordinator_address="",  # 'host:port' of process 0
      num_processes=0,  # 0: detected
      process_id=-1,  # -1: detected
      local_device_ids="",  # e.g. '0': this process's GPUs ('': all)
      initialization_timeout=300,  # s for every process to join
      heartbeat_timeout=100,  # s until a silent process counts as dead
      # s without a finished step (after the first, which compiles) before a
      # process gives up (0: never).
      step_timeout=1800,
  )


def settings(block: Any) -> DistributedSettings | None:
  """``config.distributed`` checked; None when it is not enabled.

  Raises:
    UsageError: a bad value, naming the key and the fix.
  """
  cfg = checks.as_dict(block, "distributed")
  valid = set(default_config())
  if set(cfg) != valid:
    raise errors.UsageError(
        f"config.distributed must have the keys {', '.join(sorted(valid))}; "
        f"got {', '.join(sorted(cfg))}."
    )
  enabled = checks.check_bool(cfg["enabled"], "distributed.enabled")
  address = str(cfg["coordinator_address"] or "").strip() or None
  num = checks.check_int(cfg["num_processes"], "distributed.num_processes", 0)
  pid = checks.check_int(cfg["process_id"], "distributed.process_id", -1)
  ids = str(cfg["local_device_ids"] or "").strip()
  if not (enabled or address or num or pid >= 0):
    return None
  if address is not None:
    _split_address(address)
  if num and pid >= num:
    raise errors.UsageError(
        f"config.distributed.process_id={pid} is out of range for "
        f"num_processes={num}: give each process its own id 0..{num - 1}."
    )
  try:
    local = tuple(int(i) for i in ids.split(",")) if ids else None
  except ValueError:
    raise errors.UsageError(
        f"config.distributed.local_device_ids={ids!r}: write device numbers "
        "separated by commas, e.g. '0' or '0,1'."
    ) from None
  return DistributedSettings(
      coordinator_address=address,
      num_processes=num or None,
      process_id=pid if pid >= 0 else None,
      local_device_ids=local,
      initialization_timeout=checks.check_int(
          cfg["initialization_timeout"], "distributed.initialization_timeout", 1
      ),
      heartbeat_timeout=checks.check_int(
          cfg["heartbeat_timeout"], "distributed.heartbeat_timeout", 1
      ),
      step_timeout=checks.check_int(
          cfg["step_timeout"], "distributed.step_timeout", 0
      ),
  )


def _split_address(address: str) -> tuple[str, int]:
  host, _, port = address.rpartition(":")
  if not host or not port.isdigit() or not 0 < int(port) < 65536:
    raise errors.UsageError(
        f"config.distributed.coordinator_address={address!r}: write "
        "'host:port' (process 0's host and a free port), e.g. "
        "'10.0.0.1:8476'."
    )
  return host.strip("[]"), int(port)


# ------------------------------------------------------- initialisation ----


def initialize(s: DistributedSettings | None, program: str) -> None:
  """Joins this process to the run (``jax.distributed.initialize``) before
  anything else uses JAX's devices; nothing for None or when already
  initialised.

  Raises:
    UsageError: bad settings, a coordinator nobody answers at, a taken port, or
      a process that cannot join; if not all join within
      ``initialization_timeout``, this one ends with one line and status 2.
  """
  if s is None or jax.distributed.is_initialized():
    return
  where = _whoami(s)
  if s.coordinator_address and s.process_id is not None:
    host, port = _split_address(s.coordinator_address)
    if s.process_id == 0:
      _check_port_free(port, s.coordinator_address)
    else:
      _wait_for_coordinator(host, port, s, where)
  timer = threading.Timer(
      s.initialization_timeout,
      abandon,
      args=(
          program,
          f"{where}: not every process joined the run within "
          f"{s.initialization_timeout} s (config.distributed."
          "initialization_timeout): start all the processes, each with its "
          "own process_id (0 .. num_processes - 1) and the same "
          "coordinator_address and num_processes.",
          2,
      ),
  )
  timer.daemon = True
  timer.start()
  try:
    jax.distributed.initialize(
        coordinator_address=s.coordinator_address,
        num_processes=s.num_processes,
        process_id=s.process_id,
        local_device_ids=s.local_device_ids,
        initialization_timeout=s.initialization_timeout + _GRACE_S,
        heartbeat_timeout_seconds=s.heartbeat_timeout,
    )
  except (ValueError, TypeError, RuntimeError) as e:
    hint = ""
    if "before any JAX" in str(e):
      hint = " (start a new Python process: JAX is already in use here)"
    raise errors.UsageError(
        f"{where}: jax.distributed.initialize failed: "
        f"{errors.one_line(e)}{hint}. Give coordinator_address, "
        "num_processes and process_id in config.distributed where the "
        "cluster is not detected (SLURM, Open MPI, Cloud TPU, Kubernetes)."
    ) from None
  finally:
    timer.cancel()


def _whoami(s: DistributedSettings) -> str:
  if s.process_id is None:
    return "this process"
  total = f" of {s.num_processes}" if s.num_processes else ""
  return f"process {s.process_id}{total}"


def _check_port_free(port: int, address: str) -> None:
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
      sock.bind(("", port))
    except OSError as e:
      raise errors.UsageError(
          f"process 0 hosts the coordinator at {address}, but port {port} is "
          f"taken here ({e.strerror}): another run, or a second process with "
          "process_id=0, uses it. Choose another port."
      ) from None


def _wait_for_coordinator(
    host: str, port: int, s: DistributedSettings, where: str
):
  deadline = time.monotonic() + s.initialization_timeout
  error = None
  while time.monotonic() < deadline:
    try:
      with socket.create_connection((host, port), timeout=2):
        return
    except OSError as e:
      error = e.strerror or str(e)
      time.sleep(_PROBE_INTERVAL_S)
  raise errors.UsageError(
      f"{where} cannot reach the coordinator at {s.coordinator_address} "
      f"({error}) within {s.initialization_timeout} s (config.distributed."
      "initialization_timeout): start process 0 (it hosts the coordinator) "
      "with the same coordinator_address, and check the host, port and "
      "firewall."
  )


# --------------------------------------------------------- the processes ----


def is_multiprocess() -> bool:
  return jax.process_count() > 1


def is_main() -> bool:
  """Whether this process writes the run's shared outputs (process 0)."""
  return jax.process_index() == 0


def describe() -> str:
  """``process i of n``."""
  return f"process {jax.process_index()} of {jax.process_count()}"


def main_only(log: Callable[[str], None]) -> Callable[[str], None]:
  """``log`` in process 0, a no-op elsewhere."""
  return log if is_main() else (lambda _: None)


def barrier(name: str) -> None:
  """Waits until every process gets here (no-op in one process)."""
  if is_multiprocess():
    multihost_utils.sync_global_devices(name)


def preempted(step: int) -> bool:
  """True at the same ``step`` in every process once a SIGTERM reached any
  (JAX's preemption notifier); False in one process, where SIGTERM sets
  ``stopping``'s flag. Every process must call it with the same steps."""
  return (
      jax.distributed.is_initialized()
      and multihost_utils.reached_preemption_sync_point(step)
  )


def split(items: Sequence[Any]) -> list[list[Any]]:
  """``items`` in contiguous blocks, one per process in order; the first blocks
  are one longer when they do not divide evenly (some may be empty)."""
  n = jax.process_count()
  size, extra = divmod(len(items), n)
  blocks, start = [], 0
  for p in range(n):
    end = start + size + (p < extra)
    blocks.append(list(items[start:end]))
    start = end
  return blocks


def gather(tree: Any, sizes: Sequence[int]) -> Any:
  """Every process's ``tree`` of host arrays concatenated along the leading
  axis, in process order (``sizes[p]``: process ``p``'s leading size); every
  process gets the result."""
  if not is_multiprocess():
    return tree
  width = max(sizes)

  def pad(x):
    x = np.asarray(x)
    fill = np.zeros((width - x.shape[0], *x.shape[1:]), x.dtype)
    return np.concatenate([x, fill])

  stacked = multihost_utils.process_allgather(jax.tree.map(pad, tree))
  return jax.tree.map(
      lambda x: np.concatenate([x[p, :n] for p, n in enumerate(sizes)]),
      stacked,
  )


# ------------------------------------------------------------- failures ----


def abandon(program: str, message: str, status: int) -> NoReturn:
  """Prints ``program: error: message`` as one line on stderr and ends the
  process at once (``os._exit``: a normal exit would wait in JAX's shutdown
  barrier) with ``status``."""
  print(f"{program}: error: {errors.one_line(message)}", file=sys.stderr)
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(status)


@contextlib.contextmanager
def ends_process_on_failure(program: str, hint: str) -> Iterator[None]:
  """In a multi-process run, an error or Ctrl-C ends this process with one line
  (status 1, or 130 for Ctrl-C; ``hint`` says how to continue); ``Preempted``
  and single-process runs pass through."""
  if not is_multiprocess():
    yield
    return
  try:
    yield
  except Preempted:
    raise
  except KeyboardInterrupt:
    abandon(program, f"{describe()} was interrupted; {hint}", 130)
  except Exception as e:  # noqa: BLE001 - every failure ends the process
    abandon(
        program,
        f"{describe()} failed: {type(e).__name__}: {errors.one_line(e)[:400]}"
        f" (if another process died, its own log says why); {hint}",
        1,
    )


class Watchdog:
  """Ends the process (one line, status 1) when ``beat`` is not called for
  ``timeout`` seconds after the first ``beat`` (a collective whose peer hangs
  would wait for ever). ``timeout=0`` or one process: does nothing."""

  def __init__(self, program: str, timeout: int, what: str, hint: str):
    self._timeout = timeout if is_multiprocess() else 0
    self._program, self._what, self._hint = program, what, hint
    self._deadline: float | None = None
    self._stop = threading.Event()
    self._thread = None
    if self._timeout:
      self._thread = threading.Thread(target=self._watch, daemon=True)
      self._thread.start()

  def beat(self) -> None:
    self._deadline = time.monotonic() + self._timeout

  def stop(self) -> None:
    self._stop.set()

  def __enter__(self) -> Watchdog:
    return self

  def __exit__(self, *exc) -> None:
    self.stop()

  def _watch(self) -> None:
    while not self._stop.wait(1.0):
      if self._deadline is not None and time.monotonic() > self._deadline:
        abandon(
            self._program,
            f"{describe()}: no {self._what} finished for {self._timeout} s "
            "(config.distributed.step_timeout): another process is stuck "
            f"or gone; {self._hint}",
            1,
        )
