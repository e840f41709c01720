"""Launchers: ``evaluate`` (disco-eval), ``meta_train`` (disco-meta-train),
``compare`` (disco-compare), ``validate`` (disco-validate), ``distill``
(disco-distill), and what they share (``common``).

When this process is a launcher, importing this package (before the launcher
imports its libraries) installs ``stopping.exit_while_starting``, so Ctrl-C or
SIGTERM during start-up ends it with one line and status 130. Imported anywhere
else it changes nothing; it imports only the standard library and
``disco.stopping``.
"""

from __future__ import annotations

from collections.abc import Sequence
import os
import sys

from disco import stopping

# Each launcher module and its program (the console scripts of setup.cfg).
PROGRAMS = {
    "disco.launch.evaluate": "disco-eval",
    "disco.launch.meta_train": "disco-meta-train",
    "disco.launch.compare": "disco-compare",
    "disco.launch.validate": "disco-validate",
    "disco.launch.distill": "disco-distill",
}
# Python's options that take the next argument as their value.
_OPTIONS_WITH_VALUE = ("-X", "-W", "--check-hash-based-pycs")


def running_program(
    command_line: Sequence[str] | None = None, script: str | None = None
) -> str | None:
  """The launcher this process runs, by program name, or None: ``command_line``
  (default ``sys.orig_argv``) as ``python [options] -m disco.launch.<module>``,
  or ``script`` (default ``sys.argv[0]``) a launcher's console script."""
  command_line = sys.orig_argv if command_line is None else command_line
  script = sys.argv[0] if script is None else script
  if os.path.basename(script) in PROGRAMS.values():
    return os.path.basename(script)
  args = iter(command_line[1:])
  for arg in args:
    if arg in _OPTIONS_WITH_VALUE:
      next(args, None)
    elif arg.startswith("-m"):
      module = arg[2:] or next(args, "")
      return PROGRAMS.get(module)
    elif not arg.startswith("-") or arg.startswith("-c") or arg == "-":
      return None  # a script file, code, or standard input
  return None


_PROGRAM = running_program()
if _PROGRAM is not None:
  stopping.exit_while_starting(_PROGRAM)
