r"""Time to the first result: programs compiled and seconds of a launcher's start, this checkout against an earlier one.

Every figure is measured for two checkouts in the same session, interleaved
(this one, then the earlier one, round after round), each in fresh
processes started in its own folder so that each imports its own ``disco``:

* ``readme``: the README's first command (``disco-eval`` at its defaults,
  Disco103 on Catch 8x8, 40k env steps) on an empty compilation cache:
  programs compiled, seconds in XLA, tracing and lowering, process wall, and
  the final returns of ``summary.json`` (which must be the same for both);
* ``cli``: ``disco-eval --help``, ``--config.rule=list`` and
  ``--config.env=list`` (wall seconds and programs compiled, counted from
  ``JAX_LOG_COMPILES``), and the import of each launcher's module (wall
  seconds, and which of the heavy optional libraries it pulled in);
* ``meta_train``: ``disco-meta-train`` at the published settings (3
  meta-steps), a cold start on an empty cache and then a warm one: seconds
  to the first meta-step and process wall;
* ``report``: medians per checkout and their ratios, ``table.md``.

Rows go to ``<out>/<step>.csv`` as they finish; a step started again skips
the rounds it has, so the script resumes where it stopped::

  git worktree add /tmp/disco-before <commit>
  python benchmarks/first_result.py all --baseline /tmp/disco-before \
      --out benchmarks/results/first_result
"""

from __future__ import annotations

import argparse
import csv
import json
import os
from pathlib import Path
import statistics
import subprocess
import sys
import tempfile
import time

if not __package__:  # run as a file: import the other scripts as a package
  sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks import cli
from benchmarks import compile_cache

HERE = Path(__file__).resolve().parents[1]
CODES = ("after", "before")
LAUNCHERS = ("evaluate", "meta_train", "compare", "validate", "distill")
# Libraries a launcher should import only where a code path uses them.
HEAVY = (
    "distrax",
    "tensorflow_probability",
    "matplotlib",
    "rliable",
    "evosax",
    "orbax",
)
CLI_COMMANDS = {
    "eval --help": ["-m", "disco.launch.evaluate", "--help"],
    "eval rule=list": ["-m", "disco.launch.evaluate", "--config.rule=list"],
    "eval env=list": ["-m", "disco.launch.evaluate", "--config.env=list"],
}
META_TRAIN_ARGS = ["--config.num_meta_steps=3", "--config.checkpoint_every=0"]
_COMPILED = "Finished XLA compilation"


def _folder(flags, code: str) -> Path:
  return HERE if code == "after" else Path(flags.baseline)


def _done(path: Path) -> list[dict]:
  if not path.exists():
    return []
  with open(path, newline="") as f:
    return list(csv.DictReader(f))


def _append(path: Path, row: dict) -> None:
  new = not path.exists()
  with open(path, "a", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=list(row))
    if new:
      writer.writeheader()
    writer.writerow(row)
  print(cli.table_row(row.values()), flush=True)


def _rounds(flags, step: str):
  """``(round, code)`` pairs not yet in ``<out>/<step>.csv``, interleaved."""
  have = {
      (r["round"], r["code"]) for r in _done(Path(flags.out) / f"{step}.csv")
  }
  for k in range(flags.rounds):
    for code in CODES:
      if (str(k), code) not in have:
        yield k, code


def _final_returns(out: Path) -> str:
  summary = json.loads((out / "summary.json").read_text())
  return " ".join(f"{x:.6f}" for x in summary["final_return_per_seed"])


def _figures(run: dict, *more: str) -> dict:
  """A launcher run's program counts and seconds (2 decimals), in the
  CSVs' column order."""
  keys = ("compiled", "loaded", "xla_s", "trace_s", "lowering_s", *more)
  return {
      k: run[k] if isinstance(run[k], int) else round(run[k], 2) for k in keys
  }


def readme(flags) -> None:
  path = Path(flags.out) / "readme.csv"
  for k, code in _rounds(flags, "readme"):
    with tempfile.TemporaryDirectory() as tmp:
      out = Path(tmp) / "run"
      r = compile_cache.run_once(
          "disco.launch.evaluate",
          [],
          Path(tmp) / "cache",
          out,
          cwd=_folder(flags, code),
      )
      _append(
          path,
          dict(
              round=k,
              code=code,
              **_figures(r, "wall_s"),
              final_returns=_final_returns(out),
          ),
      )


def _timed(argv: list[str], cwd: Path, env: dict) -> tuple[float, str, str]:
  start = time.perf_counter()
  proc = subprocess.run(
      [sys.executable, *argv],
      cwd=cwd,
      env=env,
      capture_output=True,
      text=True,
      check=False,
  )
  seconds = time.perf_counter() - start
  # absl ends --help with status 1.
  if proc.returncode not in ((0, 1) if argv[-1] == "--help" else (0,)):
    cli.usage_error(f"{' '.join(argv)} failed in {cwd}: {proc.stderr[-500:]}")
  return seconds, proc.stdout, proc.stderr


