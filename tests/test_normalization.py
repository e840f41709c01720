"""Tests for disco.training.normalization and the loop's normalisation
options (normalize_observations, normalize_rewards)."""

from __future__ import annotations

import json
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from disco import errors
from disco import evaluation
from disco import types
from disco import weights
from disco.evaluation import outputs
from disco.evaluation import settings as eval_settings
from disco.training import normalization

# ---------------------------------------------------------- the moments ----


@pytest.mark.parametrize("seed", range(5))
def test_running_moments_are_those_of_everything_seen(seed):
  rng = np.random.default_rng(seed)
  shape = tuple(rng.integers(1, 4, size=rng.integers(0, 3)))
  offset = rng.normal(size=shape) * 100.0
  scale = np.exp(rng.normal(size=shape))
  batches = [
      (offset + scale * rng.normal(size=(rng.integers(1, 9),) + shape))
      for _ in range(rng.integers(1, 7))
  ]
  moments = normalization.init_moments(shape)
  update = jax.jit(normalization.update_moments, static_argnums=2)
  for batch in batches:
    moments = update(moments, jnp.asarray(batch, jnp.float32), 1)
  seen = np.concatenate(batches).astype(np.float32).astype(np.float64)
  assert moments.mean.dtype == jnp.float32 and moments.var.dtype == jnp.float32
  assert float(moments.count) == len(seen)
  np.testing.assert_allclose(moments.mean, seen.mean(0), rtol=1e-5, atol=1e-4)
  np.testing.assert_allclose(moments.var, seen.var(0), rtol=1e-4, atol=1e-5)
  # One update with everything gives the same moments as the chunks.
  whole = normalization.update_moments(
      normalization.init_moments(shape), jnp.asarray(seen, jnp.float32), 1
  )
  np.testing.assert_allclose(moments.mean, whole.mean, rtol=1e-5, atol=1e-4)
  np.testing.assert_allclose(moments.var, whole.var, rtol=1e-4, atol=1e-5)
  assert float(whole.count) == float(moments.count)


def test_several_leading_axes_are_samples():
  x = jnp.arange(24.0).reshape(2, 3, 4)  # [T, B, D]
  moments = normalization.update_moments(normalization.init_moments((4,)), x, 2)
  flat = np.asarray(x).reshape(6, 4)
  assert float(moments.count) == 6
  np.testing.assert_allclose(moments.mean, flat.mean(0))
  np.testing.assert_allclose(moments.var, flat.var(0))


def test_normalize_standardises_and_clips_in_the_input_dtype():
  moments = normalization.RunningMoments(
      mean=jnp.array([1.0, -2.0]), var=jnp.array([4.0, 0.0]), count=jnp.ones([])
  )
  x = jnp.array([[3.0, -2.0], [1.0, -1.0]], jnp.bfloat16)
  out = normalization.normalize(moments, x)
  assert out.dtype == jnp.bfloat16
  np.testing.assert_allclose(
      np.asarray(out, np.float32),
      [[1.0, 0.0], [0.0, normalization.OBSERVATION_CLIP]],
      rtol=1e-2,
  )
  # Fresh statistics are the identity.
  y = jnp.array([[0.5, -7.0]])
  np.testing.assert_array_equal(
      normalization.normalize(normalization.init_moments((2,)), y), y
  )


# ---------------------------------------------------------- the rewards ----


def test_discounted_returns_restart_after_each_episode():
  rewards = jnp.array([[1.0, 2.0], [1.0, 0.0], [1.0, 3.0], [1.0, 1.0]])
  is_last = jnp.array([[0, 0], [1, 0], [0, 1], [0, 0]], bool)
  end, per_step = normalization.discounted_returns(
      jnp.array([10.0, 0.0]), rewards, is_last, 0.5
  )
  # Stream 0: 10 -> 6, 4 (last: includes its reward, then restarts) -> 1,
  # 1.5; stream 1: 2, 1, 3.5 (last) -> 1.
  np.testing.assert_allclose(
      per_step, [[6.0, 2.0], [4.0, 1.0], [1.0, 3.5], [1.5, 1.0]]
  )
  np.testing.assert_allclose(end, [1.5, 1.0])


def _rollout(observations, rewards, is_last):
  """A ``[T+1, B]`` rollout with only what normalisation reads filled."""
  shape = rewards.shape
  return types.ActorTimestep(
      observations=observations,
      actions=jnp.zeros(shape, jnp.int32),
      rewards=rewards,
      step_types=jnp.where(is_last, types.LAST, types.MID).astype(jnp.int32),
      discounts=jnp.ones(shape),
      agent_outs={},
      logits=jnp.zeros(shape + (2,)),
  )


