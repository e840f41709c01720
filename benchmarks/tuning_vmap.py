r"""disco-compare's tuning grid: one vmapped program against one run per point.

A fixed 6-point grid (PPO on Catch, ``learning_rate`` x ``entropy_cost``, 3
tuning seeds) is tuned by ``comparison.compare`` with ``tune.vmap=True`` and
with ``tune.vmap=False``, in turn (the order alternating between repeats),
each in a fresh process with the persistent compilation cache off, so both
compile their programs every time. A measurement's grid time runs from the
``compare`` call to the log line naming the chosen point (building the
comparison, tracing, compiling, training and writing every point); the
reported seeds' run after it is the same under both modes and left out::

  python benchmarks/tuning_vmap.py run --out /tmp/tuning_vmap --repeats 3
  python benchmarks/tuning_vmap.py run --out /tmp/tuning_vmap_tiny --tiny

``--out/runs.csv`` gets a row per measurement as it finishes (a killed run
continues with the measurements it lacks), ``--out/summary.csv`` and
``table.md`` each mode's median grid time, its chosen point (the two modes
must choose the same) and the ratio of the medians (sequential / vmapped).
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path
import statistics
import sys
import time

if not __package__:  # run as a file: import the other scripts as a package
  sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks import cli

MODES = ("vmapped", "sequential")
GRID = "learning_rate=(3e-4,1e-3,3e-3),entropy_cost=(0.0,0.01)"
RUN_COLUMNS = ("repeat", "mode", "grid_s", "total_s", "chosen", "trained_as")


def _config(out: Path, mode: str, tiny: bool) -> dict:
  """``compare``'s overrides of one measurement."""
  steps = 2_048 if tiny else 20_480
  loop = (
      dict(num_envs=4, rollout_len=16, batch_size=4, iterations_per_call=8)
      if tiny
      else {}
  )
  return dict(
      rules=("ppo",),
      envs=("catch",),
      num_seeds=3,
      total_env_steps=steps // 4,  # the reported seeds' run, not timed
      last_episodes=20 if tiny else 200,
      output_dir=str(out),
      compilation_cache="off",
      tune=dict(
          rules=("ppo",),
          grid=GRID,
          num_seeds=3,
          seed=1000,
          total_env_steps=steps,
          vmap=mode == "vmapped",
      ),
      **loop,
  )


def measure(args: argparse.Namespace) -> None:
  """One comparison (in this process); prints its figures as ``RESULT``."""
  from disco import comparison  # pylint: disable=g-import-not-at-top

  out = Path(args.out) / f"repeat{args.repeat}-{args.mode}"
  grid_end = []
  trained_as = []

  def log(line: str) -> None:
    if "as one vmapped program" in line or "point by point" in line:
      trained_as.append(line.rpartition(", ")[2])
    if line.startswith("Tuned ") and not grid_end:
      grid_end.append(time.perf_counter())

  start = time.perf_counter()
  stats = comparison.compare(
      **_config(out, args.mode, args.tiny), log=log, progress=False
  )
  total = time.perf_counter() - start
  (choice,) = stats["tuning"]["choices"]
  cli.print_result(
      dict(
          repeat=args.repeat,
          mode=args.mode,
          grid_s=round(grid_end[0] - start, 2),
          total_s=round(total, 2),
          chosen=json.dumps(choice["point"], sort_keys=True),
          trained_as=trained_as[0] if trained_as else "",
      )
  )


def _done(path: Path) -> list[dict]:
  if not path.exists():
    return []
  with open(path, newline="") as f:
    return list(csv.DictReader(f))


def run(args: argparse.Namespace) -> None:
  """Every measurement not in ``runs.csv`` yet, interleaved; then the
  summary."""
  out = Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  path = out / "runs.csv"
  rows = _done(path)
  for repeat in range(args.repeats):
    order = MODES if repeat % 2 == 0 else MODES[::-1]
    for mode in order:
      if any(r["repeat"] == str(repeat) and r["mode"] == mode for r in rows):
        continue
      command = [
          sys.executable,
          str(Path(__file__).resolve()),
          "measure",
          "--out",
          str(out),
          "--repeat",
          str(repeat),
          "--mode",
          mode,
          *(["--tiny"] if args.tiny else []),
      ]
      figures, proc = cli.child_result(command)
      if figures is None:
        sys.stderr.write(proc.stderr[-3000:])
        cli.usage_error(f"the {mode} measurement {repeat} failed")
      print(f"repeat {repeat} {mode}: grid {figures['grid_s']} s", flush=True)
      rows.append({k: str(figures[k]) for k in RUN_COLUMNS})
      cli.write_csv(path, rows, RUN_COLUMNS)
  summarize(out, rows)


def summarize(out: Path, rows: list[dict]) -> None:
  """``summary.csv`` and ``table.md``: per mode its median grid time and
  chosen point, and the ratio."""
  summary = []
  for mode in MODES:
    mine = [r for r in rows if r["mode"] == mode]
    if not mine:
      continue
    summary.append(
        dict(
            mode=mode,
            repeats=len(mine),
            median_grid_s=round(
                statistics.median(float(r["grid_s"]) for r in mine), 2
            ),
            chosen=" / ".join(sorted({r["chosen"] for r in mine})),
            trained_as=mine[0]["trained_as"],
        )
    )
  if len(summary) == 2:
    vmapped, sequential = summary
    ratio = round(sequential["median_grid_s"] / vmapped["median_grid_s"], 2)
    same = vmapped["chosen"] == sequential["chosen"]
    for row in summary:
      row.update(speedup=ratio, same_choice=same)
  cli.write_csv(out / "summary.csv", summary)
  columns = list(summary[0])
  cli.write_table(
      out,
      "\n".join(
          [cli.table_header(columns)]
          + [cli.table_row(row.values()) for row in summary]
      )
      + "\n",
  )


def _flags(p: argparse.ArgumentParser) -> None:
  p.add_argument("--out", required=True)
  p.add_argument(
      "--tiny", action="store_true", help="a few steps: checks the script"
  )


def _run_flags(p: argparse.ArgumentParser) -> None:
  _flags(p)
  p.add_argument("--repeats", type=int, default=3)


def _measure_flags(p: argparse.ArgumentParser) -> None:
  _flags(p)
  p.add_argument("--repeat", type=int, required=True)
  p.add_argument("--mode", choices=MODES, required=True)


if __name__ == "__main__":
  cli.run_commands(
      __doc__,
      dict(
          run=cli.Command(run, _run_flags, "the interleaved measurements"),
          measure=cli.Command(measure, _measure_flags, "one measurement"),
      ),
  )