def commands(flags) -> None:
  path = Path(flags.out) / "cli.csv"
  env = dict(os.environ, JAX_LOG_COMPILES="1")
  env.pop("JAX_COMPILATION_CACHE_DIR", None)
  imports = {
      f"import {name}": [
          "-c",
          f"import sys, disco.launch.{name}; "
          f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules))",
      ]
      for name in LAUNCHERS
  }
  for k, code in _rounds(flags, "cli"):
    with tempfile.TemporaryDirectory() as tmp:
      run_env = dict(env, XDG_CACHE_HOME=tmp)
      for what, argv in {**CLI_COMMANDS, **imports}.items():
        seconds, stdout, stderr = _timed(argv, _folder(flags, code), run_env)
        _append(
            path,
            dict(
                round=k,
                code=code,
                command=what,
                wall_s=round(seconds, 2),
                compiled=stderr.count(_COMPILED),
                heavy_imports=(
                    stdout.strip().replace(" ", "+") or "none"
                    if what.startswith("import")
                    else ""
                ),
            ),
        )


def meta_train(flags) -> None:
  path = Path(flags.out) / "meta_train.csv"
  for k, code in _rounds(flags, "meta_train"):
    with tempfile.TemporaryDirectory() as tmp:
      cache = Path(tmp) / "cache"
      for start in ("cold", "warm"):
        r = compile_cache.run_once(
            "disco.launch.meta_train",
            META_TRAIN_ARGS,
            cache,
            Path(tmp) / start,
            cwd=_folder(flags, code),
        )
        _append(
            path,
            dict(
                round=k,
                code=code,
                start=start,
                **_figures(r, "first_meta_step_s", "wall_s"),
            ),
        )


def _median(rows, key) -> float:
  return statistics.median(float(r[key]) for r in rows)


def _compare_rows(rows, group_key, columns) -> list[str]:
  """One line per group and checkout (medians), then the ratio after/before."""
  lines = []
  for group in dict.fromkeys(group_key(r) for r in rows):
    by_code = {
        c: [r for r in rows if group_key(r) == group and r["code"] == c]
        for c in CODES
    }
    if not all(by_code.values()):
      continue
    medians = {c: [_median(by_code[c], k) for k in columns] for c in CODES}
    for c in CODES:
      cells = [f"{v:g}" for v in medians[c]]
      lines.append(cli.table_row([group, c, len(by_code[c]), *cells]))
    ratios = [
        f"{a / b:.2f}x" if b else "-"
        for a, b in zip(medians["after"], medians["before"], strict=True)
    ]
    lines.append(cli.table_row([group, "**after / before**", "", *ratios]))
  return lines


def report(flags) -> None:
  out = Path(flags.out)
  parts = ["# Time to the first result: this checkout against an earlier one\n"]
  rows = _done(out / "readme.csv")
  if rows:
    columns = ["compiled", "xla_s", "trace_s", "lowering_s", "wall_s"]
    parts.append("## The README's first command, empty cache (medians)\n")
    parts.append(cli.table_header(["command", "code", "runs", *columns]))
    parts += _compare_rows(rows, lambda r: "disco-eval", columns)
    returns = {r["final_returns"] for r in rows}
    parts.append(
        "\nFinal returns of summary.json: "
        + ("the same in every run" if len(returns) == 1 else "DIFFERENT")
        + f" ({'; '.join(sorted(returns))}).\n"
    )
  rows = _done(out / "cli.csv")
  if rows:
    parts.append("## Listings and imports (medians)\n")
    parts.append(
        cli.table_header(["command", "code", "runs", "wall_s", "compiled"])
    )
    parts += _compare_rows(rows, lambda r: r["command"], ["wall_s", "compiled"])
    heavy = {
        (r["command"], r["code"]): r["heavy_imports"]
        for r in rows
        if r["heavy_imports"]
    }
    parts.append("\nHeavy optional libraries each import pulls in:\n")
    parts.append(cli.table_header(["import", *CODES]))
    for name in dict.fromkeys(c for c, _ in heavy):
      parts.append(
          cli.table_row([name, *(heavy.get((name, c), "-") for c in CODES)])
      )
    parts.append("")
  rows = _done(out / "meta_train.csv")
  if rows:
    columns = [
        "compiled",
        "loaded",
        "xla_s",
        "trace_s",
        "first_meta_step_s",
        "wall_s",
    ]
    parts.append("## disco-meta-train at the published settings (medians)\n")
    parts.append(cli.table_header(["start", "code", "runs", *columns]))
    parts += _compare_rows(rows, lambda r: r["start"], columns)
  cli.write_table(out, "\n".join(parts) + "\n")


def _flags(p: argparse.ArgumentParser) -> None:
  p.add_argument(
      "--baseline",
      help="a checkout of the earlier code (e.g. a git worktree)",
  )
  p.add_argument("--out", required=True, help="folder of the CSVs and table")
  p.add_argument("--rounds", type=int, default=2, help="runs per checkout")


def _measuring(step):
  def run(flags):
    if not flags.baseline or not (Path(flags.baseline) / "disco").is_dir():
      cli.usage_error(
          f"--baseline={flags.baseline!r} is not a checkout of disco: "
          "give the folder of the earlier code (git worktree add DIR REV)."
      )
    Path(flags.out).mkdir(parents=True, exist_ok=True)
    step(flags)

  return run


def main() -> None:
  cli.run_commands(
      __doc__,
      {
          "readme": cli.Command(_measuring(readme), help="the README command"),
          "cli": cli.Command(_measuring(commands), help="listings, imports"),
          "meta_train": cli.Command(
              _measuring(meta_train), help="cold and warm meta-training"
          ),
          "report": cli.Command(report, help="table.md from the CSVs"),
      },
      shared=_flags,
      all_steps=("readme", "cli", "meta_train", "report"),
  )


if __name__ == "__main__":
  main()
