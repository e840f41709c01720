"""Writes ``colabs/compare.ipynb`` (run: ``python colabs/make_compare_notebook.py``).

The notebook is generated so that its cells stay reviewable as Python; edit
this script, not the ``.ipynb``, and re-run it. Its first code cell is tagged
``parameters`` (papermill style): tests and tools replace it to run the
notebook with other settings.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import notebook_cells

NOTEBOOK = Path(__file__).resolve().parent / "compare.ipynb"

INTRO = """\
# Comparing update rules

This notebook trains every rule below on every environment with several
seeds, then reports the comparison with the statistics a paper needs:
normalised scores aggregated over environments (IQM, mean, median, optimality
gap with stratified-bootstrap intervals), performance profiles, sample
efficiency curves, the probability of improvement, and per-environment
significance tests with the number of seeds a difference would need.

Each run uses the `disco-eval` training loop (all seeds of a run vmapped in
one compiled program) and is written to `output_dir/runs/<rule>/<env>`. A run
that finished is never repeated: re-running the notebook after an interruption
continues where it stopped, and adding a rule or an environment only trains
the new runs.

The same comparison is available from the command line:
`disco-compare --config.rules="('disco103', 'actor_critic', 'ppo')"`
(see `configs/compare.py`), and in one call from Python:
`disco.comparison.compare(rules=('disco103', 'actor_critic', 'ppo'))`."""

PARAMETERS = """\
# Settings (this cell is tagged `parameters`: tools may replace it).
rules = ('disco103', 'actor_critic', 'ppo')
# Registered environments, optionally with settings ('catch:rows=5,columns=5').
envs = ('catch', 'delayed_chain', 'gymnax/CartPole-v1')
num_seeds = 5  # per run
seed = 0
total_env_steps = 40_000  # per seed and run
# The disco-eval loop of every run (the published evaluation notebook's).
num_envs = 2
rollout_len = 29
batch_size = 64
replay_capacity = 1024
min_replay_size = 64
iterations_per_call = 50
last_episodes = 500  # final score: mean return of the last episodes
# Per-rule changes of the loop: PPO learns on-policy from longer rollouts of
# more environments, in 4 epochs of 4 minibatches per rollout.
rule_overrides = (
    'ppo:num_envs=8,rollout_len=32,replay_capacity=0,min_replay_size=0,'
    'batch_size=8,update_epochs=4,num_minibatches=4',
)
test = 'welch'  # welch | mann_whitney | bootstrap | permutation
bootstrap_reps = 2000
output_dir = 'runs/compare-notebook'"""

IMPORTS = """\
from IPython import display
import jax

from disco import comparison

print('JAX devices:', jax.devices())"""

BUILD_MD = """\
## The plan

`comparison.make_config` sets the settings as the `disco-compare` launcher's
`--config.KEY=VALUE` flags would; `comparison.build` checks every rule,
environment and override before anything trains (a typo fails here, not after
an hour; every bad setting is reported together), and lists the runs."""

BUILD = """\
config = comparison.make_config(
    rules=rules, envs=envs, num_seeds=num_seeds, seed=seed,
    total_env_steps=total_env_steps, num_envs=num_envs,
    rollout_len=rollout_len, batch_size=batch_size,
    replay_capacity=replay_capacity, min_replay_size=min_replay_size,
    iterations_per_call=iterations_per_call, last_episodes=last_episodes,
    rule_overrides=rule_overrides, test=test, bootstrap_reps=bootstrap_reps,
    output_dir=output_dir)
plan = comparison.build(config)
for cell in plan.cells:
  status = 'finished' if cell.status(plan.settings)[0] else 'to run'
  print(f'{cell.rule} on {cell.env} {cell.env_settings}: {status}')"""

RUN_MD = """\
## Training

`comparison.run` trains the unfinished runs one after the other (each compiled
once) and returns every run's folder."""

RUN = """\
run_dirs = comparison.run(plan)"""

REPORT_MD = """\
## Statistics

`comparison.write` reads the runs back and writes `report.md`, `results.csv`,
`statistics.json` and the figures into `output_dir`. Scores are normalised
per environment (0: a uniform random policy, 1: the reference in
`disco.environments.reference_scores`)."""

REPORT = """\
stats = comparison.write(plan, run_dirs)
display.display(display.Markdown((plan.output_dir / 'report.md').read_text()))"""

FIGURES_MD = """\
## Figures

Aggregate intervals, performance profiles, sample efficiency, probability of
improvement, and each environment's learning curves."""

FIGURES = """\
for name in stats['figures']:
  print(name)
  display.display(display.Image(filename=str(plan.output_dir / name)))"""


def build() -> nbformat.NotebookNode:
  return notebook_cells.notebook(
      INTRO,
      PARAMETERS,
      [
          ("", IMPORTS),
          (BUILD_MD, BUILD),
          (RUN_MD, RUN),
          (REPORT_MD, REPORT),
          (FIGURES_MD, FIGURES),
      ],
  )


def main() -> None:
  notebook_cells.write(build(), NOTEBOOK)


if __name__ == "__main__":
  main()
