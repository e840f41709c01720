"""When does Disco103 learn the README's first run, seed by seed?

  python benchmarks/first_run_seeds.py run --out runs/first-run-seeds \
      --seeds 8 --env_steps 100000
  python benchmarks/first_run_seeds.py report --run runs/first-run-seeds \
      --out benchmarks/results/first_run

``run`` is the README's first command (``disco-eval``: Disco103 on Catch 8x8
with the published evaluation notebook's settings) with ``--seeds`` seeds
vmapped and a longer budget; it does nothing when the folder already holds
the finished run. ``report`` reads the run's ``metrics.csv`` and writes, for
each seed, the mean return of its last 500 episodes after every compiled
call (``curves.csv``), the first env step at which that mean reached 0.9 and
the return at 40.6k steps (the README's budget) and at the end
(``takeoff.csv``, ``takeoff.md``), and the curves as ``curves.png``.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import numpy as np

WINDOW = 500  # episodes: the README's final score
THRESHOLD = 0.9
README_STEPS = 40_600  # the README's run: 700 iterations of 58 env steps


def run(args: argparse.Namespace) -> None:
  from disco import evaluation  # pylint: disable=g-import-not-at-top

  out = Path(args.out)
  if (out / "summary.json").is_file():
    print(f"{out} holds the finished run: nothing to do.")
    return
  evaluation.evaluate(
      num_seeds=args.seeds,
      total_env_steps=args.env_steps,
      output_dir=str(out),
      overwrite=True,
  )


def _windowed(metrics: dict[str, np.ndarray]) -> np.ndarray:
  """``[S, N]`` mean return of the last ``WINDOW`` episodes; NaN before."""
  from disco.training import analysis  # pylint: disable=g-import-not-at-top

  curve = analysis.return_curve(metrics, WINDOW)
  enough = np.cumsum(np.asarray(metrics["episodes"]), axis=1) >= WINDOW
  return np.where(enough, curve, np.nan)


def report(args: argparse.Namespace) -> None:
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top

  from disco.training import analysis  # pylint: disable=g-import-not-at-top

  run_dir, out = Path(args.run), Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  metrics = analysis.read_metrics_csv(run_dir / "metrics.csv")
  seeds = [int(s) for s in metrics["seed"][:, 0]]
  steps = np.asarray(metrics["env_steps"][0])
  curve = _windowed(metrics)
  per_call = json.loads((run_dir / "config.json").read_text())["run"][
      "iterations_per_call"
  ]
  rows = range(per_call - 1, len(steps), per_call)
  with open(out / "curves.csv", "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(["env_steps", *(f"seed{s}" for s in seeds)])
    for i in rows:
      writer.writerow([int(steps[i]), *(f"{v:.4f}" for v in curve[:, i])])
  at_readme = int(np.searchsorted(steps, README_STEPS))
  table = []
  for k, s in enumerate(seeds):
    hit = np.nonzero(curve[k] >= THRESHOLD)[0]
    table.append(
        dict(
            seed=s,
            steps_to_threshold=int(steps[hit[0]]) if hit.size else "",
            return_at_readme_budget=f"{curve[k, at_readme]:.3f}",
            final_return=f"{curve[k, -1]:.3f}",
            final_env_steps=int(steps[-1]),
        )
    )
  with open(out / "takeoff.csv", "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=list(table[0]))
    writer.writeheader()
    writer.writerows(table)
  lines = [
      f"| seed | env steps to {THRESHOLD} | return at {steps[at_readme]} "
      f"steps | return at {steps[-1]} steps |",
      "|---|---|---|---|",
  ]
  for t in table:
    lines.append(
        f"| {t['seed']} | {t['steps_to_threshold'] or 'not reached'} | "
        f"{t['return_at_readme_budget']} | {t['final_return']} |"
    )
  (out / "takeoff.md").write_text("\n".join(lines) + "\n")
  fig, ax = plt.subplots(figsize=(7, 4))
  for k, s in enumerate(seeds):
    ax.plot(steps, curve[k], lw=1.2, label=f"seed {s}")
  ax.axvline(README_STEPS, color="grey", ls="--", lw=1)
  ax.text(README_STEPS, -0.95, " README's budget", color="grey", fontsize=8)
  ax.axhline(THRESHOLD, color="grey", lw=0.5)
  ax.set_xlabel("env steps")
  ax.set_ylabel(f"mean return, last {WINDOW} episodes")
  ax.set_ylim(-1.05, 1.05)
  ax.set_title("Disco103 on Catch 8x8, the README's settings")
  ax.legend(fontsize=7, ncol=2, loc="upper left")
  fig.tight_layout()
  fig.savefig(out / "curves.png", dpi=110)
  plt.close(fig)
  print((out / "takeoff.md").read_text())


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  commands = parser.add_subparsers(dest="command", required=True)
  p = commands.add_parser("run", help="train the seeds")
  p.add_argument("--out", required=True)
  p.add_argument("--seeds", type=int, default=8)
  p.add_argument("--env_steps", type=int, default=100_000)
  p.set_defaults(fn=run)
  p = commands.add_parser("report", help="tables and the figure")
  p.add_argument("--run", required=True, help="the run's folder")
  p.add_argument("--out", required=True)
  p.set_defaults(fn=report)
  args = parser.parse_args()
  args.fn(args)


if __name__ == "__main__":
  main()
