"""Writes ``colabs/eval.ipynb`` (run: ``python colabs/make_eval_notebook.py``).

The notebook is generated so that its cells stay reviewable as Python; edit
this script, not the ``.ipynb``, and re-run it. Its first code cell is tagged
``parameters`` (papermill style): tests and tools replace it to run the
notebook with other settings.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import notebook_cells

NOTEBOOK = Path(__file__).resolve().parent / "eval.ipynb"

INTRO = """\
# Evaluating discovered update rules

This notebook trains agents on a jittable version of **Catch** with the
discovered **Disco103** update rule, and compares them with an
**actor-critic** baseline.

Training runs fully on the accelerator: `disco.training.loop.EvalLoop`
compiles a whole block of iterations (acting, replay, learning) into one
program, and trains several seeds at once with `vmap`. The settings below are
the published evaluation notebook's: 2 environments x 29 steps per iteration,
a replay of 1024 trajectories, learner batches of 64 and a learning rate of
1e-2 for Disco103.

The same evaluation is available from the command line:
`disco-eval --config.rule=disco103` (see `configs/evaluate.py`), and in one
call from Python: `disco.evaluation.evaluate(rule='disco103')`."""

PARAMETERS = """\
# Settings (this cell is tagged `parameters`: tools may replace it).
total_env_steps = 40_000  # per seed
num_seeds = 1  # seeds seed..seed+num_seeds-1 train together
seed = 0
catch_rows, catch_columns = 8, 8
num_envs = 2
rollout_len = 29
batch_size = 64
replay_capacity = 1024
min_replay_size = 64
iterations_per_call = 50  # iterations per compiled call
last_episodes = 500  # final score: mean return of the last episodes
disco_learning_rate = 1e-2
compare_actor_critic = True
actor_critic_learning_rate = None  # None: the published 5e-4"""

IMPORTS = """\
import jax
from matplotlib import pyplot as plt

from disco import evaluation
from disco.training import analysis
from disco.update_rules import registry

print('JAX devices:', jax.devices())"""

TRAIN_MD = """\
## Training

`train` uses the library under the `disco-eval` launcher
(`disco.evaluation`): `evaluation.make_config` sets the settings as the
launcher's `--config.KEY=VALUE` flags would, `evaluation.build` checks them
(every bad one reported together) and builds the rule, environment, agent and
loop; `evaluation.run` runs the loop in calls of equal length (so it is
compiled once) and returns the per-iteration metrics `{name: [num_seeds,
num_iterations]}` (nothing is written to disk; `evaluation.evaluate` would
also write the run folder).

The rule `disco103` is the Disco rule with the published weights: they are
looked up (`$DISCO_WEIGHTS`, the user cache, a `shared/weights` folder beside
the checkout), downloaded into the cache if needed, and their sha256 is
checked."""

TRAIN = """\
def train(rule, learning_rate=None):
  config = evaluation.make_config(
      rule=rule, env_settings=dict(rows=catch_rows, columns=catch_columns),
      total_env_steps=total_env_steps, num_seeds=num_seeds, seed=seed,
      num_envs=num_envs, rollout_len=rollout_len, batch_size=batch_size,
      replay_capacity=replay_capacity, min_replay_size=min_replay_size,
      iterations_per_call=iterations_per_call, learning_rate=learning_rate)
  plan = evaluation.build(config)
  print(f'{rule}: learning rate {plan.rule.settings.learning_rate}, '
        f'{plan.iterations} iterations of {num_envs} x {rollout_len} steps')
  return evaluation.run(plan, log=lambda _: None).metrics


results = {}"""

DISCO = """\
results['Disco103'] = train('disco103', disco_learning_rate)"""

AC_MD = """\
## Actor-critic baseline

The published actor-critic settings: a categorical value with a nonlinear
value transform, V-trace advantages and a (64, 32, 32) torso. It has no
meta-parameters (`{}`)."""

AC = """\
if compare_actor_critic:
  print(registry.default_settings('actor_critic'))
  results['Actor-critic'] = train('actor_critic', actor_critic_learning_rate)"""

PLOT_MD = """\
## Results

Mean return over windows of at least 100 episodes against environment steps
(with several seeds: the mean over seeds and a 95% Student-t band)."""

PLOT = """\
fig = analysis.plot_learning_curves(results)
plt.show()"""

SUMMARY = """\
for label, metrics in results.items():
  s = analysis.summarize(metrics, last_episodes)
  ci = s['final_return_ci']
  ci_text = (f'95% bootstrap CI [{ci[0]:.3f}, {ci[1]:.3f}]' if ci else
             'one seed: no CI')
  print(f"{label}: mean return over the last {last_episodes} episodes "
        f"{s['final_return_mean']:.3f} ({ci_text}); "
        f"{s['env_steps']} env steps, {s['learner_steps']} learner steps "
        "per seed")"""


def build() -> nbformat.NotebookNode:
  return notebook_cells.notebook(
      INTRO,
      PARAMETERS,
      [
          ("", IMPORTS),
          (TRAIN_MD, TRAIN, DISCO),
          (AC_MD, AC),
          (PLOT_MD, PLOT, SUMMARY),
      ],
  )


def main() -> None:
  notebook_cells.write(build(), NOTEBOOK)


if __name__ == "__main__":
  main()
