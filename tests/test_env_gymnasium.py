"""Gymnasium environments through ``disco``: the adapter's contract on tiny
environments of the tests' own (``gymnasium_toy``), and the launchers."""

from __future__ import annotations

import json
import os
from pathlib import Path
import subprocess
import sys

import gymnasium
import gymnasium_toy
import jax
import numpy as np
import pytest

from disco import types
from disco.environments import gymnasium_envs
from disco.environments import registry

from meta_settings import subprocess_env
import test_env_contract as contract

TESTS = Path(__file__).resolve().parent


def _env(env_id: str, batch: int = 2, **settings):
  return registry.make_env(f"gymnasium/{env_id}", batch, **settings)


def _steps(env, state, actions, n):
  out = []
  for _ in range(n):
    state, ts = env.step(state, actions)
    out.append(ts)
  return state, out


def test_termination_ends_with_discount_zero_and_the_next_first_observation():
  env = _env(gymnasium_toy.DISCRETE_ID)
  state, first = env.reset(jax.random.PRNGKey(0))
  assert (first.step_type == types.FIRST).all()
  _, steps = _steps(env, state, np.array([2, 2]), 5)
  assert [int(t.step_type[0]) for t in steps] == [types.MID] * 4 + [types.LAST]
  assert steps[-1].discount.tolist() == [0.0, 0.0]
  # The LAST step carries the next episode's first observation.
  assert steps[-1].observation[:, 0].tolist() == [0.0, 0.0]
  np.testing.assert_allclose(steps[-2].observation[:, 0], [0.8, 0.8])


def test_truncation_ends_with_discount_one():
  env = _env(gymnasium_toy.TRUNCATED_ID)
  state, _ = env.reset(jax.random.PRNGKey(0))
  _, steps = _steps(env, state, np.array([1, 1]), 3)
  assert steps[-1].step_type.tolist() == [types.LAST, types.LAST]
  assert steps[-1].discount.tolist() == [1.0, 1.0]
  assert _env(gymnasium_toy.TRUNCATED_ID, max_episode_steps=2)  # an override


def test_discrete_actions_are_indices_from_zero():
  env = _env(gymnasium_toy.DISCRETE_ID)
  spec = env.action_spec()
  assert (spec.minimum, spec.maximum, spec.dtype) == (0, 2, np.int32)
  state, _ = env.reset(jax.random.PRNGKey(0))
  _, ts = env.step(state, np.array([0, 2]))  # the toy's actions -1 and 1
  assert ts.reward.tolist() == [-1.0, 1.0]


def test_continuous_actions_are_clipped_to_the_bounds():
  env = _env(gymnasium_toy.CONTINUOUS_ID)
  spec = env.action_spec()
  assert spec.shape == (2,) and spec.dtype == np.float32
  assert env.is_continuous
  state, _ = env.reset(jax.random.PRNGKey(0))
  _, ts = env.step(state, np.array([[5.0, -0.5], [-9.0, 1.0]]))
  np.testing.assert_allclose(ts.observation, [[2.0, -0.5], [-2.0, 1.0]])


def test_seeding_is_reproducible_and_keys_differ():
  draws = []
  for key in (0, 0, 1):
    env = _env(gymnasium_toy.DISCRETE_ID)
    _, first = env.reset(jax.random.PRNGKey(key))
    draws.append(first.observation[:, 1].tolist())
  assert draws[0] == draws[1]
  assert draws[0] != draws[2]
  assert draws[0][0] != draws[0][1]  # the streams differ too


def test_each_reset_is_a_separate_lifetime():
  env = _env(gymnasium_toy.DISCRETE_ID)
  a, _ = env.reset(jax.random.PRNGKey(0))
  a, _ = _steps(env, a, np.array([1, 1]), 2)
  b, _ = env.reset(jax.random.PRNGKey(1))
  _, (ta,) = _steps(env, a, np.array([1, 1]), 1)
  _, (tb,) = _steps(env, b, np.array([1, 1]), 1)
  np.testing.assert_allclose(ta.observation[:, 0], [0.6, 0.6])  # 3 steps in
  np.testing.assert_allclose(tb.observation[:, 0], [0.2, 0.2])  # 1 step in
  env.close()


