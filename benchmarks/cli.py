"""The benchmark scripts' one command-line and report shape.

* ``parser(__doc__)``: a script's parser, described by its docstring's first
  line;
* ``run_commands``: a script of sub-commands (``run``, ``report``, ...), each
  with its own flags beside the flags they share, and optionally ``all``,
  which runs some of them in turn with all their flags;
* ``write_csv``, ``write_table`` (``table.md``, also printed),
  ``table_header`` and ``table_row`` for the files and tables the reports
  write;
* ``print_result`` / ``child_result``: a child process hands its figures back
  on a last line ``RESULT <json>``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
import csv
import dataclasses
import json
from pathlib import Path
import subprocess
import sys
from typing import Any, NoReturn

RESULT = "RESULT "


def parser(doc: str) -> argparse.ArgumentParser:
  """A script's argument parser, described by the first line of ``doc``."""
  return argparse.ArgumentParser(description=doc.strip().splitlines()[0])


def _no_flags(unused_parser: argparse.ArgumentParser) -> None:
  pass


@dataclasses.dataclass(frozen=True)
class Command:
  """A sub-command: what it does with the parsed flags, and its own flags."""

  run: Callable[[argparse.Namespace], Any]
  flags: Callable[[argparse.ArgumentParser], None] = _no_flags
  help: str | None = None


def run_commands(
    doc: str,
    commands: Mapping[str, Command],
    shared: Callable[[argparse.ArgumentParser], None] = _no_flags,
    all_steps: Sequence[str] = (),
    argv: Sequence[str] | None = None,
) -> argparse.Namespace:
  """Parses ``argv`` as ``<command> [flags]`` and runs the command.

  Args:
    doc: the script's docstring (its first line describes it).
    commands: name -> command, in the order ``--help`` lists them.
    shared: adds the flags every command takes (``--root``).
    all_steps: if given, an ``all`` command runs these commands in turn,
      taking the flags of every one of them.
    argv: the arguments (default: the command line).

  Returns:
    The parsed flags.
  """
  main = parser(doc)
  sub = main.add_subparsers(dest="command", required=True)
  for name, command in commands.items():
    p = sub.add_parser(name, help=command.help)
    shared(p)
    command.flags(p)
  if all_steps:
    p = sub.add_parser("all", help="; then ".join(all_steps))
    shared(p)
    for name in all_steps:
      commands[name].flags(p)
  args = main.parse_args(argv)
  steps = all_steps if args.command == "all" else (args.command,)
  for name in steps:
    commands[name].run(args)
  return args


def add_report_flags(p: argparse.ArgumentParser) -> None:
  """``report ROOT --out OUT``: the runs' folder and the report's."""
  p.add_argument("root")
  p.add_argument("--out", required=True)


def write_csv(
    path: Path,
    rows: Sequence[Mapping[str, Any]],
    fieldnames: Sequence[str] | None = None,
) -> None:
  """``rows`` as a CSV file with a header (default columns: the first
  row's keys)."""
  with open(path, "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=list(fieldnames or rows[0]))
    writer.writeheader()
    writer.writerows(rows)


def usage_error(message: str) -> NoReturn:
  """Ends the script on bad input: one line on stderr, exit status 2."""
  print(f"{Path(sys.argv[0]).name}: error: {message}", file=sys.stderr)
  raise SystemExit(2)


def write_table(out: Path, text: str, name: str = "table.md") -> None:
  """Writes a report's Markdown ``text`` to ``out/name`` and prints it."""
  (out / name).write_text(text)
  print(text)


def table_row(cells: Sequence[Any]) -> str:
  """A line of a Markdown table."""
  return "| " + " | ".join(str(c) for c in cells) + " |"


def table_header(columns: Sequence[str]) -> str:
  """The first two lines of a Markdown table."""
  return table_row(columns) + "\n|" + "---|" * len(columns)


def print_result(figures: Any) -> None:
  """The last line of a child (or of a script read by another)."""
  print(RESULT + json.dumps(figures))


def child_result(
    command: Sequence[str], env: Mapping[str, str] | None = None
) -> tuple[Any, subprocess.CompletedProcess]:
  """Runs ``command`` and reads its last ``RESULT`` line: ``(figures or None
  if it failed or printed none, the finished process)``."""
  proc = subprocess.run(command, env=env, capture_output=True, text=True)
  lines = [x for x in proc.stdout.splitlines() if x.startswith(RESULT)]
  if proc.returncode != 0 or not lines:
    return None, proc
  return json.loads(lines[-1][len(RESULT) :]), proc
