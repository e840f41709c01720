r"""Meta-steps to a threshold for each meta-gradient estimator (issue 26).

  python benchmarks/estimator_threshold.py run --root DIR [--estimators backprop,pes,es]
  python benchmarks/estimator_threshold.py report DIR --out OUT

``run`` meta-trains from random meta-parameters on the published settings
(``configs/meta_train.py``: Catch 5x5, 2 agents x 32 environments, rollouts
of 16, 2 inner steps, Adam(5e-4)), one run per estimator and seed in
``DIR/<estimator>-s<seed>``, validated on Catch 8x8 (2 seeds x 40k
environment steps of ``disco-eval``'s loop) every ``--validate_every``
meta-steps. ``pes`` uses 2 particles with lifetimes of ``--pes_lifetime``
meta-steps; ``es`` the config's 8 members with lifetimes of 64 iterations,
for ``--es_generations`` generations. Runs resume (``--config.resume``), and
finished ones are skipped.

``report`` writes ``table.md`` and ``rewards.csv`` (the training reward per
step of every run and meta-step): per run, the first meta-step at which the
20-step moving average of the training reward per actor step reaches
``--threshold`` (+0.2; Catch 5x5's best is +0.25), the environment steps and
seconds to it (meta-steps x the run's own environment steps and seconds per
meta-step), and the Catch 8x8 validation return at the end. ES's agents
live inside one generation, so its reward per step is its members' mean
final return on Catch 5x5 (fresh agents at the end of their lifetimes) over
the 4 steps of a Catch 5x5 episode; the issue's own target for ES is the
Catch 8x8 validation return (0.9).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
import sys

import numpy as np

if not __package__:  # run as a file: import the other scripts as a package
  sys.path[0] = str(Path(__file__).resolve().parents[1])

from benchmarks import cli
from benchmarks import meta_runs
from disco.meta import validation_record

WINDOW = 20
VALIDATION = (
    "--config.validation.envs=({'env': 'catch'},)",
    "--config.validation.total_env_steps=40000",
    "--config.validation.num_seeds=2",
)
# Environment steps of one meta-step on the published settings: backprop's
# 2 agents' inner rollouts and validation rollouts, PES's 2 particles'
# inner rollouts (``benchmarks/estimators.py``), ES's 8 members' 2 agents'
# lifetimes (64 iterations of 32 x 17 steps; ``env_steps_per_generation``).
ENV_STEPS = {"backprop": 4096, "pes": 2048, "es": 557_056}
# A Catch 5x5 episode: 4 steps, one reward of +-1 at its end.
CATCH_EPISODE_STEPS = 4


def reward_per_step(history, estimator: str) -> np.ndarray:
  """``[meta-steps]`` training reward per actor step (ES: its members'
  final return per episode over an episode's steps)."""
  if estimator == "es":
    return history.column("catch-5x5/final_return") / CATCH_EPISODE_STEPS
  return history.column("rewards")


def flags(estimator: str, seed: int, args) -> list[str]:
  steps = args.es_generations if estimator == "es" else args.steps
  every = args.es_validate_every if estimator == "es" else args.validate_every
  out = [
      f"--config.estimator={estimator}",
      f"--config.seed={4 + seed}",
      f"--config.init_seed={1 + seed}",
      f"--config.num_meta_steps={steps}",
      f"--config.checkpoint_every={every}",
      f"--config.validation.every={every}",
      *VALIDATION,
      "--config.resume=True",
  ]
  if estimator == "pes":
    out.append(f"--config.lifetime_meta_steps={args.pes_lifetime}")
  return out


def run(args) -> None:
  meta_runs.run_each(
      Path(args.root),
      meta_runs.seed_major(args.estimators.split(","), args.seeds),
      lambda _, out: (out / "summary.json").is_file(),
      lambda name, seed, out: meta_runs.meta_train(
          flags(name, seed, args), out
      ),
  )


def first_crossing(
    steps: np.ndarray, rewards: np.ndarray, threshold: float
) -> int | None:
  """The first meta-step where the trailing ``WINDOW``-step mean of the
  reward reaches ``threshold`` (None if it never does)."""
  if len(rewards) < WINDOW:
    return None
  mean = np.convolve(rewards, np.ones(WINDOW) / WINDOW, "valid")
  hits = np.nonzero(mean >= threshold)[0]
  return int(steps[hits[0] + WINDOW - 1]) if len(hits) else None


def report(args) -> None:
  root, out = Path(args.root), Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  table = [
      f"| run | meta-steps run | first meta-step with the {WINDOW}-step "
      f"mean reward >= {args.threshold:+g} | env steps to it | seconds to "
      "it | reward, last 50 | first meta-step with Catch 8x8 return >= "
      f"{args.validation_target:g} | Catch 8x8 return at the end (2 seeds) |",
      "|---|---|---|---|---|---|---|---|",
  ]
  curves = []
  for path in sorted(p for p in root.glob("*-s*") if p.is_dir()):
    estimator = path.name.rsplit("-s", 1)[0]
    history = meta_runs.read_history(path)
    steps, rewards = history.steps, reward_per_step(history, estimator)
    summary_file = path / "summary.json"
    summary = (
        json.loads(summary_file.read_text()) if summary_file.is_file() else {}
    )
    seconds = summary.get("seconds_per_meta_step", np.nan)
    measured = not np.isnan(rewards).all()
    hit = first_crossing(steps, rewards, args.threshold) if measured else None
    env_steps = ENV_STEPS.get(estimator)
    if hit is not None and env_steps:
      to_hit = f"{hit} | {hit * env_steps:,} | " + (
          f"{hit * seconds:.0f}" if np.isfinite(seconds) else "-"
      )
    else:
      to_hit = "not reached | - | -"
    rows = validation_record.read_rows(path / validation_record.CSV_FILE)
    last = max((r["meta_step"] for r in rows), default=None)
    final = [f"{r['return']:.2f}" for r in rows if r["meta_step"] == last]
    valid_hit = next(
        (
            s
            for s, x in meta_runs.validation_means(path).items()
            if x >= args.validation_target
        ),
        None,
    )
    cells = [
        path.name,
        str(int(steps[-1]) if len(steps) else 0),
        to_hit,
        f"{np.nanmean(rewards[-50:]):+.3f}" if measured else "n/a",
        str(valid_hit) if valid_hit is not None else "not reached",
        f"{', '.join(final)} (meta-step {last})" if final else "-",
    ]
    table.append("| " + " | ".join(cells) + " |")
    curves += [
        dict(run=path.name, meta_step=int(s), rewards=float(r))
        for s, r in zip(steps, rewards, strict=True)
    ]
  cli.write_csv(out / "rewards.csv", curves, ("run", "meta_step", "rewards"))
  cli.write_table(out, "\n".join(table) + "\n")


def _run_flags(p: argparse.ArgumentParser) -> None:
  p.add_argument("--root", required=True)
  p.add_argument("--estimators", default="backprop,pes,es")
  p.add_argument("--seeds", type=int, default=3)
  p.add_argument("--steps", type=int, default=1000)
  p.add_argument("--validate_every", type=int, default=250)
  p.add_argument("--pes_lifetime", type=int, default=100)
  p.add_argument("--es_generations", type=int, default=300)
  p.add_argument("--es_validate_every", type=int, default=25)


def _report_flags(p: argparse.ArgumentParser) -> None:
  cli.add_report_flags(p)
  p.add_argument("--threshold", type=float, default=0.2)
  p.add_argument("--validation_target", type=float, default=0.9)


def main(argv=None) -> None:
  cli.run_commands(
      __doc__,
      dict(
          run=cli.Command(run, _run_flags),
          report=cli.Command(report, _report_flags),
      ),
      argv=argv,
  )


if __name__ == "__main__":
  main()
