r"""Checks that the numbers of an old benchmarks file are all still in docs/.

  python docs/check_numbers.py                      # BENCHMARKS.md at 6338ed3
  python docs/check_numbers.py --old FILE           # any Markdown file
  python docs/check_numbers.py --rev REV --path README.md

When ``BENCHMARKS.md`` was split into the results pages (docs/results/), no
figure was to be lost. This is a rough token check: every number of the old
file (``1.72x``, ``0.961``, ``2,904,064``, ``-0.150``, ``2026-11-27``, ``1e-4``:
the digits with their signs, separators and exponents) must appear as a
number somewhere in the Markdown under docs/. It prints the count and the
numbers it misses with their line in the old file, and exits 1 if it misses
any.
"""

from __future__ import annotations

import argparse
from pathlib import Path
import re
import subprocess
import sys

REPO = Path(__file__).resolve().parent.parent
# A number: optional sign, digits with , or . separators, optional exponent.
NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:[.,]\d+)*(?:e[-+]?\d+)?", re.I)


def numbers(text: str) -> set[str]:
  """The numbers in ``text``, a leading ``+`` dropped (``+0.2`` is ``0.2``)."""
  return {m.group().lstrip("+") for m in NUMBER.finditer(text)}


def docs_numbers() -> set[str]:
  found: set[str] = set()
  for path in sorted((REPO / "docs").rglob("*.md")):
    found |= numbers(path.read_text())
  return found


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--old", help="a file to read (instead of git)")
  parser.add_argument("--rev", default="6338ed3")
  parser.add_argument("--path", default="BENCHMARKS.md")
  args = parser.parse_args()
  if args.old:
    old = Path(args.old).read_text()
  else:
    old = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{args.rev}:{args.path}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
  have = docs_numbers()
  missing: dict[str, int] = {}
  for i, line in enumerate(old.splitlines(), 1):
    for n in sorted(numbers(line) - have):
      missing.setdefault(n, i)
  total = len(numbers(old))
  print(
      f"{total - len(missing)} of {total} distinct numbers of the old file "
      f"are in docs/; missing: {len(missing)}"
  )
  for n, line in missing.items():
    print(f"  {n!r} (old line {line})")
  return 1 if missing else 0


if __name__ == "__main__":
  sys.exit(main())