def test_learner_rollout_scales_rewards_by_the_returns_spread():
  rng = np.random.default_rng(0)
  t, b, discount = 6, 3, 0.9
  obs = jnp.asarray(rng.normal(3.0, 2.0, size=(t, b, 2)), jnp.float32)
  rewards = jnp.asarray(rng.normal(-5.0, 3.0, size=(t, b)), jnp.float32)
  is_last = jnp.asarray(rng.random((t, b)) < 0.3)
  state = normalization.init(obs[0], observations=True, rewards=True)
  new, seen = normalization.learner_rollout(
      state, _rollout(obs, rewards, is_last), discount
  )
  # Returns by hand, each restarted after its episode's last step.
  g, returns = np.zeros(b), []
  for step in range(t):
    g = discount * g + np.asarray(rewards[step])
    returns.append(g.copy())
    g = np.where(np.asarray(is_last[step]), 0.0, g)
  returns = np.stack(returns)
  np.testing.assert_allclose(new.discounted_return, g, rtol=1e-5)
  np.testing.assert_allclose(new.returns.var, returns.var(), rtol=1e-4)
  np.testing.assert_allclose(new.returns.mean, returns.mean(), rtol=1e-4)
  # No mean subtracted: the sign of each reward stays.
  np.testing.assert_allclose(
      seen.rewards, rewards / np.sqrt(returns.var() + 1e-8), rtol=1e-5
  )
  # The observations: those the actor saw (the statistics before, here the
  # identity); the statistics take the raw ones in.
  np.testing.assert_array_equal(seen.observations, obs)
  np.testing.assert_allclose(
      new.observations.mean, np.asarray(obs).reshape(-1, 2).mean(0), rtol=1e-5
  )
  assert float(new.observations.count) == t * b
  _, again = normalization.learner_rollout(
      new, _rollout(obs, rewards, is_last), discount
  )
  np.testing.assert_allclose(
      again.observations,
      (obs - new.observations.mean) / np.sqrt(new.observations.var + 1e-8),
      rtol=1e-5,
      atol=1e-6,
  )


def test_only_the_options_asked_for_are_kept():
  obs = jnp.zeros([4, 3])
  assert normalization.init(obs, observations=False, rewards=False) is None
  state = normalization.init(obs, observations=False, rewards=True)
  assert state.observations is None and state.discounted_return.shape == (4,)
  state = normalization.init(obs, observations=True, rewards=False)
  assert state.returns is None and state.discounted_return is None


@pytest.mark.parametrize(
    "observation, match",
    [
        (jnp.zeros([2, 3], jnp.int32), "are int32"),
        (dict(a=jnp.zeros([2]), b=jnp.zeros([2])), "tree of 2 arrays"),
    ],
)
def test_only_float_array_observations_are_normalised(observation, match):
  with pytest.raises(ValueError, match=match):
    normalization.init(observation, observations=True, rewards=False)
  # Reward normalisation takes any observation.
  normalization.init(observation, observations=False, rewards=True)


# ------------------------------------------------------------- the file ----


def test_statistics_are_saved_and_loaded_back(tmp_path):
  state = normalization.NormalizerState(
      observations=normalization.RunningMoments(
          mean=jnp.array([1.0, 2.0]),
          var=jnp.array([3.0, 4.0]),
          count=jnp.array(5.0),
      ),
      returns=normalization.RunningMoments(
          mean=jnp.array(-1.0), var=jnp.array(7.0), count=jnp.array(9.0)
      ),
      discounted_return=jnp.array([0.5, -0.5, 2.0]),
  )
  path = normalization.save(tmp_path / "n.npz", state, dict(seed=3))
  loaded = normalization.load(path)
  jax.tree.map(np.testing.assert_array_equal, loaded, state)
  assert weights.load_metadata(path) == dict(
      seed=3, kind=normalization.FILE_KIND
  )
  only_obs = state.replace(returns=None, discounted_return=None)
  loaded = normalization.load(normalization.save(tmp_path / "o.npz", only_obs))
  assert loaded.returns is None and loaded.discounted_return is None
  jax.tree.map(np.testing.assert_array_equal, loaded, only_obs)
  weights.save_meta_params(tmp_path / "p.npz", {"m": {"w": np.zeros(2)}})
  with pytest.raises(weights.WeightsError, match="no normaliser statistics"):
    normalization.load(tmp_path / "p.npz")


# ------------------------------------------------------------- the loop ----


