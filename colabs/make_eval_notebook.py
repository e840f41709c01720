"""Writes ``colabs/eval.ipynb`` (run: ``python colabs/make_eval_notebook.py``).

The notebook is generated so that its cells stay reviewable as Python; edit
this script, not the ``.ipynb``, and re-run it. Its first code cell is tagged
``parameters`` (papermill style): tests and tools replace it to run the
notebook with other settings.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbformat import v4

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
`python -m disco.launch.evaluate --config.rule=disco103` (see
`configs/evaluate.py`)."""

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

INSTALL = """\
# Install the package when it is not importable yet (this notebook lives in
# the colabs/ folder of a checkout, so `..` is the repository).
import importlib.util
import os
import sys

if importlib.util.find_spec('disco') is None:
  get_ipython().run_line_magic('pip', 'install -q -e ..')
  sys.path.insert(0, os.path.abspath('..'))  # importable without a restart"""

IMPORTS = """\
import math

import jax
import numpy as np
from matplotlib import pyplot as plt
from tqdm import tqdm

from disco import configs
from disco import weights
from disco.environments import registry
from disco.training import analysis
from disco.training import loop as loop_lib

print('JAX devices:', jax.devices())"""

WEIGHTS_MD = """\
## Disco103

`load_disco103()` looks for the published weights (`$DISCO_WEIGHTS`, the user
cache, a `shared/weights` folder beside the checkout), downloads them into the
cache if needed, and checks their sha256."""

WEIGHTS = """\
disco103_params = weights.load_disco103()
print(f'Loaded {len(jax.tree.leaves(disco103_params))} parameter tensors '
      'for Disco103.')"""

TRAIN_MD = """\
## Training

`train` builds the environment, the agent and the loop, then runs the loop in
calls of equal length (so it is compiled once) and returns the per-iteration
metrics `{name: [num_seeds, num_iterations]}`."""

TRAIN = """\
def train(settings, meta_params, label):
  env = registry.make_env('catch', num_envs, rows=catch_rows,
                          columns=catch_columns)
  agent = configs.make_agent(settings, env.num_actions)
  # The meta-parameters must have the structure the rule expects.
  weights.check_params_match(
      meta_params, jax.eval_shape(agent.rule.init_params,
                                  jax.random.PRNGKey(0)))
  loop = loop_lib.EvalLoop(agent, env, loop_lib.LoopConfig(
      num_envs=num_envs, rollout_len=rollout_len, batch_size=batch_size,
      replay_capacity=replay_capacity, min_replay_size=min_replay_size))
  steps = loop.config.env_steps_per_iteration
  needed = math.ceil(total_env_steps / steps)
  num_calls = math.ceil(needed / iterations_per_call)
  per_call = math.ceil(needed / num_calls)
  states = loop.init_seeds(list(range(seed, seed + num_seeds)))
  chunks = []
  with tqdm(total=num_calls * per_call * steps, desc=label,
            unit='step') as bar:
    for _ in range(num_calls):
      states, metrics = loop.run(states, meta_params, per_call)
      chunks.append(metrics)
      recent = analysis.return_curve(analysis.concat_metrics(chunks))[:, -1]
      bar.update(per_call * steps)
      bar.set_postfix(mean_return=f'{np.nanmean(recent):.2f}')
  return analysis.concat_metrics(chunks)


results = {}"""

DISCO = """\
disco_settings = configs.get_settings('disco')
disco_settings.learning_rate = disco_learning_rate
print(disco_settings)
results['Disco103'] = train(disco_settings, disco103_params, 'Disco103')"""

AC_MD = """\
## Actor-critic baseline

The published actor-critic settings: a categorical value with a nonlinear
value transform, V-trace advantages and a (64, 32, 32) torso. It has no
meta-parameters (`{}`)."""

AC = """\
if compare_actor_critic:
  ac_settings = configs.get_settings('actor_critic')
  if actor_critic_learning_rate is not None:
    ac_settings.learning_rate = actor_critic_learning_rate
  results['Actor-critic'] = train(ac_settings, {}, 'Actor-critic')"""

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
  md, code = v4.new_markdown_cell, v4.new_code_cell
  cells = [
      md(INTRO),
      code(PARAMETERS, metadata={"tags": ["parameters"]}),
      code(INSTALL),
      code(IMPORTS),
      md(WEIGHTS_MD), code(WEIGHTS),
      md(TRAIN_MD), code(TRAIN), code(DISCO),
      md(AC_MD), code(AC),
      md(PLOT_MD), code(PLOT), code(SUMMARY),
  ]
  for i, cell in enumerate(cells):  # stable ids keep diffs small
    cell["id"] = f"cell-{i:02d}"
  nb = v4.new_notebook(cells=cells, metadata={
      "kernelspec": {"display_name": "Python 3", "language": "python",
                     "name": "python3"},
      "language_info": {"name": "python"},
  })
  nbformat.validate(nb)
  return nb


def main() -> None:
  nbformat.write(build(), NOTEBOOK)
  print(f"wrote {NOTEBOOK}", file=sys.stderr)


if __name__ == "__main__":
  main()
