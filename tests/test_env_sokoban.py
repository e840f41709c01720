"""Tests for disco.environments.sokoban_envs (jumanji's Sokoban)."""

from __future__ import annotations

import json
from pathlib import Path
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from disco import types
from disco.environments import registry
from disco.environments import sokoban_envs
from disco.environments import suite_utils
from disco.training import acting

pytest.importorskip("jumanji", reason="jumanji/Sokoban-v0 needs jumanji")

NAME = "jumanji/Sokoban-v0"
UP, RIGHT, DOWN, LEFT = 0, 1, 2, 3
# jumanji's SimpleSolveGenerator level: the agent below a row of four boxes,
# each under its target. Push up, step back down and right, push up again.
SOLUTION = [UP] + [DOWN, RIGHT, UP] * 3
# Two levels in Boxoban's text format.
LEVELS_TEXT = """; 0
##########
#       ##
# ....   #
# $$$$  ##
# @    # #
#   #   ##
#        #
##########
##########
##########

; 1
##########
#@ $  .  #
#  $  .  #
#  $  .  #
#  $  .  #
#        #
#        #
#        #
#        #
##########
"""


def test_the_name_is_registered_with_its_settings():
  assert sokoban_envs.ENV_NAMES == (NAME,)
  assert NAME in registry.env_names()
  assert registry.get_entry(NAME).settings == sokoban_envs.DEFAULTS
  assert sokoban_envs.DEFAULTS["generator"] == "toy"  # offline by default


def test_specs():
  env = registry.make_env(NAME, 2)
  assert env.observation_spec().shape == (10, 10, 4)
  assert env.num_actions == 4 and env.is_jittable


def test_observation_channels():
  env = registry.make_env(NAME, 1, generator="simple")
  _, ts = env.reset(jax.random.PRNGKey(0))
  obs = np.asarray(ts.observation[0])
  wall, target, box, agent = np.moveaxis(obs, -1, 0)
  assert target.sum() == 4 and box.sum() == 4 and agent.sum() == 1
  assert agent[4, 2] == 1 and box[3, 2:6].all() and target[2, 2:6].all()
  assert wall[0].all() and not (wall * (target + box + agent)).any()


def _play(env, actions):
  """``[T, B]`` actions from a reset: the stacked timesteps ``[T, B]``."""
  state, _ = env.reset(jax.random.PRNGKey(0))
  steps = []
  for a in actions:
    state, ts = env.step(state, jnp.asarray(a, jnp.int32))
    steps.append(ts)
  return jax.device_get(jax.tree.map(lambda *x: jnp.stack(x), *steps))


def test_solving_terminates_and_the_time_limit_truncates():
  env = registry.make_env(NAME, 2, generator="simple", time_limit=12)
  first = jax.device_get(env.reset(jax.random.PRNGKey(0))[1])
  # Stream 0 solves the level in 10 steps; stream 1 walks into a wall.
  actions = [[a, LEFT] for a in SOLUTION + [LEFT, LEFT]]
  ts = _play(env, actions)
  kinds = ts.step_type
  assert kinds[9, 0] == types.LAST and ts.discount[9, 0] == 0.0
  assert (kinds[:9, 0] == types.MID).all()
  assert ts.reward[9, 0] == pytest.approx(-0.1 + 1.0 + 10.0)
  assert ts.info["solved"][9, 0] == 1.0
  assert ts.info["boxes_on_targets"][9, 0] == 1.0
  # Solved: the next observation is a new episode's first.
  np.testing.assert_array_equal(ts.observation[9, 0], first.observation[0])
  assert kinds[11, 1] == types.LAST and ts.discount[11, 1] == 1.0
  assert (kinds[:11, 1] == types.MID).all()
  assert ts.info["solved"][11, 1] == 0.0