def _config(tmp_path, **overrides):
  """Actor-critic on Pendulum with 4-step episodes, a replay, 2 seeds."""
  values = dict(
      rule="actor_critic",
      env="gymnax/Pendulum-v1",
      env_settings=dict(max_steps_in_episode=4),
      total_env_steps=24,
      num_envs=2,
      rollout_len=6,
      batch_size=2,
      replay_capacity=4,
      min_replay_size=2,
      iterations_per_call=2,
      num_seeds=2,
      last_episodes=4,
      network=dict(dense=(8,)),
      output_dir=str(tmp_path / "run"),
  )
  values.update(overrides)
  return eval_settings.make_config(**values)


def _two_iterations(tmp_path, **overrides):
  """States before and after two iterations, and their metrics; the learner
  first learns after acting in the second."""
  config = _config(tmp_path, min_replay_size=4, **overrides)
  plan = evaluation.build(config, log=lambda _: None)
  start = plan.loop.init_seeds(plan.local_seeds)
  states, metrics = plan.loop.run(start, plan.rule.meta_params, 2)
  return plan, start, states, metrics


def test_the_loop_normalises_for_the_learner_and_reports_raw_returns(
    tmp_path,
):
  _, _, raw_states, raw_metrics = _two_iterations(tmp_path)
  assert raw_states.normalizer is None
  plan, start, states, metrics = _two_iterations(
      tmp_path, normalize_observations=True, normalize_rewards=True
  )
  stats, items = states.normalizer, states.replay.items  # [S, slot, T+1]
  # Every observation of the two rollouts counted, per seed.
  steps = 2 * 2 * 6
  np.testing.assert_array_equal(stats.observations.count, [steps, steps])
  np.testing.assert_array_equal(stats.returns.count, [steps, steps])
  # The first rollout is acted with the identity statistics, so on the same
  # seeds it is the one the raw run acted: the same raw episode returns.
  for key in ("episodes", "return_sum", "reward_mean"):
    np.testing.assert_array_equal(metrics[key][:, 0], raw_metrics[key][:, 0])
  assert np.all(metrics["episodes"][:, 0] > 0)
  raw_items = raw_states.replay.items
  np.testing.assert_array_equal(
      items.observations[:, :2], raw_items.observations[:, :2]
  )
  for seed in range(2):
    # The replay holds what the learner saw: the first rollout's rewards
    # (slots 0 and 1) scaled by the spread of its discounted returns.
    raw = np.asarray(raw_items.rewards[seed, :2])  # [2, T+1]
    last = np.asarray(raw_items.step_types[seed, :2]) == types.LAST
    g, returns = np.zeros(2), []
    for t in range(6):
      g = 0.99 * g + raw[:, t]
      returns.append(g.copy())
      g = np.where(last[:, t], 0.0, g)
    np.testing.assert_allclose(
        items.rewards[seed, :2],
        raw / np.sqrt(np.var(returns) + 1e-8),
        rtol=1e-5,
    )
    # The second rollout was acted and stored normalised by the first's
    # statistics; with it the statistics are those of both rollouts.
    first = np.asarray(raw_items.observations[seed, :2]).reshape(-1, 3)
    mean, std = first.mean(0), np.sqrt(first.var(0) + 1e-8)
    second = np.asarray(items.observations[seed, 2:4]).reshape(-1, 3)
    assert np.abs(second).max() < normalization.OBSERVATION_CLIP
    both = np.concatenate([first, second * std + mean])
    np.testing.assert_allclose(
        stats.observations.mean[seed], both.mean(0), rtol=1e-4, atol=1e-5
    )
    np.testing.assert_allclose(
        stats.observations.var[seed], both.var(0), rtol=1e-3, atol=1e-5
    )
    # The actor's outputs are the network's on the stored observations.
    params = jax.tree.map(lambda x, s=seed: x[s], start.learner.params)
    logits = plan.agent.apply(params, jnp.asarray(second))["logits"]
    np.testing.assert_allclose(
        np.asarray(items.logits[seed, 2:4]).reshape(logits.shape),
        logits,
        rtol=1e-4,
        atol=1e-5,
    )


def test_the_learner_sees_clipped_rewards_and_the_metrics_raw_ones(tmp_path):
  _, _, raw_states, raw_metrics = _two_iterations(tmp_path)
  _, _, states, metrics = _two_iterations(tmp_path, reward_clip=1.0)
  raw = np.asarray(raw_states.replay.items.rewards)
  assert raw.min() < -1.0  # Pendulum's rewards reach about -16
  np.testing.assert_array_equal(
      states.replay.items.rewards, np.clip(raw, -1.0, 1.0)
  )
  for key in ("episodes", "return_sum", "reward_mean"):
    np.testing.assert_array_equal(metrics[key][:, 0], raw_metrics[key][:, 0])


