"""Stopping a run at a safe point.

SIGINT and SIGTERM (a scheduler's pre-emption) set a per-process flag instead
of raising wherever the program happens to be: training loops call
``check_stop`` between steps (it raises ``errors.Stopped``), saves that must
finish run under ``signals_deferred``. A second Ctrl-C outside a save exits at
once (every output file is written atomically).

Before that (``install_stop_handlers``), while a launcher imports its
libraries and parses its flags, ``exit_while_starting`` makes either signal
end the process at once with one line and ``errors.INTERRUPTED_EXIT``:
nothing has been written yet, and Python's own ``KeyboardInterrupt`` would
print a traceback there, or be lost when it is raised inside a
garbage-collection callback (Python only reports those). This module and
``disco.errors`` import only the standard library, so that the launchers set
this up before their first heavy import.
"""

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
  # os.write, not print: a handler that prints while the main thread is
  # printing would raise a "reentrant call" error.
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
  """Until ``install_stop_handlers``: SIGINT and SIGTERM end the process at
  once, with one line on stderr (``<program>: SIGINT received while
  starting: ...``) and exit status ``errors.INTERRUPTED_EXIT``.

  For a launcher process only (it changes the process's signal handling),
  before anything is written (see the module's docstring).
  """
  _STOP.program = program
  for signum in (signal.SIGINT, signal.SIGTERM):
    signal.signal(signum, _on_signal_while_starting)


def install_stop_handlers(program: str) -> None:
  """SIGINT and SIGTERM set the stop flag (see ``check_stop``) instead of
  raising where the program happens to be (this ends
  ``exit_while_starting``)."""
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
