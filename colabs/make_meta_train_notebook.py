"""Writes ``colabs/meta_train.ipynb`` (run: ``python colabs/make_meta_train_notebook.py``).

The notebook is generated so that its cells stay reviewable as Python; edit
this script, not the ``.ipynb``, and re-run it. Its first code cell is tagged
``parameters`` (papermill style): tests and tools replace it to run the
notebook with other settings.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import notebook_cells

NOTEBOOK = Path(__file__).resolve().parent / "meta_train.ipynb"

INTRO = """\
# Meta-training / fine-tuning update rules

This notebook fine-tunes the discovered **Disco103** update rule (or
discovers one from scratch) on a jittable version of **Catch** (or a mixed
population of environments) with a small population of agents, plots the meta-training curves, exports the
meta-parameters, and evaluates the exported rule by training fresh agents
with it.

One *meta-step* is one compiled program: every agent takes `inner_steps`
learner steps with the current rule on its own rollouts, the updated agent is
scored on a validation rollout (a policy-gradient loss with a separate value
function's advantages), and the meta-gradient of that score through the inner
updates, averaged over the agents (vmapped, and sharded over the devices),
updates the rule's meta-parameters. The defaults below are the published
meta-training notebook's (2 agents, Catch 5x5, 32 environments per agent,
rollouts of 16 steps, 2 inner steps, Adam(5e-4)), except for the number of
meta-steps.

The same run is available from the command line, with checkpoints and resume:
`python -m disco.launch.meta_train --config.init_meta_params=disco103`
(see `configs/meta_train.py`)."""

PARAMETERS = """\
# Settings (this cell is tagged `parameters`: tools may replace it).
init_meta_params = 'disco103'  # 'disco103' (fine-tune), 'random' or a .npz
num_meta_steps = 200
# Groups of agents: an environment, its settings, the number of agents (a
# multiple of the number of devices) and optionally a weight. Groups may mix
# environments, observation shapes and action counts, e.g. add
# dict(env='delayed_chain', num_agents=2) or
# dict(env='gymnax/CartPole-v1', num_agents=2, weight=0.5).
# Random grid-world levels with a curriculum: a group
# dict(env='lpg/random', env_settings=dict(mode='small'), num_agents=2),
# then config.level_sampler.kind = 'uniform', 'plr' or 'groove' and
# config.lifetime_meta_steps > 0 in the next cell (README: "Levels and
# curricula").
population = (
    dict(env='catch', env_settings=dict(rows=5, columns=5), num_agents=2),
)
# 'published' (the published meta-trainer's agents) or 'valid'; use 'valid'
# with the delayed chain, whose only decisive move is an episode's first.
agent_loss_mask = 'published'
batch_size = 32  # environments per agent
rollout_len = 16
inner_steps = 2
# A replay per agent (0: none): each inner update learns from
# replay_batch_size trajectories of its last replay_capacity, as Disco103's
# agents learn best; e.g. 256 and 32 to fine-tune Disco103 that way.
replay_capacity = 0
replay_batch_size = 0
agent_network = dict(dense=(512, 512), model_lstm_size=256,
                     model_head_hiddens=(256,))
agent_learning_rate = 5e-4
value_fn_dense = (256, 256)
meta_learning_rate = 5e-4
seed = 4
output_dir = 'runs/meta-notebook'
checkpoint_every = 50
# Evaluation of the exported rule (disco.training.loop.EvalLoop).
eval_env, eval_env_settings = 'catch', dict(rows=5, columns=5)
eval_env_steps = 20_000  # per seed
eval_num_seeds = 1
eval_num_envs = 2
eval_rollout_len = 29
eval_batch_size = 64
eval_replay_capacity = 1024
eval_min_replay_size = 64
eval_iterations_per_call = 50
eval_last_episodes = 500
eval_network = {}  # overrides of the evaluation agent's network ({}: published)
compare_with_initial_rule = True  # also evaluate the rule we started from
# Meta-training with evolution strategies (the last section; 0: skip it).
es_generations = 20
es_population_size = 8  # members: antithetic pairs
es_sigma = 0.01
es_lifetime_iterations = 64  # each member's agents train this long
es_meta_learning_rate = 1e-2
# LPO: a learned drift on PPO (configs/meta_train_lpo.py; 0: skip it).
lpo_generations = 2
lpo_population = None  # None: the config's (CartPole-v1, Breakout-MinAtar)
lpo_rollout_len = 128
lpo_population_size = 8
lpo_lifetime_iterations = 32"""

IMPORTS = """\
import jax
from matplotlib import pyplot as plt
from tqdm import tqdm