def test_solve_rates_reach_the_episode_statistics():
  env = registry.make_env(NAME, 2, generator="simple", time_limit=12)
  actions = [[a, LEFT] for a in SOLUTION + [LEFT, LEFT]]
  ts = _play(env, actions)
  rollout = acting.with_env_info(
      types.ActorTimestep(
          observations=ts.observation,
          actions=jnp.zeros(ts.reward.shape, jnp.int32),
          rewards=ts.reward,
          step_types=ts.step_type,
          discounts=ts.discount,
          agent_outs={},
          logits=jnp.zeros(ts.reward.shape + (4,)),
      ),
      ts,
  )
  actor = acting.ActorCarry(
      env_state=None,
      timestep=None,
      episode_return=jnp.zeros(2),
      episode_length=jnp.zeros(2, jnp.int32),
  )
  _, stats = acting.episode_stats(actor, rollout)
  assert stats["episodes"] == 2
  assert stats["episode/solved"] == 0.5
  assert stats["episode/boxes_on_targets"] == 0.5


# ------------------------------------------------------------ levels ----


def _no_download(*args, **kwargs):
  raise AssertionError(f"download attempted: {args} {kwargs}")


@pytest.fixture
def no_downloads(monkeypatch):
  """Every way jumanji's generators fetch levels raises."""
  # pylint: disable-next=g-import-not-at-top
  from jumanji.environments.routing.sokoban import generator

  monkeypatch.setattr(generator, "hf_hub_download", _no_download)
  monkeypatch.setattr(generator.requests, "get", _no_download)


@pytest.mark.parametrize("kind", ["toy", "simple"])
def test_offline_generators_never_download(no_downloads, kind):
  env = registry.make_env(NAME, 2, generator=kind)
  state, _ = env.reset(jax.random.PRNGKey(0))
  env.step(state, jnp.zeros(2, jnp.int32))


def test_boxoban_without_levels_names_how_to_get_them(no_downloads):
  with pytest.raises(ValueError, match="boxoban_levels=") as info:
    registry.make_env(NAME, 2, generator="boxoban")
  message = str(info.value)
  assert "\n" not in message and "git clone" in message
  with pytest.raises(ValueError, match="no level files"):
    registry.make_env(
        NAME, 2, generator="boxoban", boxoban_levels="/nonexistent"
    )


def _level_grids(text: str) -> np.ndarray:
  return sokoban_envs.parse_boxoban_text(text, "test")


def test_boxoban_text_format():
  levels = _level_grids(LEVELS_TEXT)
  assert levels.shape == (2, 10, 10, 2) and levels.dtype == np.uint8
  fixed, variable = levels[0, ..., 0], levels[0, ..., 1]
  assert (fixed == sokoban_envs.TARGET).sum() == 4
  assert (variable == sokoban_envs.BOX).sum() == 4
  assert variable[4, 2] == sokoban_envs.AGENT
  with pytest.raises(ValueError, match="not 10x10"):
    _level_grids("; 0\n#####\n")
  with pytest.raises(ValueError, match="unknown characters"):
    _level_grids("; 0\n" + "#" * 9 + "x\n" + ("#" * 10 + "\n") * 9)


@pytest.mark.parametrize("form", ["folder", "file", "npy"])
def test_boxoban_levels_from_local_files(no_downloads, tmp_path, form):
  folder = tmp_path / "unfiltered" / "train"
  folder.mkdir(parents=True)
  (folder / "000.txt").write_text(LEVELS_TEXT)
  (folder / "README.md").write_text("not a level file")
  path = {
      "folder": folder,
      "file": folder / "000.txt",
      "npy": tmp_path / "levels.npy",
  }[form]
  np.save(tmp_path / "levels.npy", _level_grids(LEVELS_TEXT))
  env = registry.make_env(
      NAME, 16, generator="boxoban", boxoban_levels=str(path)
  )
  _, ts = env.reset(jax.random.PRNGKey(0))
  expected = np.stack(
      [
          np.asarray(sokoban_envs.observe(g[..., ::-1]))
          for g in _level_grids(LEVELS_TEXT)
      ]
  )
  # Every reset draws one of the two levels, and both are drawn.
  matches = [
      [np.array_equal(o, e) for e in expected]
      for o in np.asarray(ts.observation)
  ]
  assert all(any(m) for m in matches)
  assert {m.index(True) for m in matches} == {0, 1}


def test_a_bad_npy_file_is_one_line(tmp_path):
  np.save(tmp_path / "bad.npy", np.zeros((3, 4), np.float32))
  with pytest.raises(ValueError, match=r"uint8 \[N, 10, 10, 2\]") as info:
    sokoban_envs.load_boxoban_levels(tmp_path / "bad.npy")
  assert "\n" not in str(info.value)


