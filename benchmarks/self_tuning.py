r"""Self-tuning rules against their base rules, at defaults and tuned, on
held-out environments.

  python -m benchmarks.self_tuning run --out benchmarks/results/self_tuning
  python -m benchmarks.self_tuning report --out benchmarks/results/self_tuning

``run`` is one ``disco-compare`` into ``<out>/comparison`` (resumable:
started again, it keeps every finished run): ``stac`` and ``self_tuning_ppo`` from their base rules'
settings (each rule's preset for the environment, which a self-tuning rule
shares with its base rule), ``actor_critic`` and ``ppo`` with the same
settings, and both base rules tuned per environment on a 6-point grid
(learning rate 3e-4, 1e-3, 3e-3 x entropy cost 0.01, 0.05) on 3 tuning seeds
kept apart from the reported ones, at half the reported budget, the point
chosen on those seeds only. Every run has the same env-step budget
(``--steps``); ``--seeds`` reported seeds per rule and environment. The
environments are held out: none was used while the rules were built
(CartPole-v1, Breakout-MinAtar and ``lpg/dense`` were).

``pool`` reports the finished runs of several such comparisons as one
(``--pool_from`` their ``--out`` folders; nothing is trained): the
held-out environments' aggregates over every environment at once.

``report`` reads the comparison's ``statistics.json`` and writes, beside
the comparison's folder (which holds only what ``disco-compare`` writes, so
that ``run`` can resume), ``summary.csv``: IQM of normalised scores with
intervals, P(self-tuned > tuned) and P(self-tuned > default) with intervals,
env steps each arm paid, tuning included. The comparison's report draws the
self-tuning rules' hyper-parameters over training
(``comparison/hyper_params_<env>.png``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
import sys

if not __package__:  # run as a file: import the other scripts as a package
  sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks import cli

ENVS = (
    "gymnax/Acrobot-v1",
    "xminigrid/MiniGrid-Empty-8x8",
    "gymnax/Asterix-MinAtar",
    "gymnax/SpaceInvaders-MinAtar",
    "xminigrid/MiniGrid-DoorKey-5x5",
    "brax/inverted_pendulum",
)
PAIRS = (("stac", "actor_critic"), ("self_tuning_ppo", "ppo"))
GRID = "learning_rate=(3e-4,1e-3,3e-3),entropy_cost=(0.01,0.05)"
GRID_POINTS = 6
TUNE_SEEDS = 3
TUNE_SEED = 1000
# The comparison's folder under ``--out``.
COMPARISON = "comparison"


def compare_overrides(args: argparse.Namespace) -> dict:
  rules = tuple(r for pair in PAIRS for r in pair)
  return dict(
      rules=rules,
      envs=tuple(args.envs),
      num_seeds=args.seeds,
      total_env_steps=args.steps,
      last_episodes=args.last_episodes,
      output_dir=str(args.out / COMPARISON),
      tune=dict(
          rules=tuple(base for _, base in PAIRS),
          grid=GRID,
          num_seeds=TUNE_SEEDS,
          seed=TUNE_SEED,
          total_env_steps=args.steps // 2,
          keep_untuned=True,
      ),
  )


def run(args: argparse.Namespace) -> None:
  from disco import comparison  # pylint: disable=g-import-not-at-top

  comparison.compare(**compare_overrides(args))


def _probability(stats: dict, a: str, b: str) -> dict:
  """P(a > b) over the environments with its interval, from the report's
  probability-of-improvement entries (either order)."""
  for entry in stats.get("probability_of_improvement", []):
    pair = (entry["x"], entry["y"])
    if pair == (a, b):
      return dict(
          estimate=entry["estimate"], low=entry["low"], high=entry["high"]
      )
    if pair == (b, a):
      return dict(
          estimate=1 - entry["estimate"],
          low=1 - entry["high"],
          high=1 - entry["low"],
      )
  return {}


def report(args: argparse.Namespace) -> None:
  out = Path(args.out)
  stats = json.loads((out / COMPARISON / "statistics.json").read_text())
  rows = []
  for tuned_rule, base in PAIRS:
    for arm in (tuned_rule, base, f"{base}-tuned"):
      iqm = stats["aggregates"].get(arm, {}).get("iqm", {})
      paid = args.seeds * args.steps
      if arm.endswith("-tuned"):
        paid += GRID_POINTS * TUNE_SEEDS * (args.steps // 2)
      better = {} if arm == tuned_rule else _probability(stats, tuned_rule, arm)
      rows.append(
          dict(
              arm=arm,
              iqm=iqm.get("estimate"),
              iqm_low=iqm.get("low"),
              iqm_high=iqm.get("high"),
              p_self_tuned_better=better.get("estimate"),
              p_low=better.get("low"),
              p_high=better.get("high"),
              env_steps_paid_per_env=paid,
          )
      )
  cli.write_csv(out / "summary.csv", rows)
  print(json.dumps(rows, indent=1))


def pool(args: argparse.Namespace) -> None:
  """One comparison of the finished runs of the comparisons under
  ``--pool_from`` (their ``comparison/runs/<arm>/<env>`` folders, nothing
  trained), into ``--out``, then its ``summary.csv`` (``report``)."""
  from disco import comparison  # pylint: disable=g-import-not-at-top

  run_dirs = sorted(
      str(folder)
      for source in args.pool_from
      for folder in (Path(source) / COMPARISON / "runs").glob("*/*")
      if folder.is_dir()
  )
  if not run_dirs:
    cli.usage_error(f"no run folders under {args.pool_from}: run them first")
  comparison.compare(
      run_dirs=tuple(run_dirs), output_dir=str(Path(args.out) / COMPARISON)
  )
  report(args)


def _flags(p: argparse.ArgumentParser) -> None:
  p.add_argument("--out", type=Path, required=True)
  p.add_argument("--envs", nargs="+", default=list(ENVS))
  p.add_argument("--seeds", type=int, default=10)
  p.add_argument("--steps", type=int, default=100_000)
  p.add_argument("--last_episodes", type=int, default=100)
  p.add_argument(
      "--pool_from",
      nargs="+",
      default=[],
      help="pool: the --out folders of the comparisons to report as one",
  )


def main(argv=None) -> None:
  parser = cli.parser(__doc__)
  parser.add_argument("command", choices=("run", "report", "pool"))
  _flags(parser)
  args = parser.parse_args(argv)
  {"run": run, "report": report, "pool": pool}[args.command](args)


if __name__ == "__main__":
  main()
