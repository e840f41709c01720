"""Measures the error rates of ``disco.comparison``'s tests and intervals.

  python benchmarks/stats_calibration.py                  # the BENCHMARKS.md table
  python benchmarks/stats_calibration.py --trials 2000 --seeds 2 3

Prints two markdown tables (``disco.comparison.calibration``):

* the false-positive rate of every test at ``--alpha`` and each seed count
  (per rule) of ``--seeds``, on null data sets whose two rules' seeds come
  from the same distribution: normal scores, and "discrete" ones (three
  values, so seeds tie and whole samples are often constant); "refused"
  where the test refuses that seed count;
* the coverage of the nominal ``--confidence`` intervals: rliable's
  stratified-bootstrap intervals (a vectorised replica) of the mean, IQM and
  median over ``--envs`` environments of normal scores, the approximate
  coverage the report prints beside them
  (``aggregates.approximate_coverage``), and the Welch interval of a
  difference of means.

Each rate carries its Monte-Carlo standard error. Runs on the CPU (NumPy and
SciPy); the default settings take about a minute.
"""

from __future__ import annotations

import datetime
from pathlib import Path
import sys

if not __package__:  # run as a file: import the other scripts as a package
  sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks import cli
from benchmarks import timing
from disco.comparison import calibration
from disco.comparison import two_sample
from disco.scoring import aggregates


def _cell(rate: calibration.Rate) -> str:
  return f"{rate.rate:.3f} ± {rate.stderr:.3f}"


def false_positive_table(args) -> list[str]:
  lines = [
      cli.table_header(["test", "scores", *(f"{n} seeds" for n in args.seeds)])
  ]
  for test in two_sample.TESTS:
    for scores in calibration.SCORES:
      cells = []
      for n in args.seeds:
        try:
          rate = calibration.false_positive_rate(
              test,
              n,
              alpha=args.alpha,
              trials=args.trials,
              reps=args.reps,
              scores=scores,
              seed=args.seed + n,
          )
          cells.append(_cell(rate))
        except ValueError:
          cells.append(
              f"refused (needs {two_sample.min_seeds(test, args.alpha)})"
          )
      lines.append(cli.table_row([test, scores, *cells]))
  return lines


def coverage_table(args) -> list[str]:
  lines = [cli.table_header(["interval", *(f"{n} seeds" for n in args.seeds)])]
  for metric in calibration.METRICS:
    cells = []
    for n in args.seeds:
      rate = calibration.interval_coverage(
          metric,
          n,
          args.envs,
          confidence=args.confidence,
          trials=args.trials,
          reps=args.bootstrap_reps,
          seed=args.seed + n,
      )
      cells.append(_cell(rate))
    name = (
        "Welch difference of means (1 env)"
        if metric == "mean_difference"
        else f"bootstrap {metric} ({args.envs} envs)"
    )
    lines.append(cli.table_row([name, *cells]))
  predicted = [
      f"{aggregates.approximate_coverage(n, args.envs, args.confidence):.3f}"
      for n in args.seeds
  ]
  lines.append(
      cli.table_row(
          [f"report's approximate coverage ({args.envs} envs)", *predicted]
      )
  )
  return lines


def main() -> None:
  parser = cli.parser(__doc__)
  parser.add_argument("--seeds", type=int, nargs="+", default=[2, 3, 5, 10])
  parser.add_argument("--trials", type=int, default=20000)
  parser.add_argument("--reps", type=int, default=500)
  parser.add_argument("--bootstrap_reps", type=int, default=1000)
  parser.add_argument("--alpha", type=float, default=0.05)
  parser.add_argument("--confidence", type=float, default=0.95)
  parser.add_argument("--envs", type=int, default=4)
  parser.add_argument("--seed", type=int, default=0)
  args = parser.parse_args()
  clock = timing.Stopwatch()
  print(
      f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC; "
      f"{args.trials} simulated data sets per cell; alpha={args.alpha}, "
      f"confidence={args.confidence}; resamples: {args.reps} (tests), "
      f"{args.bootstrap_reps} (intervals)."
  )
  print(f"\nFalse-positive rate at alpha={args.alpha} (two-sided tests):\n")
  print("\n".join(false_positive_table(args)))
  print(f"\nCoverage of nominal {args.confidence:.0%} intervals:\n")
  print("\n".join(coverage_table(args)))
  print(f"\n{clock.seconds():.0f} s")


if __name__ == "__main__":
  main()
