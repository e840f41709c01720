r"""Uniform vs PLR vs GROOVE level sampling for meta-training LPG (issue 28).

Meta-trains the LPG rule (``configs/meta_train_lpg.py``) on random LPG grid
worlds (``lpg/random``, mode ``small``), one run per level sampler and
seed, each validated on held-out environments as it trains: the
hand-designed grid world ``lpg/dense`` and Breakout-MinAtar. Then reports
the validation scores per sampler.

  python benchmarks/level_sampler_compare.py run --root /work/runs/levels
  python benchmarks/level_sampler_compare.py report /work/runs/levels \
      --out benchmarks/results/level_sampler_compare

``run`` starts (or continues, with ``resume=True``) every run in turn, in
``<root>/<kind>-s<seed>``; runs that have reached ``--steps`` are skipped,
so the command can be killed and started again. ``report`` writes
``table.md`` (per sampler: the validation IQM score at the start, at the
end and at its best; each held-out environment's score at the end; the
training reward per step and the replay fraction),
``validation.csv`` (every run's validation rows) and ``validation.png``.

The scale fits a 2-core CPU (``--steps`` meta-steps of 4 agents x 32
environments, rollouts of 20, K=5, a GRU of 64): far smaller than GROOVE's.
"""

from __future__ import annotations

import argparse
from pathlib import Path
import sys

import numpy as np

if not __package__:  # run as a file: import the other scripts as a package
  sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks import cli
from benchmarks import meta_runs
from disco.meta import validation_record

KINDS = ("uniform", "plr", "groove")
# Held-out environments. lpg/dense is not in the normalisation table:
# uniform random -0.40 and PPO 22.1 at 100k steps (BENCHMARKS.md, "Off
# Catch").
HELD_OUT = "({'env': 'lpg/dense'}, {'env': 'gymnax/Breakout-MinAtar'})"
REFERENCES = "('lpg/dense:random=-0.40,reference=22.1,source=PPO 100k',)"


def run_flags(kind: str, seed: int, args) -> list[str]:
  return [
      "--config=configs/meta_train_lpg.py",
      "--config.population=({'env': 'lpg/random', 'env_settings': "
      f"{{'mode': 'small'}}, 'num_agents': {args.agents}}},)",
      f"--config.batch_size={args.envs}",
      f"--config.rule_kwargs.net.hidden_size={args.gru}",
      f"--config.lifetime_updates=({args.lifetime[0]},{args.lifetime[1]})",
      f"--config.level_sampler.kind={kind}",
      f"--config.level_sampler.buffer_size={args.buffer}",
      "--config.level_sampler.min_fill=0.1",
      f"--config.num_meta_steps={args.steps}",
      f"--config.seed={100 + seed}",
      f"--config.init_seed={200 + seed}",
      f"--config.checkpoint_every={args.validate_every}",
      f"--config.validation.every={args.validate_every}",
      f"--config.validation.envs={HELD_OUT}",
      f"--config.validation.references={REFERENCES}",
      "--config.validation.num_seeds=2",
      f"--config.validation.total_env_steps={args.validation_steps}",
      "--config.resume=True",
  ]


def run(args) -> None:
  meta_runs.run_each(
      Path(args.root),
      meta_runs.seed_major(args.kinds.split(","), args.seeds),
      lambda _, out: meta_runs.finished_steps(out) >= args.steps,
      lambda kind, seed, out: meta_runs.meta_train(
          run_flags(kind, seed, args), out
      ),
  )


def read_validation(root: Path) -> list[dict]:
  rows = []
  for run_dir in sorted(root.glob("*-s*")):
    kind, seed = run_dir.name.rsplit("-s", 1)
    for r in validation_record.read_rows(run_dir / validation_record.CSV_FILE):
      rows.append(dict(r, kind=kind, run_seed=seed))
  return rows


def training_summary(run_dir: Path) -> tuple[float, float]:
  """The reward per step over the last 100 meta-steps of a run, and its
  sampler's final replay fraction (NaN without one)."""
  history = meta_runs.read_history(run_dir)
  replay = [c for c in history.columns if c.endswith("levels/replay_fraction")]
  fraction = history.column(replay[0])[-1] if replay else np.nan
  return float(np.mean(history.column("rewards")[-100:])), float(fraction)


