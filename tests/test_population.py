"""The population meta-step: sharding over devices, mixed groups, lifetimes.

The test session has two host devices (``conftest.py`` forces them), so the
same population runs on one device and sharded over two in this process.
The populations use the tiny LPG rule of ``meta_settings``: nothing tested
here depends on the rule, and its meta-step compiles faster than Disco's.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from disco import errors
from disco.meta import keys as keys_lib
from disco.meta import plan as plan_lib
from disco.meta import population as population_lib

from meta_faults import with_faults
from meta_settings import MIXED
from meta_settings import TINY_LPG
from meta_settings import tiny_config


def _capture(lr):
  """SGD whose state is the last meta-gradient it applied."""
  return optax.GradientTransformation(
      lambda p: jax.tree.map(jnp.zeros_like, p),
      lambda g, s, p=None: (jax.tree.map(lambda x: -lr * x, g), g),
  )


def _counts(opt_state) -> list[int]:
  """The update counts ``[N]`` of a row of optimiser states."""
  return [int(x) for x in np.asarray(optax.tree.get(opt_state, "count"))]


def _max_rel(a, b) -> float:
  """max |a - b| relative to max |b| over a tree."""
  a, b = jax.tree.leaves(a), jax.tree.leaves(b)
  scale = max(float(np.abs(np.asarray(y)).max()) for y in b)
  return (
      max(
          float(np.abs(np.asarray(x) - np.asarray(y)).max())
          for x, y in zip(a, b, strict=True)
      )
      / scale
  )


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
  """A mixed population of 4 agents (2 x Catch 5x5, 2 x Catch 6x6) whose
  agents start new lifetimes every 2 meta-steps, on one device and sharded
  over two, for two meta-steps from the same state."""
  assert len(jax.devices()) >= 2, "conftest.py forces two host devices"
  plan = plan_lib.build(
      tiny_config(
          **TINY_LPG,
          output_dir=str(tmp_path_factory.mktemp("pop") / "b"),
          lifetime_meta_steps=2,
          population=MIXED,
      )
  )
  pops = {
      n: population_lib.BackpropPopulation(
          plan.groups, plan.population.config, _capture(1e-2), jax.devices()[:n]
      )
      for n in (1, 2)
  }
  states = {2: pops[2].init(jax.random.PRNGKey(4), plan.meta_params)}
  states[1] = pops[1].place(states[2])
  first = states[1]

  @jax.jit
  def per_agent(meta_params, agents, loop_rng):
    """Every agent's own meta-gradient, with the keys of the first step
    (``key_scheme='published'``: agents numbered over the groups)."""
    _, step_rng = keys_lib.next_step_key(loop_rng)
    grads, first_index = [], 0
    for g, s in zip(pops[1].groups, agents, strict=True):
      keys = jax.vmap(lambda i: keys_lib.published_agent_keys(step_rng, i, 4))(
          first_index + jnp.arange(g.num_agents)
      )
      grads.append(
          jax.vmap(functools.partial(pops[1]._agent_meta_step, g, meta_params))(
              s, keys
          )[0]
      )
      first_index += g.num_agents
    return grads

  grads = per_agent(plan.meta_params, first.agents, first.rng)
  out = dict(
      mean_grad=jax.tree.map(
          lambda a, b: 0.75 * a.mean(0) + 0.25 * b.mean(0), *grads
      ),
      per_agent_grads=grads,
      states=[dict(states)],
      logs=[],
  )
  for _ in range(2):
    logs = {}
    for n, p in pops.items():
      states[n], logs[n] = p.step(states[n])
    out["states"].append(dict(states))
    out["logs"].append(logs)
  return out


def test_two_devices_match_one_device(mixed):
  # The first meta-gradient differs only by the order of the float sums; the
  # second also through the agents' (equally tiny) differences after step 1.
  errors = [
      _max_rel(s[2].meta_opt_state, s[1].meta_opt_state)
      for s in mixed["states"][1:]
  ]
  assert errors[0] < 1e-5 and errors[1] < 1e-4, errors
  last = mixed["states"][-1]
  assert _max_rel(last[2].meta_params, last[1].meta_params) < 1e-6
  logs = mixed["logs"][-1]
  keys = sorted(logs[2])
  np.testing.assert_allclose(
      [float(logs[2][k]) for k in keys],
      [float(logs[1][k]) for k in keys],
      rtol=1e-4,
      atol=1e-5,
  )
  # Agents really are split: one of each group per device.
  for agents in last[2].agents:
    assert len(agents.age.sharding.device_set) == 2


def test_mixed_population_meta_gradient_is_weighted_mean_of_groups(mixed):
  first_grad = mixed["states"][1][1].meta_opt_state
  assert optax.tree.norm(first_grad) > 0
  assert _max_rel(first_grad, mixed["mean_grad"]) < 1e-5
  # ... and not the mean over all agents, or one group's mean.
  all_agents = jax.tree.map(
      lambda *g: jnp.concatenate(g).mean(0), *mixed["per_agent_grads"]
  )
  assert _max_rel(first_grad, all_agents) > 1e-3
  one_group = jax.tree.map(lambda g: g.mean(0), mixed["per_agent_grads"][0])
  assert _max_rel(first_grad, one_group) > 1e-3
  keys = mixed["logs"][0][2]
  for group in ("catch-5x5", "catch-6x6"):
    assert f"{group}/meta_loss" in keys and f"{group}/rewards" in keys


def test_lifetime_reset_at_configured_age(mixed):
  # lifetime_meta_steps=2 with 2 agents per group: ages start staggered at
  # [0, 1]; an agent whose age reaches 2 starts a new lifetime (age 0, fresh
  # learner and value-function optimiser states).
  ages = [
      [[int(x) for x in np.asarray(a.age)] for a in s[2].agents]
      for s in mixed["states"]
  ]
  assert ages == [[[0, 1], [0, 1]], [[1, 0], [1, 0]], [[0, 1], [0, 1]]]
  for field in ("learner", "value"):
    counts = [
        [_counts(getattr(a, field).opt_state) for a in s[2].agents]
        for s in mixed["states"][1:]
    ]
    assert counts == [[[1, 0], [1, 0]], [[0, 1], [0, 1]]], field


def test_agents_must_split_over_devices(tmp_path):
  with pytest.raises(errors.UsageError) as info:
    plan_lib.build(
        tiny_config(
            output_dir=str(tmp_path / "a"),
            population=(
                dict(
                    env="catch",
                    env_settings=dict(rows=5, columns=5),
                    num_agents=3,
                ),
            ),
        )
    )
  assert "split evenly over the 2 device(s)" in str(info.value)
  assert "catch-5x5: 3" in str(info.value)


def test_population_of_different_environments(tmp_path):
  """An LPG grid world, the delayed chain and CartPole (other observation
  shapes and action counts) meta-train together. (Catch with two shapes:
  the ``mixed`` population.)"""
  plan = plan_lib.build(
      tiny_config(
          **TINY_LPG,
          output_dir=str(tmp_path / "h"),
          num_devices=1,
          population=(
              dict(
                  env="lpg/sparse",
                  env_settings=dict(
                      observation="random_features", feature_size=8
                  ),
              ),
              dict(env="delayed_chain"),
              dict(env="gymnax/CartPole-v1"),
          ),
      )
  )
  shapes = {
      g.name: (g.env.observation_spec().shape, g.env.num_actions)
      for g in plan.groups
  }
  assert len({s for s in shapes.values()}) == 3, shapes
  state = plan_lib.initial_state(plan)
  state, logs = plan.population.step(state)
  assert int(state.step) == 1
  assert all(
      np.isfinite(np.asarray(x)).all()
      for x in jax.tree.leaves(state.meta_params)
  )
  assert float(logs["meta_grad_norm"]) > 0
  for name in shapes:
    assert np.isfinite(float(logs[f"{name}/meta_loss"])), name


@pytest.fixture(scope="module")
def poisoned(mixed, tmp_path_factory):
  """The ``mixed`` population (Adam, both devices) with faults: the first
  catch-5x5 agent diverges at meta-step 1, the meta-gradient at 2. The same
  program as ``test_divergence.py``'s runs."""
  config = tiny_config(
      **TINY_LPG,
      output_dir=str(tmp_path_factory.mktemp("pop") / "p"),
      lifetime_meta_steps=2,
      population=MIXED,
  )
  plan = with_faults(
      plan_lib.build(config),
      poison_agent_at_steps=(1,),
      poison_meta_grad_at_steps=(2,),
  )
  states = [plan_lib.initial_state(plan)]  # the agents of mixed["states"][0]
  logs = []
  for _ in range(2):
    state, step_logs = plan.population.step(states[-1])
    states.append(state)
    logs.append(jax.device_get(step_logs))
  return dict(states=states, logs=logs)


