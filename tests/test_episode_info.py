"""Per-episode environment metrics (``EnvTimestep.info``) reach the episode
statistics and ``disco-eval``'s outputs, and change nothing without them.

Uses a Catch that reports ``caught`` (1 where the ended episode's ball was
caught): its mean over the episodes that end is ``(mean return + 1) / 2``.
"""

from __future__ import annotations

import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from disco import types
from disco.environments import catch
from disco.environments import registry
from disco.evaluation import outputs
from disco.training import acting
from disco.training import analysis

NAME = "test/catch_with_info"
HOST_NAME = "test/host_catch_with_info"


class CatchWithInfo(catch.Catch):
  """Catch whose timesteps carry ``info={"caught": [B]}``."""

  def reset(self, rng):
    state, timestep = super().reset(rng)
    return state, timestep.replace(info=dict(caught=jnp.zeros(self.batch_size)))

  def step(self, state, actions):
    state, timestep = super().step(state, actions)
    caught = (timestep.reward > 0).astype(jnp.float32)
    return state, timestep.replace(info=dict(caught=caught))


class HostCatchWithInfo(CatchWithInfo):
  """The same, driven from the loop's host path."""

  is_jittable = False


@pytest.fixture(scope="module", autouse=True)
def registered():
  settings = dict(rows=5, columns=5)
  registry.register_env(NAME, CatchWithInfo, settings)
  registry.register_env(HOST_NAME, HostCatchWithInfo, settings, jittable=False)
  yield
  registry.unregister_env(NAME)
  registry.unregister_env(HOST_NAME)


def _evaluate(env, out, num_seeds=2):
  from disco import evaluation  # pylint: disable=g-import-not-at-top

  return evaluation.evaluate(
      rule="actor_critic",
      env=env,
      total_env_steps=78,
      num_seeds=num_seeds,
      num_envs=2,
      rollout_len=3,
      batch_size=2,
      replay_capacity=0,
      iterations_per_call=13,
      last_episodes=6,
      output_dir=str(out),
      progress=False,
      log=lambda _: None,
  )


def _check_caught(out: Path, summary: dict) -> None:
  metrics = analysis.read_metrics_csv(out / "metrics.csv")
  caught, episodes = metrics["episode/caught"], metrics["episodes"]
  ended = episodes > 0
  assert ended.any() and not ended.all()  # 3 steps an iteration, 4 an episode
  np.testing.assert_allclose(
      caught[ended], (metrics["mean_return"][ended] + 1) / 2, atol=1e-6
  )
  assert np.isnan(caught[~ended]).all()
  final = summary["final_episode_info"]["episode/caught"]
  np.testing.assert_allclose(
      final["per_seed"],
      (np.asarray(summary["final_return_per_seed"]) + 1) / 2,
      atol=1e-6,
  )
  assert final["mean"] == pytest.approx(np.mean(final["per_seed"]))
  saved = json.loads((out / "summary.json").read_text())
  assert saved["final_episode_info"] == summary["final_episode_info"]


def test_info_reaches_the_metrics_and_the_summary(tmp_path):
  summary = _evaluate(NAME, tmp_path / "run")
  _check_caught(tmp_path / "run", summary)


def test_the_host_loop_carries_info_too(tmp_path):
  summary = _evaluate(HOST_NAME, tmp_path / "run", num_seeds=1)
  _check_caught(tmp_path / "run", summary)


def _rollout(env_info):
  rewards = jnp.asarray([[0.0, 1.0], [1.0, 0.0], [-1.0, 1.0]])
  return types.ActorTimestep(
      observations=jnp.zeros((3, 2, 1)),
      actions=jnp.zeros((3, 2), jnp.int32),
      rewards=rewards,
      step_types=jnp.asarray([[1, 2], [2, 1], [2, 2]], jnp.int32),
      discounts=jnp.zeros((3, 2)),
      agent_outs={},
      logits=jnp.zeros((3, 2, 3)),
      env_info=env_info,
  )


def test_episode_stats_average_info_over_the_episodes_that_end():
  actor = acting.ActorCarry(
      env_state=None,
      timestep=None,
      episode_return=jnp.zeros(2),
      episode_length=jnp.zeros(2, jnp.int32),
  )
  plain = acting.episode_stats(actor, _rollout(None))[1]
  assert not [k for k in plain if k.startswith("episode/")]
  # Four episodes end (LAST); the other steps' values are never read.
  values = jnp.asarray([[9.0, 1.0], [0.0, 9.0], [1.0, 1.0]])
  stats = acting.episode_stats(actor, _rollout(dict(x=values)))[1]
  assert stats["episode/x"] == pytest.approx(0.75)
  assert {k: v for k, v in stats.items() if k != "episode/x"}.keys() == (
      plain.keys()
  )
  for k in plain:
    np.testing.assert_array_equal(stats[k], plain[k])
  none_ended = _rollout(dict(x=values)).replace(
      step_types=jnp.ones((3, 2), jnp.int32)
  )
  assert np.isnan(acting.episode_stats(actor, none_ended)[1]["episode/x"])


def test_final_episode_info_windows_and_seeds():
  nan = np.nan
  metrics = dict(
      episodes=np.array([[2, 0, 2], [1, 1, 0]]),
      return_sum=np.zeros((2, 3)),
      diverged=np.array([[0, 0, 0], [0, 0, 1]]),
      **{"episode/solved": np.array([[1.0, nan, 0.5], [1.0, 0.0, nan]])},
      other=np.ones((2, 3)),
  )
  info = outputs.final_episode_info(metrics, last_episodes=3)
  assert list(info) == ["episode/solved"]
  # Seed 0: its last two iterations hold 2 episodes, the last three 4
  # (weighted by episodes: (2 * 1 + 2 * 0.5) / 4); seed 1 diverged.
  assert info["episode/solved"]["per_seed"] == [0.75, None]
  assert info["episode/solved"]["mean"] == 0.75
  assert outputs.final_episode_info({"episodes": np.ones((1, 2))}, 5) == {}