def test_host_environments_normalise_too(tmp_path):
  plan, start, states, _ = _two_iterations(
      tmp_path,
      env="catch_dm_env",
      env_settings=dict(rows=4, columns=4),
      num_seeds=1,
      normalize_observations=True,
      normalize_rewards=True,
  )
  stats, items = states.normalizer, states.replay.items
  np.testing.assert_array_equal(stats.observations.count, [24.0])
  np.testing.assert_array_equal(stats.returns.count, [24.0])
  assert stats.observations.mean.shape == (1, 4, 4, 1)
  # The second rollout was acted on observations normalised by the first's
  # statistics: stored so, and the actor's outputs are the network's there.
  second = np.asarray(items.observations[0, 2:4]).reshape(-1, 4, 4, 1)
  assert len(np.unique(second)) > 2  # not Catch's raw 0s and 1s
  params = jax.tree.map(lambda x: x[0], start.learner.params)
  logits = plan.agent.apply(params, jnp.asarray(second))["logits"]
  np.testing.assert_allclose(
      np.asarray(items.logits[0, 2:4]).reshape(logits.shape),
      logits,
      rtol=1e-4,
      atol=1e-5,
  )


def test_evaluation_saves_the_statistics_with_the_agent(tmp_path):
  summary = evaluation.evaluate(
      _config(tmp_path, normalize_rewards=True, normalize_rewards_discount=0.9),
      log=lambda _: None,
      progress=False,
  )
  out = tmp_path / "run"
  assert summary["normalizer_files"] == [
      outputs.normalizer_file(0),
      outputs.normalizer_file(1),
  ]
  for seed in (0, 1):
    loaded = normalization.load(out / outputs.normalizer_file(seed))
    assert loaded.observations is None
    assert float(loaded.returns.count) == 24 and loaded.returns.var > 0
    assert (
        weights.load_metadata(out / outputs.normalizer_file(seed))["seed"]
        == seed
    )
  config = json.loads((out / "config.json").read_text())["config"]
  assert config["normalize_rewards"] is True
  assert config["normalize_observations"] is False
  assert config["normalize_rewards_discount"] == 0.9


def test_without_normalisation_no_statistics_are_written(tmp_path):
  summary = evaluation.evaluate(
      _config(tmp_path, env="catch", env_settings=dict(rows=4, columns=4)),
      log=lambda _: None,
      progress=False,
  )
  assert "normalizer_files" not in summary
  assert not list((tmp_path / "run").glob("normalizer_seed*"))
  config = json.loads((tmp_path / "run" / "config.json").read_text())
  assert config["config"]["normalize_observations"] is False


# ------------------------------------------------------ bad settings ----


@pytest.mark.parametrize(
    "overrides, match",
    [
        (
            dict(
                env="lpg/dense",
                env_settings=dict(observation="index"),
                network=dict(dense=(8,), obs_embedding="one_hot"),
                normalize_observations=True,
            ),
            "normalize_observations needs float observations; this "
            "environment's are int32",
        ),
        (
            dict(
                rule="spo",
                env="catch",
                env_settings=dict(rows=4, columns=4),
                normalize_rewards=True,
            ),
            "Rule SPO searches over copies of the environment",
        ),
        (dict(normalize_rewards_discount=1.5), "must be in \\[0, 1\\]"),
        (dict(reward_clip=-1.0), "reward_clip"),
    ],
)
def test_bad_settings_are_one_usage_line(tmp_path, overrides, match):
  with pytest.raises(errors.UsageError, match=match) as info:
    evaluation.build(_config(tmp_path, **overrides), log=lambda _: None)
  assert "\n" not in str(info.value)
  assert not (tmp_path / "run").exists()


def test_a_bad_switch_is_one_line_and_exit_status_2(tmp_path):
  result = subprocess.run(
      [
          sys.executable,
          "-m",
          "disco.launch.evaluate",
          "--config.rule=spo",
          "--config.normalize_observations=True",
      ],
      capture_output=True,
      text=True,
      cwd=tmp_path,
      timeout=300,
  )
  assert result.returncode == 2, result.stderr
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1, result.stderr
  assert lines[0].startswith("disco-eval: error: Rule SPO searches"), lines
  assert not (tmp_path / "runs").exists()