def test_a_vector_environment_resetting_next_step_is_refused():
  with pytest.raises(gymnasium_envs.GymnasiumError, match="SAME_STEP"):
    gymnasium_envs.GymnasiumEnv(
        lambda seed: gymnasium.make_vec(
            gymnasium_toy.DISCRETE_ID, num_envs=2, vectorization_mode="sync"
        )
    )


def test_unknown_ids_and_spaces_say_what_to_do():
  with pytest.raises(ValueError, match="gymnasium.register"):
    registry.get_entry("gymnasium/NoSuchEnv-v0")
  with pytest.raises(gymnasium_envs.GymnasiumError, match="FlattenObservation"):
    gymnasium_envs.observation_spec(gymnasium.spaces.Dict({}))
  with pytest.raises(gymnasium_envs.GymnasiumError, match="RescaleAction"):
    gymnasium_envs.action_spec(gymnasium.spaces.Box(-np.inf, np.inf, (2,)))


def _launch(program: str, args: list[str], timeout: int = 600):
  path = os.pathsep.join(
      p for p in (str(TESTS), os.environ.get("PYTHONPATH", "")) if p
  )
  return subprocess.run(
      [sys.executable, "-m", f"disco.launch.{program}", *args],
      env=subprocess_env(PYTHONPATH=path),
      capture_output=True,
      text=True,
      timeout=timeout,
  )


def test_disco_eval_trains_several_seeds_on_a_users_gymnasium_env(tmp_path):
  result = _launch(
      "evaluate",
      [
          "--config.imports=gymnasium_toy",
          "--config.rule=actor_critic",
          f"--config.env=gymnasium/{gymnasium_toy.DISCRETE_ID}",
          "--config.num_seeds=2",
          "--config.total_env_steps=160",
          f"--config.output_dir={tmp_path}",
      ],
  )
  assert result.returncode == 0, result.stderr[-3000:]
  summary = json.loads((tmp_path / "summary.json").read_text())
  assert summary["seeds"] == [0, 1]
  assert all(n > 0 for n in summary["episodes"])
  # Seeds are separate lifetimes with their own streams.
  assert len(set(summary["final_return_per_seed"])) == 2


def test_disco_compare_runs_a_users_gymnasium_env(tmp_path):
  env = f"gymnasium/{gymnasium_toy.DISCRETE_ID}"
  result = _launch(
      "compare",
      [
          "--config.imports=gymnasium_toy",
          "--config.rules=('actor_critic','policy_gradient')",
          f"--config.envs=('{env}',)",
          "--config.num_seeds=3",
          "--config.total_env_steps=128",
          f"--config.references=('{env}:random=0,reference=5,source=toy',)",
          f"--config.output_dir={tmp_path}",
      ],
  )
  assert result.returncode == 0, result.stderr[-3000:]
  stats = json.loads((tmp_path / "statistics.json").read_text())
  assert {"actor_critic", "policy_gradient"} <= set(stats["aggregates"])


@pytest.mark.parametrize(
    "program,args,expected",
    [
        (
            "evaluate",
            ["--config.env=gymnasium/NoSuchEnv-v0"],
            "not in gymnasium's registry",
        ),
        (
            "meta_train",
            [
                "--config.population=({'env': 'gymnasium/CartPole-v1', "
                "'num_agents': 2},)"
            ],
            "runs on the host",
        ),
    ],
)
def test_bad_gymnasium_input_gives_one_line_and_exit_2(program, args, expected):
  result = _launch(program, args, timeout=300)
  assert result.returncode == 2, result.stderr[-2000:]
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and expected in lines[0], result.stderr


@pytest.mark.parametrize("env", ["gymnasium/CartPole-v1", "atari/Pong"])
def test_a_missing_gymnasium_is_one_line_and_exit_status_2(tmp_path, env):
  result = contract.eval_without(
      ("gymnasium", "envpool", "ale_py"), env, tmp_path / "run"
  )
  assert result.returncode == 2, result.stderr
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1, result.stderr
  assert "pip install" in lines[0], lines[0]
  assert not (tmp_path / "run").exists()
