"""Atari through the Arcade Learning Environment (``atari/<Game>``): the
standard preprocessing, reproducible seeding on each backend, a Disco103
learner step on an Atari batch, and one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from disco import errors
from disco import evaluation
from disco import types
from disco.environments import atari
from disco.environments import registry

from meta_settings import subprocess_env

BACKENDS = atari.available_backends()
needs_backend = pytest.mark.skipif(
    not BACKENDS,
    reason="no Atari backend: pip install -e '.[atari]' (envpool, ale-py)",
)


def _frames(backend: str, seed: int, steps: int = 75):
  env = registry.make_env("atari/Breakout", 2, backend=backend)
  state, first = env.reset(jax.random.PRNGKey(seed))
  actions = np.random.default_rng(0).integers(0, 18, (steps, 2))
  out = [first.observation]
  for a in actions:
    state, ts = env.step(state, a)
    out.append(ts.observation)
  env.close()
  return np.stack(out)


@needs_backend
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_same_seed_gives_the_same_frames(backend):
  a = _frames(backend, seed=3)  # 75 agent steps: 300 frames
  assert a.shape == (76, 2, 84, 84, 4) and a.dtype == np.uint8
  np.testing.assert_array_equal(a, _frames(backend, seed=3))
  assert not np.array_equal(a, _frames(backend, seed=4))


@needs_backend
def test_preprocessing_gives_stacked_grey_84x84_frames_and_18_actions():
  env = registry.make_env("atari/Pong", 3)
  spec = env.observation_spec()
  assert (spec.shape, spec.dtype) == ((84, 84, 4), np.uint8)
  assert env.num_actions == 18  # the full action set
  state, first = env.reset(jax.random.PRNGKey(0))
  assert (first.step_type == types.FIRST).all()
  # The newest frame is the last channel; the stack starts as copies or
  # blanks of the first, and fills over four steps.
  for _ in range(4):
    state, ts = env.step(state, np.zeros(3, np.int64))
  assert ts.observation.shape == (3, 84, 84, 4)
  assert (ts.discount == 1.0).all() and (ts.step_type == types.MID).all()
  env.close()


@needs_backend
def test_a_minimal_action_set_and_the_older_protocol_are_settings():
  env = registry.make_env(
      "atari/Pong",
      1,
      full_action_space=False,
      repeat_action_probability=0.0,
      noop_max=30,
  )
  assert env.num_actions == 6


@needs_backend
def test_disco103_learns_from_an_atari_batch_with_clipped_rewards(tmp_path):
  plan = evaluation.build(
      evaluation.make_config(
          rule="disco103",
          env="atari/Breakout",
          num_envs=2,
          rollout_len=4,
          batch_size=2,
          replay_capacity=0,
          min_replay_size=0,
          total_env_steps=8,
          output_dir=str(tmp_path),
      ),
      log=lambda _: None,
  )
  assert plan.preset.name == "atari"
  assert plan.loop_config.reward_clip == 1.0
  assert plan.agent.net_config.obs_embedding == "nature_cnn"
  states = plan.loop.init_seeds([0])
  after, metrics = plan.loop.run(states, plan.rule.meta_params, 1)
  assert metrics["learner_steps"][0, -1] == 1
  before = jax.tree.leaves(states.learner.params)
  changed = jax.tree.leaves(after.learner.params)
  assert all(np.isfinite(np.asarray(x)).all() for x in changed)
  assert any(
      not np.array_equal(np.asarray(a), np.asarray(b))
      for a, b in zip(before, changed, strict=True)
  )


def test_atari_games_are_listed_and_known_to_the_backends():
  assert "atari/Breakout" in registry.env_names()
  assert set(atari.ATARI_100K_GAMES) <= set(atari.GAMES)
  if "envpool" in BACKENDS:
    import envpool  # pylint: disable=g-import-not-at-top

    known = set(envpool.list_all_envs())
    assert {f"{g}-v5" for g in atari.GAMES} <= known


def test_without_a_backend_the_error_names_the_extra(monkeypatch, tmp_path):
  monkeypatch.setattr(atari, "available_backends", lambda: ())
  with pytest.raises(errors.UsageError, match=r"pip install -e '\.\[atari\]'"):
    evaluation.build(
        evaluation.make_config(
            rule="ppo", env="atari/Pong", output_dir=str(tmp_path)
        ),
        log=lambda _: None,
    )


def test_an_unknown_game_gives_one_line_and_exit_2():
  result = subprocess.run(
      [
          sys.executable,
          "-m",
          "disco.launch.evaluate",
          "--config.rule=ppo",
          "--config.env=atari/Breakot",
      ],
      env=subprocess_env(PYTHONPATH=os.environ.get("PYTHONPATH", "")),
      capture_output=True,
      text=True,
      timeout=300,
  )
  assert result.returncode == 2
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and "atari/Breakout" in lines[0], result.stderr


def test_atari100k_report_aggregates_the_seeds_every_rule_has(tmp_path):
  """``benchmarks/atari100k.py report``: IQM and P(improvement) over the games
  every rule ran, at the fewest seeds any rule has there (a third seed of one
  rule waits), and the per-game means of every seed."""
  from benchmarks import atari100k  # pylint: disable=g-import-not-at-top

  scores = {  # (rule, game): per-seed scores
      ("disco103", "Breakout"): [2.0, 4.0, 30.0],
      ("disco103", "Pong"): [-20.0, -18.0],
      ("ppo", "Breakout"): [3.0, 5.0],
      ("ppo", "Pong"): [-21.0, -19.0],
  }
  with open(tmp_path / "runs.csv", "w") as f:
    f.write(",".join(atari100k.RUN_FIELDS) + "\n")
    for (rule, game), values in scores.items():
      for seed, score in reversed(list(enumerate(values))):
        row = dict.fromkeys(atari100k.RUN_FIELDS, "1")
        row.update(rule=rule, game=game, seed=str(seed), score=str(score))
        f.write(",".join(row[k] for k in atari100k.RUN_FIELDS) + "\n")
  atari100k.main(["report", "--out", str(tmp_path)])
  table = (tmp_path / "table.md").read_text()
  assert "over 2 games x 2 seeds" in table, table
  # Human-normalised: Breakout (score - 1.7) / 28.8, Pong (score + 20.7) /
  # 35.3; the IQM of Disco103's four runs is the mean of the middle two.
  runs = sorted([0.3 / 28.8, 2.3 / 28.8, 0.7 / 35.3, 2.7 / 35.3])
  (disco_row,) = [
      line for line in table.splitlines() if line.startswith("| disco103 |")
  ]
  assert (
      disco_row.split("|")[2].strip().startswith(f"{np.mean(runs[1:3]):.3f} [")
  ), disco_row
  # Mann-Whitney per game: Breakout 1/4 (4 > 3), Pong 3/4.
  assert "against ppo 0.500 [" in table, table
  assert "| Breakout | 1.7 | 30.5 | 12.0 (3) | 4.0 (2) |" in table
  assert (tmp_path / "atari100k.png").exists()