def test_diverged_agent_is_left_out_and_restarted(mixed, poisoned):
  state, logs = poisoned["states"][1], poisoned["logs"][0]
  assert logs["catch-5x5/diverged_agents"] == 1
  assert logs["catch-6x6/diverged_agents"] == 0
  assert logs["diverged_agents"] == 1 and logs["meta_update_skipped"] == 0
  assert np.isfinite(logs["catch-5x5/meta_loss"])
  # Adam's first moment after one step is 0.1 x the meta-gradient: the
  # catch-5x5 group's mean is over its finite agent alone, the group weights
  # (3:1) are kept.
  grads = mixed["per_agent_grads"]
  expected = jax.tree.map(lambda a, b: 0.75 * a[1] + 0.25 * b.mean(0), *grads)
  meta_grad = jax.tree.map(lambda m: m / 0.1, state.meta_opt_state[0].mu)
  assert _max_rel(meta_grad, expected) < 1e-5
  all_agents = jax.tree.map(
      lambda a, b: 0.75 * a.mean(0) + 0.25 * b.mean(0), *grads
  )
  assert _max_rel(meta_grad, all_agents) > 1e-3
  # The poisoned agent (age 0) starts a new lifetime like the expiring one:
  # fresh, finite parameters and optimiser state.
  catch5 = state.agents[0]
  assert [int(x) for x in catch5.age] == [0, 0]
  assert _counts(catch5.learner.opt_state) == [0, 0]
  assert all(
      np.isfinite(np.asarray(x)).all()
      for x in jax.tree.leaves(catch5.learner.params)
  )
  assert [int(x) for x in state.agents[1].age] == [1, 0]