def report(args) -> None:
  from matplotlib import pyplot as plt

  rows = read_validation(Path(args.root))
  if not rows:
    cli.usage_error(f"no validation.csv under {args.root}: run `run` first")
  out = Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  cli.write_csv(out / "validation.csv", rows)

  # Per run: aggregate (IQM) per validated meta-step; per env: mean score.
  runs: dict[tuple[str, str], dict[int, dict]] = {}
  for r in rows:
    step = runs.setdefault((r["kind"], r["run_seed"]), {}).setdefault(
        r["meta_step"], {"aggregate": r["aggregate"], "envs": {}}
    )
    step["envs"].setdefault(r["env"], []).append(r["normalized_score"])
  envs = sorted({r["env"] for r in rows})
  lines = [
      "| sampler | seeds | meta-steps | aggregate at the start | aggregate "
      "at the end | best | "
      + " | ".join(f"{e} at the end" for e in envs)
      + " |",
      "|---" * (5 + len(envs)) + "|",
  ]
  training = [
      "| sampler | training reward per step, last 100 meta-steps | "
      "replay fraction at the end |",
      "|---|---|---|",
  ]
  fig, ax = plt.subplots(figsize=(6, 4))
  colours = dict(zip(KINDS, ("C0", "C1", "C2"), strict=True))
  for kind in KINDS:
    mine = [v for (k, _), v in sorted(runs.items()) if k == kind]
    if not mine:
      continue
    first = [v[min(v)]["aggregate"] for v in mine]
    last = [v[max(v)]["aggregate"] for v in mine]
    best = [max(s["aggregate"] for s in v.values()) for v in mine]
    per_env = [
        np.mean([np.mean(v[max(v)]["envs"].get(e, [np.nan])) for v in mine])
        for e in envs
    ]
    steps = sorted({max(v) for v in mine})
    lines.append(
        f"| {kind} | {len(mine)} | {'/'.join(map(str, steps))} | "
        f"{np.mean(first):.3f} | {np.mean(last):.3f} "
        f"(runs: {', '.join(f'{x:.3f}' for x in last)}) | "
        f"{np.mean(best):.3f} | "
        + " | ".join(f"{x:.3f}" for x in per_env)
        + " |"
    )
    summaries = [
        training_summary(Path(args.root) / f"{k}-s{seed}")
        for (k, seed) in sorted(runs)
        if k == kind
    ]
    training.append(
        f"| {kind} | "
        + ", ".join(f"{r:.3f}" for r, _ in summaries)
        + " | "
        + ", ".join(f"{f:.2f}" for _, f in summaries)
        + " |"
    )
    for i, v in enumerate(mine):
      xs = sorted(v)
      ax.plot(
          xs,
          [v[x]["aggregate"] for x in xs],
          color=colours[kind],
          alpha=0.8,
          label=kind if i == 0 else None,
      )
  ax.set_xlabel("meta-step")
  ax.set_ylabel("validation IQM score (0: random, 1: reference)")
  ax.set_title("LPG on lpg/random levels: held-out validation")
  ax.legend()
  fig.tight_layout()
  fig.savefig(out / "validation.png", dpi=100)
  cli.write_table(out, "\n".join(lines) + "\n\n" + "\n".join(training) + "\n")


def _run_flags(p: argparse.ArgumentParser) -> None:
  p.add_argument("--root", required=True)
  p.add_argument("--seeds", type=int, default=3)
  p.add_argument("--kinds", default=",".join(KINDS))
  p.add_argument("--steps", type=int, default=1000)
  p.add_argument("--agents", type=int, default=4)
  p.add_argument("--envs", type=int, default=32)
  p.add_argument("--gru", type=int, default=64)
  p.add_argument("--lifetime", type=int, nargs=2, default=(10, 50))
  p.add_argument("--buffer", type=int, default=200)
  p.add_argument("--validate_every", type=int, default=250)
  p.add_argument("--validation_steps", type=int, default=20_000)


def main(argv=None) -> None:
  cli.run_commands(
      __doc__,
      dict(
          run=cli.Command(run, _run_flags),
          report=cli.Command(report, cli.add_report_flags),
      ),
      argv=argv,
  )


if __name__ == "__main__":
  main()