from disco import agent as agent_lib
from disco import checks
from disco import evaluation
from disco import meta
from disco import weights
from disco.distillation import drift_fit
from disco.environments import registry
from disco.meta import checkpoints
from disco.meta import history as history_lib
from disco.training import analysis
from disco.training import loop as loop_lib
from disco.update_rules import resolve

print('JAX devices:', jax.devices())"""

BUILD_MD = """\
## The population

`meta.build` checks a config (the defaults of `configs/meta_train.py`
with the settings above) and builds the agent groups (by default one: Catch
5x5 with 2 agents), the population (the compiled meta-step: a
`BackpropPopulation` for the default estimator) and the initial
meta-parameters: the published Disco103 weights (checked against the
rule's structure), a random initialisation, or a file.

In a mixed population every group gets its own agent network and value
function for its observation shape and action count; the meta-gradient is
the mean over groups of each group's mean over its agents, weighted by the
groups' `weight` (default: their number of agents)."""

BUILD = """\
config = meta.default_config()
config.update(dict(
    population=population,
    batch_size=batch_size, rollout_len=rollout_len, inner_steps=inner_steps,
    replay_capacity=replay_capacity, replay_batch_size=replay_batch_size,
    meta_learning_rate=meta_learning_rate, init_meta_params=init_meta_params,
    seed=seed, num_meta_steps=num_meta_steps, output_dir=output_dir,
    resume=True))  # the folder may hold an earlier run of this notebook
config.agent.network.update(agent_network)
config.agent.learning_rate = agent_learning_rate
config.agent.loss_mask = agent_loss_mask
config.value_fn.dense = value_fn_dense

plan = meta.build(config)
out = plan.output_dir
num_meta_params = sum(x.size for x in jax.tree.leaves(jax.eval_shape(
    plan.rule.init_meta_params, jax.random.PRNGKey(0))))
print(f'{len(plan.population.devices)} device(s); groups: ' + ', '.join(
    f'{g.num_agents} x {g.name} ({g.env.batch_size} envs each)'
    for g in plan.groups))
print(f'{num_meta_params:,} meta-parameters, initialised from '
      f'{init_meta_params!r}; writing to {out}')"""

TRAIN_MD = """\
## Meta-training

`population.step(state)` runs one meta-step (the first call compiles, which
can take a minute or more) and returns the new state and the logs;
`history_lib.metrics_row` turns the logs into a row (rewards, fractions of
positive/negative rewards per actor step, meta loss, ...). The state holds
everything (meta-parameters, meta-optimiser, every agent's parameters,
environments and RNG keys), so checkpoints restore a run bit for bit. Running
this cell again continues from where it stopped (also after an interrupt)."""

TRAIN = """\
ckpts = checkpoints.CheckpointManager(out / 'checkpoints', keep=2)
if 'state' not in globals():
  template = meta.abstract_state(plan.population, plan.rule)
  restored = (checkpoints.restore_latest(ckpts.directory, template)
              if ckpts.latest_step() is not None else None)
  if restored is None:
    state = meta.initial_state(plan)
    history = history_lib.MetricsHistory()
  else:
    print(f'Continuing from {restored.path}')
    state, history = restored.state, history_lib.MetricsHistory(
        restored.history)

start = int(state.step)
with tqdm(total=num_meta_steps, initial=start, unit='meta-step') as bar:
  for k in range(start + 1, num_meta_steps + 1):
    state, logs = plan.population.step(state)
    row = history_lib.metrics_row(k, logs, plan.groups, rollout_len)
    history.append(row)
    bar.update(1)
    bar.set_postfix(meta_loss=f"{row['meta_loss']:.3f}",
                    reward=f"{row['rewards']:.3f}")
    if k % checkpoint_every == 0 or k == num_meta_steps:
      ckpts.save(state, history=history.rows)
history.write_csv(out / 'metrics.csv')
print(f'{len(history)} meta-steps; checkpoints: {ckpts.all_steps()}')"""

PLOT_MD = """\
## Meta-training curves

The agents' mean reward per actor step (Catch gives +1 for a caught ball and
-1 for a missed one at the end of each episode), the fractions of actor steps
with a positive and a negative reward, and the meta loss."""

PLOT = """\
history.plot(out / 'rewards.png', out / 'meta_loss.png')
fig_rewards, fig_loss = history.plot()
plt.show()
rewards = history.column('rewards')
window = max(1, min(20, len(rewards) // 2))
print(f'Reward per actor step: {rewards[:window].mean():+.3f} over the first '
      f'{window} meta-steps -> {rewards[-window:].mean():+.3f} over the last '
      f'{window}.')"""

EXPORT_MD = """\
## Export

`export_meta_params` saves the meta-parameters as an `.npz` whose metadata
names the rule, so the evaluation launcher takes the file directly:
`disco-eval --config.rule=<output_dir>/meta_params.npz`. Loading it back the
way the launcher does checks it against the rule's structure."""

EXPORT = """\
path = meta.export_meta_params(
    out / 'meta_params.npz', state.meta_params, plan.settings,
    meta_step=int(state.step), init_meta_params=init_meta_params)
discovered = resolve.resolve_rule(str(path))
eval_settings, discovered_params = discovered.settings, discovered.meta_params
print(f'Exported {path}: metadata {weights.load_metadata(path)}')
print(f'Evaluate it with: disco-eval --config.rule={path}')"""

EVAL_MD = """\
## Evaluating the exported rule

Fresh agents on `eval_env` (Catch 5x5 by default) trained by the exported
rule with
`disco.training.loop.EvalLoop` (the evaluation notebook's settings: the
published Disco103 agent network and learning rate, a replay, learner
batches of 64), and, for comparison, by the rule we started from (same
program, other meta-parameters)."""

EVAL = """\
env = registry.make_env(eval_env, eval_num_envs, **eval_env_settings)
eval_settings = eval_settings.replace(
    network=dict(eval_settings.network, **eval_network))
agent = agent_lib.make_agent(eval_settings, env.num_actions,
                             rule=discovered.rule)
loop = loop_lib.EvalLoop(agent, env, loop_lib.LoopConfig(
    num_envs=eval_num_envs, rollout_len=eval_rollout_len,
    batch_size=eval_batch_size, replay_capacity=eval_replay_capacity,
    min_replay_size=eval_min_replay_size))
per_call, num_calls = evaluation.plan_iterations(
    eval_env_steps, loop.config.env_steps_per_iteration,
    eval_iterations_per_call)


def evaluate_rule(meta_params, label):
  states = loop.init_seeds(list(range(eval_num_seeds)))
  chunks = []
  for _ in tqdm(range(num_calls), desc=label):
    states, metrics = loop.run(states, meta_params, per_call)
    chunks.append(metrics)
  return analysis.concat_metrics(chunks)


results = {f'discovered (meta-step {int(state.step)})':
               evaluate_rule(discovered_params, 'discovered')}
if compare_with_initial_rule:
  initial = meta.load_initial_meta_params(
      init_meta_params, plan.rule, config.init_seed)
  results[f'initial ({init_meta_params})'] = evaluate_rule(initial,
                                                          'initial')

analysis.plot_learning_curves(
    results, min_episodes=min(100, eval_last_episodes),
    title=f'{eval_env} {eval_env_settings}')
plt.show()
for label, metrics in results.items():
  s = analysis.summarize(metrics, eval_last_episodes)
  score = s['final_return_mean']
  score = 'n/a' if score is None else f'{score:.3f}'
  print(f"{label}: mean return over the last {eval_last_episodes} episodes "
        f"{score}; {s['env_steps']} env steps, "
        f"{s['learner_steps']} learner steps per seed")"""


ES_MD = """\
## Meta-training with evolution strategies

The same population meta-trained by OpenAI-ES instead of backpropagation
(`--config.estimator=es` on the command line): every generation perturbs
the meta-parameters in `es_population_size / 2` antithetic pairs, each
member trains fresh agents for a whole lifetime of `es_lifetime_iterations`
iterations of the compiled evaluation loop (both members of a pair on the
same environments and seeds), and its fitness is the normalised return of
its agents' last episodes. The centred ranks of the fitnesses give the
meta-gradient, which the same meta-optimiser applies. ES optimises the
return at the end of a lifetime, which backpropagation through a few inner
steps cannot see; its estimate is noisier, so it needs large populations
(see the README's "Estimators")."""

ES = """\
es_config = config.copy_and_resolve_references()
es_config.update(dict(
    estimator='es', num_meta_steps=max(es_generations, 1),
    meta_learning_rate=es_meta_learning_rate, output_dir=f'{out}-es',
    checkpoint_every=0))
es_config.es.update(dict(
    population_size=es_population_size, sigma=es_sigma,
    lifetime_iterations=es_lifetime_iterations,
    final_iterations=min(8, es_lifetime_iterations)))
if es_generations:
  es_summary = meta.train(es_config, progress=False)
  es_history = history_lib.MetricsHistory.read_csv(
      f'{out}-es/metrics.csv')
  fitness = es_history.column('fitness')
  plt.figure(figsize=(5, 3))
  plt.plot(es_history.steps, fitness)
  plt.xlabel('generation')
  plt.ylabel('mean member fitness')
  plt.show()
  print(f'ES: {len(es_history)} generations of {es_population_size} members;'
        f' mean fitness {fitness[0]:+.3f} -> {fitness[-1]:+.3f}; exported '
        f"{es_summary['meta_params_file']}")"""


LPO_MD = """\
## Discovery from PPO: a learned drift (LPO)

Mirror learning writes a policy update as maximising `r A - f(r, A)`, with
`r` the probability ratio against the acting policy, `A` the advantage and
`f` a *drift* that is non-negative and flat at `r = 1`; PPO's clipping is one
such drift. LPO (Lu et al. 2022) meta-learns `f`: a small network over
features of `r` and `A` whose form keeps those conditions for any
parameters, trained by ES on top of PPO's agent and loop, starting from
PPO's drift (`configs/meta_train_lpo.py`; on the command line:
`disco-meta-train --config=configs/meta_train_lpo.py`). Each member's agents
train a whole PPO lifetime; the figure shows the drift it found beside PPO's
and DPO's closed form."""

LPO = """\
lpo_config = checks.load_config('meta_train_lpo')
lpo_config.update(dict(
    num_meta_steps=max(lpo_generations, 1), output_dir=f'{out}-lpo',
    checkpoint_every=0, rollout_len=lpo_rollout_len))
if lpo_population is not None:
  lpo_config.population = lpo_population
lpo_config.es.update(dict(
    population_size=lpo_population_size,
    lifetime_iterations=lpo_lifetime_iterations,
    final_iterations=min(10, lpo_lifetime_iterations)))
if lpo_generations:
  lpo_summary = meta.train(lpo_config, progress=False)
  lpo = resolve.resolve_rule(lpo_summary['meta_params_file'])
  drifts = drift_fit.standard_drifts()
  drifts['LPO (learned)'] = (
      lambda x, a: lpo.rule.drift_from_params(lpo.meta_params, x, a))
  drift_fit.plot_drifts(drifts, f'{out}-lpo/drifts.png')
  plt.imshow(plt.imread(f'{out}-lpo/drifts.png'))
  plt.axis('off')
  plt.show()
  print(f'LPO: {lpo_generations} generations of {lpo_population_size} '
        f"members; exported {lpo_summary['meta_params_file']}")"""


def build() -> nbformat.NotebookNode:
  return notebook_cells.notebook(
      INTRO,
      PARAMETERS,
      [
          ("", IMPORTS),
          (BUILD_MD, BUILD),
          (TRAIN_MD, TRAIN),
          (PLOT_MD, PLOT),
          (EXPORT_MD, EXPORT),
          (EVAL_MD, EVAL),
          (ES_MD, ES),
          (LPO_MD, LPO),
      ],
  )


def main() -> None:
  notebook_cells.write(build(), NOTEBOOK)


if __name__ == "__main__":
  main()