def test_bad_settings():
  with pytest.raises(ValueError, match="generator='maze'.*'toy'"):
    registry.make_env(NAME, 2, generator="maze")
  with pytest.raises(ValueError, match="time_limit=0"):
    registry.make_env(NAME, 2, time_limit=0)
  with pytest.raises(ValueError, match="Unknown setting"):
    registry.make_env(NAME, 2, max_steps=3)


def test_missing_jumanji_names_the_install_command(monkeypatch):
  for module in list(sys.modules):
    if module == "jumanji" or module.startswith("jumanji."):
      monkeypatch.setitem(sys.modules, module, None)
  with pytest.raises(suite_utils.MissingPackageError) as info:
    registry.make_env(NAME, 2)
  message = str(info.value)
  assert isinstance(info.value, ValueError) and "\n" not in message
  assert "pip install -e '.[sokoban]'" in message


# ------------------------------------------------------ evaluation ----


def test_solve_rates_reach_the_evaluation_outputs(tmp_path):
  from disco import evaluation  # pylint: disable=g-import-not-at-top

  out = tmp_path / "run"
  summary = evaluation.evaluate(
      rule="actor_critic",
      env=NAME,
      env_settings=dict(generator="simple", time_limit=5),
      total_env_steps=40,
      num_seeds=2,
      num_envs=2,
      rollout_len=5,
      batch_size=2,
      replay_capacity=0,
      iterations_per_call=4,
      last_episodes=4,
      output_dir=str(out),
      progress=False,
      log=lambda _: None,
  )
  header = (out / "metrics.csv").read_text().splitlines()[0].split(",")
  assert "episode/solved" in header and "episode/boxes_on_targets" in header
  info = json.loads(Path(out / "summary.json").read_text())
  assert info["final_episode_info"] == summary["final_episode_info"]
  solved = summary["final_episode_info"]["episode/solved"]
  assert len(solved["per_seed"]) == 2 and 0.0 <= solved["mean"] <= 1.0


# ---------------------------------------------------------- reference ----


def _replay(env, state, moves: str):
  """Plays ``moves`` (``URDL``) with jumanji's own step: the return and the
  last timestep."""
  total, step = 0.0, jax.jit(env.package_env.step)
  for move in moves:
    state, timestep = step(state, jnp.asarray("URDL".index(move), jnp.int32))
    total += float(timestep.reward)
  return total, timestep


def test_the_reference_return_is_the_toy_levels_optimum():
  # pylint: disable-next=g-import-not-at-top
  from disco.environments import reference_scores

  env = registry.make_env(NAME, 1)
  toy = env.package_env.generator
  states = {}
  for k in range(16):
    state = toy(jax.random.PRNGKey(k))
    states[int(state.variable_grid[2, 1])] = state
  solvable, unsolvable = states[0], states[sokoban_envs.BOX]
  # Shortest ways, found by benchmarks/open_env_returns.py sokoban_optimal
  # (a breadth-first search over every state of the level).
  total, last = _replay(env, solvable, "DDDRDDRRUUURUULLDLDURRRDRDDDLUU")
  assert bool(last.last()) and bool(last.extras["solved"])
  assert total == pytest.approx(4 + 10 - 0.1 * 31)
  # The other level's box at (2, 1) lies against the left wall, so it can
  # only slide along column 1, which holds no target: at most 3 boxes.
  fixed = np.asarray(unsolvable.fixed_grid)
  assert (fixed[:, 0] == sokoban_envs.WALL).all()
  assert not (fixed[:, 1] == sokoban_envs.TARGET).any()
  moves = "URURURDDRDRDRUUULDRDLDLLUUULURRURRD"
  total, last = _replay(env, unsolvable, moves)
  assert float(last.extras["prop_correct_boxes"]) == 0.75
  assert total == pytest.approx(3 - 0.1 * len(moves))
  # Kept there until the 120-step limit: 3 - 12.
  optimum = ((4 + 10 - 3.1) + (3 - 12.0)) / 2
  entry = reference_scores.REFERENCE_TABLE[NAME]
  assert entry.reference_return == pytest.approx(optimum)
