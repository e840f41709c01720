r"""Plots the estimators' meta-training curves on Catch 5x5.

  python benchmarks/plot_estimator_threshold.py
  python benchmarks/plot_estimator_threshold.py --csv FILE --out FILE.png

Input: ``benchmarks/results/estimator_threshold/rewards.csv``, written by
``benchmarks/estimator_threshold.py report`` (columns ``run``, ``meta_step``,
``rewards``: the mean reward per actor step of each meta-step, or of each
generation for ES). Output: ``docs/results/img/estimator_threshold_rewards.png``
with two panels: the 20-step moving mean of truncated backprop and PES
against meta-steps, with the +0.2 threshold, and ES against generations.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
import csv
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

REPO = Path(__file__).resolve().parent.parent
CSV = REPO / "benchmarks/results/estimator_threshold/rewards.csv"
OUT = REPO / "docs/results/img/estimator_threshold_rewards.png"
WINDOW = 20
THRESHOLD = 0.2


def read(path: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
  """``run -> (steps, rewards)``, sorted by step."""
  rows = defaultdict(list)
  with open(path, newline="") as f:
    for row in csv.DictReader(f):
      rows[row["run"]].append((int(row["meta_step"]), float(row["rewards"])))
  out = {}
  for run, pairs in rows.items():
    pairs.sort()
    steps, rewards = zip(*pairs, strict=True)
    out[run] = (np.asarray(steps), np.asarray(rewards))
  return out


def moving_mean(x: np.ndarray, window: int) -> np.ndarray:
  """Mean of the last ``window`` values (fewer at the start)."""
  c = np.cumsum(np.insert(x, 0, 0.0))
  end = np.arange(1, len(x) + 1)
  start = np.maximum(end - window, 0)
  return (c[end] - c[start]) / (end - start)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--csv", type=Path, default=CSV)
  parser.add_argument("--out", type=Path, default=OUT)
  args = parser.parse_args()
  runs = read(args.csv)

  fig, (left, right) = plt.subplots(
      1, 2, figsize=(10, 3.8), gridspec_kw={"width_ratios": [3, 1]}
  )
  colours = {"backprop": "tab:blue", "pes": "tab:orange", "es": "tab:green"}
  for run in sorted(runs):
    estimator, seed = run.split("-")
    steps, rewards = runs[run]
    axis = right if estimator == "es" else left
    axis.plot(
        steps,
        moving_mean(rewards, WINDOW),
        color=colours[estimator],
        alpha=1.0 if seed == "s0" else 0.6,
        linestyle={"s0": "-", "s1": "--", "s2": ":"}[seed],
        label=f"{estimator} {seed}",
    )
  left.axhline(THRESHOLD, color="grey", linewidth=0.8)
  left.set_xlabel("meta-step")
  left.set_ylabel(f"reward per step ({WINDOW}-step mean)")
  left.set_title("truncated backprop and PES (1 antithetic pair)")
  left.legend(fontsize=8, ncol=2)
  right.set_xlabel("generation")
  right.set_title("ES, 8 members (CPU)")
  right.set_ylim(left.get_ylim())
  right.legend(fontsize=8)
  fig.tight_layout()
  args.out.parent.mkdir(parents=True, exist_ok=True)
  fig.savefig(args.out, dpi=110)
  print(f"wrote {args.out}")


if __name__ == "__main__":
  main()
