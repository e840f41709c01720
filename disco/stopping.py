"""Stopping a run at a safe point: SIGINT and SIGTERM set a flag that loops
check between steps (``check_stop`` raises ``errors.Stopped``); saves under
``signals_deferred`` finish; a second Ctrl-C outside one exits at once. Before
``install_stop_handlers``, ``exit_while_starting`` ends a starting launcher with
one line. Imports only the standard library."""

from __future__ import annotations

from collections.abc import Iterator
import contextlib
import os
import signal
import threading

from disco import errors


class _StopState:
  """What the signal handler records (module-level: one per process)."""

  def __init__(self):
    self.event = threading.Event()
    self.signal_name: str | None = None
    self.deferring = 0
    self.program = "disco"


_STOP = _StopState()


def _say(text: str) -> None:
  # os.write: print from a handler can raise a "reentrant call" error.
  try:
    os.write(2, f"{_STOP.program}: {text}\n".encode())
  except OSError:
    pass


def _on_signal(signum, frame) -> None:
  del frame
  name = signal.Signals(signum).name
  if not _STOP.event.is_set():
    _STOP.signal_name = name
    _STOP.event.set()
    _say(
        f"{name} received: stopping at the next safe point (a run that "
        "checkpoints saves first)."
    )
  elif _STOP.deferring or signum != signal.SIGINT:
    _say(f"{name} received again: still stopping; ignored.")
  else:  # Ctrl-C twice, outside a save: the user will not wait.
    _say(f"{name} received again: stopping now.")
    os._exit(errors.INTERRUPTED_EXIT)  # every output file is written atomically


def _on_signal_while_starting(signum, frame) -> None:
  del frame
  name = signal.Signals(signum).name
  _say(f"{name} received while starting: stopped before anything was written.")
  os._exit(errors.INTERRUPTED_EXIT)  # nothing to save or clean up yet


def exit_while_starting(program: str) -> None:
  """Until ``install_stop_handlers``, SIGINT and SIGTERM end the process at once
  with one line on stderr and status ``errors.INTERRUPTED_EXIT``. For a launcher
  process only, before anything is written."""
  _STOP.program = program
  for signum in (signal.SIGINT, signal.SIGTERM):
    signal.signal(signum, _on_signal_while_starting)


def install_stop_handlers(program: str) -> None:
  """SIGINT and SIGTERM set the stop flag (``check_stop``) instead of raising
  (ending ``exit_while_starting``)."""
  _STOP.program = program
  for signum in (signal.SIGINT, signal.SIGTERM):
    signal.signal(signum, _on_signal)


def stop_requested() -> bool:
  """Whether SIGINT or SIGTERM asked this process to stop."""
  return _STOP.event.is_set()


def check_stop(where: str) -> None:
  """A safe point: raises ``Stopped`` if a signal asked to stop."""
  if _STOP.event.is_set():
    raise errors.Stopped(f"{_STOP.signal_name}: stopped {where}")


def wait_for_stop(seconds: float) -> bool:
  """Sleeps ``seconds`` or until a signal asks to stop; returns whether
  one did."""
  return _STOP.event.wait(seconds)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
  """A save that must finish: signals received meanwhile are only noted."""
  _STOP.deferring += 1
  try:
    yield
  finally:
    _STOP.deferring -= 1