def test_non_finite_meta_gradient_skips_the_update(poisoned):
  before, after = poisoned["states"][1:]
  logs = poisoned["logs"][1]
  assert logs["meta_update_skipped"] == 1
  assert not np.isfinite(logs["meta_grad_norm"])
  for a, b in zip(
      jax.tree.leaves((before.meta_params, before.meta_opt_state)),
      jax.tree.leaves((after.meta_params, after.meta_opt_state)),
      strict=True,
  ):
    np.testing.assert_array_equal(a, b)
  assert int(after.step) == 2  # the agents moved on
  assert [int(x) for x in after.agents[1].age] == [0, 1]


def test_replay_fills_empties_with_a_new_lifetime_and_feeds_the_updates(
    tmp_path,
):
  """Each meta-step adds its batch_size x inner_steps trajectories; an agent
  starting a new lifetime starts with an empty replay; updates that learn
  from replayed batches end elsewhere than updates on the fresh rollouts."""
  settings = dict(
      **TINY_LPG,
      lifetime_meta_steps=3,
      population=MIXED[:1],
  )
  plan = plan_lib.build(
      tiny_config(
          **settings,
          replay_capacity=5,
          replay_batch_size=3,
          output_dir=str(tmp_path / "a"),
      )
  )
  fresh = plan_lib.build(
      tiny_config(**settings, output_dir=str(tmp_path / "b"))
  )
  pops = [plan.population, fresh.population]
  states = [p.init(jax.random.PRNGKey(0), plan.meta_params) for p in pops]
  assert states[1].agents[0].replay is None
  sizes, losses = [], []
  for _ in range(4):
    (state, logs), (states[1], fresh_logs) = (
        pops[0].step(states[0]),
        pops[1].step(states[1]),
    )
    states[0] = state
    sizes.append([int(x) for x in state.agents[0].replay.size])
    losses.append((float(logs["meta_loss"]), float(fresh_logs["meta_loss"])))
  # Two agents, ages staggered 0 and 1, new lifetimes at age 3; 2
  # trajectories a meta-step, at most 5 kept.
  assert sizes == [[2, 2], [4, 0], [0, 2], [2, 4]], sizes
  replayed, on_fresh = losses[0]
  assert np.isfinite(replayed) and replayed != on_fresh, losses
