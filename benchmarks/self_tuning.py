r"""Self-tuning rules against their base rules, at defaults and tuned, on
held-out environments.

  python -m benchmarks.self_tuning run --out benchmarks/results/self_tuning
  python -m benchmarks.self_tuning report --out benchmarks/results/self_tuning

``run`` is one ``disco-compare`` (resumable: started again, it keeps every
finished run): ``stac`` and ``self_tuning_ppo`` from their base rules'
settings (each rule's preset for the environment, which a self-tuning rule
shares with its base rule), ``actor_critic`` and ``ppo`` with the same
settings, and both base rules tuned per environment on a 6-point grid
(learning rate 3e-4, 1e-3, 3e-3 x entropy cost 0.01, 0.05) on 3 tuning seeds
kept apart from the reported ones, at half the reported budget, the point
chosen on those seeds only. Every run has the same env-step budget
(``--steps``); ``--seeds`` reported seeds per rule and environment. The
environments are held out: none was used while the rules were built
(CartPole-v1, Breakout-MinAtar and ``lpg/dense`` were).

``report`` reads the comparison's ``statistics.json`` and run folders and
writes ``summary.csv`` (IQM of normalised scores with intervals, P(self-tuned
> tuned) and P(self-tuned > default) with intervals, env steps each arm paid,
tuning included) and ``hyper_params_<env>.png`` (the self-tuning rules'
hyper-parameters over training, mean over seeds).
"""

from __future__ import annotations

import argparse
import csv
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
    "brax/inverted_pendulum",
)
PAIRS = (("stac", "actor_critic"), ("self_tuning_ppo", "ppo"))
GRID = "learning_rate=(3e-4,1e-3,3e-3),entropy_cost=(0.01,0.05)"
GRID_POINTS = 6
TUNE_SEEDS = 3
TUNE_SEED = 1000
HYPER_PREFIX = "learner/hyper_params/"


def compare_overrides(args: argparse.Namespace) -> dict:
  rules = tuple(r for pair in PAIRS for r in pair)
  return dict(
      rules=rules,
      envs=tuple(args.envs),
      num_seeds=args.seeds,
      total_env_steps=args.steps,
      last_episodes=args.last_episodes,
      output_dir=str(args.out),
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


def _hyper_param_figure(out: Path, runs: Path, env_dir: str, env: str) -> None:
  import matplotlib  # pylint: disable=g-import-not-at-top

  matplotlib.use("Agg")
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top

  rules = [
      r for r, _ in PAIRS if (runs / r / env_dir / "metrics.csv").is_file()
  ]
  if not rules:
    return
  fig, axes = plt.subplots(1, len(rules), figsize=(5 * len(rules), 3.5))
  axes = list(axes) if len(rules) > 1 else [axes]
  for ax, rule in zip(axes, rules, strict=True):
    with open(runs / rule / env_dir / "metrics.csv") as f:
      rows = list(csv.DictReader(f))
    names = sorted(
        k[len(HYPER_PREFIX) :] for k in rows[0] if k.startswith(HYPER_PREFIX)
    )
    steps = sorted({int(float(r["env_steps"])) for r in rows})
    for name in names:
      means = []
      for step in steps:
        values = [
            float(r[HYPER_PREFIX + name])
            for r in rows
            if int(float(r["env_steps"])) == step and r[HYPER_PREFIX + name]
        ]
        means.append(sum(values) / max(len(values), 1))
      start = means[0] or 1.0
      ax.plot(steps, [m / start for m in means], label=f"{name} ({start:g})")
    ax.set_title(f"{rule} on {env}")
    ax.set_xlabel("env steps")
    ax.set_ylabel("value / initial value")
    ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(out / f"hyper_params_{env.replace('/', '_')}.png", dpi=110)
  plt.close(fig)


def report(args: argparse.Namespace) -> None:
  out = Path(args.out)
  stats = json.loads((out / "statistics.json").read_text())
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
  for env in stats["envs"]:
    _hyper_param_figure(out, out / "runs", env.replace("/", "_"), env)
  print(json.dumps(rows, indent=1))


def _flags(p: argparse.ArgumentParser) -> None:
  p.add_argument("--out", type=Path, required=True)
  p.add_argument("--envs", nargs="+", default=list(ENVS))
  p.add_argument("--seeds", type=int, default=10)
  p.add_argument("--steps", type=int, default=100_000)
  p.add_argument("--last_episodes", type=int, default=100)


def main(argv=None) -> None:
  parser = cli.parser(__doc__)
  parser.add_argument("command", choices=("run", "report"))
  _flags(parser)
  args = parser.parse_args(argv)
  {"run": run, "report": report}[args.command](args)


if __name__ == "__main__":
  main()
