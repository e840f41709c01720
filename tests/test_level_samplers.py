"""Level samplers: uniform, PLR and GROOVE buffers (no meta-training)."""

import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from disco import errors
from disco.environments import base
from disco.environments import registry
from disco.meta import checkpoints as ckpt_lib
from disco.meta import level_sampler_registry
from disco.meta import level_samplers as ls
from disco.meta import plan as plan_lib
from disco.meta import run_folder
from disco.meta import trainer as mt

from meta_settings import TINY_FLAGS
from meta_settings import TINY_LPG
from meta_settings import run_launcher
from meta_settings import tiny_config


@pytest.fixture(scope="module")
def env():
  return registry.make_env("delayed_chain", 1, variant="random")


def _sampler(env, **kw):
  kw = dict(dict(kind="plr", buffer_size=4, min_fill=0.0), **kw)
  return level_sampler_registry.make_level_sampler(ls.SamplerConfig(**kw), env)


def _filled(sampler, scores, last_used=None, clock=0):
  state = sampler.init()
  levels = jax.vmap(sampler.env.sample_level)(
      jax.random.split(jax.random.PRNGKey(7), len(scores))
  )
  n = len(scores)
  return state.replace(
      levels=levels,
      scores=jnp.asarray(scores, jnp.float32),
      filled=jnp.ones([n], bool),
      last_used=jnp.asarray(
          last_used if last_used is not None else [0] * n, jnp.int32
      ),
      clock=jnp.int32(clock),
  )


def test_rank_transform_probabilities_are_exact(env):
  sampler = _sampler(env, transform="rank", temperature=0.5, staleness_coef=0.2)
  state = _filled(sampler, [3.0, 1.0, 2.0, 0.5], [1, 4, 3, 4], clock=5)
  h = np.array([1 / 1, 1 / 3, 1 / 2, 1 / 4]) ** 2.0
  stale = np.array([4, 1, 2, 1], float)
  expected = 0.8 * h / h.sum() + 0.2 * stale / stale.sum()
  np.testing.assert_allclose(
      sampler.replay_probabilities(state), expected, rtol=1e-6
  )


def test_power_transform_probabilities_are_exact(env):
  sampler = _sampler(env, transform="power", temperature=0.5, staleness_coef=0)
  state = _filled(sampler, [3.0, 1.0, 2.0, -1.0])
  h = np.array([9.0, 1.0, 4.0, 0.0])
  np.testing.assert_allclose(
      sampler.replay_probabilities(state), h / h.sum(), rtol=1e-6
  )


def test_plr_replays_high_scores_in_the_transforms_proportions(env):
  sampler = _sampler(
      env, transform="rank", temperature=1.0, staleness_coef=0.0, replay_prob=1
  )
  state = _filled(sampler, [0.1, 5.0, 1.0, 2.0])
  draws = jax.jit(lambda s, k: sampler.draw_many(s, k, 20000))(
      state, jax.random.PRNGKey(0)
  )
  assert bool(jnp.all(draws.replay))
  counts = np.bincount(np.asarray(draws.slot), minlength=4) / 20000
  # Ranks 4, 1, 3, 2 -> weights 1/4, 1, 1/3, 1/2 (sum 25/12).
  expected = np.array([1 / 4, 1, 1 / 3, 1 / 2]) * 12 / 25
  np.testing.assert_allclose(counts, expected, atol=0.012)
  assert counts[1] > counts[3] > counts[2] > counts[0]
  # The replayed level is the slot's.
  np.testing.assert_array_equal(
      draws.level.length, np.asarray(state.levels.length)[draws.slot]
  )


def test_stale_levels_get_picked_up(env):
  sampler = _sampler(
      env, transform="rank", temperature=0.05, staleness_coef=0.3, replay_prob=1
  )
  state = _filled(sampler, [10.0, 9.0, 8.0, 0.0])
  update = jax.jit(sampler.update)
  draw = jax.jit(sampler.draw)
  p_low = [float(sampler.replay_probabilities(state)[3])]
  picked = None
  for t in range(200):
    d = draw(state, jax.random.PRNGKey(t))
    if int(d.slot) == 3:
      picked = t
      break
    ends = ls.LifetimeEnd(
        level=jax.tree.map(lambda x: x[None], d.level),
        slot=d.slot[None],
        score=state.scores[d.slot][None],
        reference=jnp.zeros([1]),
        ended=jnp.ones([1], bool),
    )
    state = update(state, ends)
    p_low.append(float(sampler.replay_probabilities(state)[3]))
  # Without staleness the lowest score is (almost) never replayed; with
  # it, its probability grows while it waits, until it is drawn.
  assert p_low[0] < 0.08 and max(p_low) > 1.5 * p_low[0]
  assert picked is not None


def _end(level, slot, score, reference=0.0):
  return ls.LifetimeEnd(
      level=jax.tree.map(lambda x: jnp.asarray(x)[None], level),
      slot=jnp.asarray([slot], jnp.int32),
      score=jnp.asarray([score], jnp.float32),
      reference=jnp.asarray([reference], jnp.float32),
      ended=jnp.ones([1], bool),
  )


def test_buffer_inserts_replaces_the_lowest_and_updates(env):
  sampler = _sampler(env, buffer_size=2)
  state = sampler.init()
  levels = [env.sample_level(jax.random.PRNGKey(i)) for i in range(4)]
  state = sampler.update(state, _end(levels[0], -1, 1.0))
  state = sampler.update(state, _end(levels[1], -1, 3.0))
  np.testing.assert_array_equal(state.filled, [True, True])
  state = sampler.update(state, _end(levels[2], -1, 0.5))  # too low
  np.testing.assert_array_equal(state.scores, [1.0, 3.0])
  state = sampler.update(state, _end(levels[3], -1, 2.0))  # replaces slot 0
  np.testing.assert_array_equal(state.scores, [2.0, 3.0])
  assert int(state.levels.length[0]) == int(levels[3].length)
  state = sampler.update(state, _end(levels[1], 1, 0.25))  # a replay
  np.testing.assert_array_equal(state.scores, [2.0, 0.25])
  np.testing.assert_array_equal(state.last_used, [4, 5])
  assert int(state.clock) == 5


def test_groove_regret_is_zero_where_the_rule_matches_the_reference(env):
  sampler = _sampler(env, kind="groove", buffer_size=2)
  state = sampler.init()
  level = env.sample_level(jax.random.PRNGKey(0))
  # A fresh level: the meta-rule's return equals the reference's -> 0.
  state = sampler.update(state, _end(level, -1, 0.7, reference=0.7))
  assert float(state.scores[0]) == 0.0
  assert float(state.reference[0]) == pytest.approx(0.7)
  # A replay uses the cached reference return, not the lifetime's.
  state = sampler.update(state, _end(level, 0, 0.2, reference=-5.0))
  assert float(state.scores[0]) == pytest.approx(0.5)
  assert float(ls.regret(jnp.float32(1.5), jnp.float32(1.5))) == 0.0


def test_uniform_draws_fresh_levels(env):
  sampler = level_sampler_registry.make_level_sampler(
      ls.SamplerConfig(kind="uniform"), env
  )
  state = sampler.init()
  draws = sampler.draw_many(state, jax.random.PRNGKey(0), 64)
  assert not bool(draws.replay.any()) and bool(jnp.all(draws.slot == -1))
  assert len(np.unique(np.asarray(draws.level.length))) > 5


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(score_fn="gae"), "score_fn='gae' is unknown"),
        (dict(transform="softmax"), "transform='softmax' is unknown"),
        (dict(temperature=0.0), "temperature=0.0 must be"),
        (dict(buffer_size=0), "buffer_size=0 must be"),
    ],
)
def test_bad_settings(kw, match):
  with pytest.raises(ValueError, match=match):
    ls.SamplerConfig(**kw)


def test_unknown_kind_names_the_registered_ones(env):
  with pytest.raises(ValueError) as info:
    level_sampler_registry.make_level_sampler(
        ls.SamplerConfig(kind="plrr"), env
    )
  assert str(info.value) == (
      "level_sampler.kind='plrr' is unknown; valid: none, uniform, plr, "
      "groove."
  )


def test_env_without_levels():
  with pytest.raises(base.LevelsUnsupportedError, match="has no levels"):
    ls.LevelSampler(ls.SamplerConfig(), registry.make_env("catch", 1))


# ------------------------------------------------------ meta-training ----

LEVELS = (
    dict(env="lpg/random", env_settings=dict(mode="small"), num_agents=2),
)


def _level_config(out, **sampler):
  config = tiny_config(
      **TINY_LPG,
      output_dir=str(out),
      num_meta_steps=4,
      checkpoint_every=2,
      lifetime_meta_steps=2,
      population=LEVELS,
  )
  config.level_sampler.update(
      dict(dict(kind="plr", buffer_size=4, min_fill=0.25), **sampler)
  )
  return config


@pytest.fixture(scope="module")
def plr_run(tmp_path_factory):
  out = tmp_path_factory.mktemp("plr") / "run"
  plan = plan_lib.build(_level_config(out))
  result = mt.run(plan, log=lambda _: None, progress=False)
  return dict(out=out, result=result)


def test_plr_meta_training_fills_the_buffer_and_logs(plr_run):
  result = plr_run["result"]
  levels = jax.device_get(result.state.levels[0])
  # Two agents, staggered lifetimes of 2 meta-steps: one ends per step.
  assert int(levels.clock) == 4 and int(levels.draws) == 4
  assert int(levels.filled.sum()) >= 3
  history = result.history
  for column in ("replay_fraction", "buffer_fill", "score_mean", "size"):
    assert f"lpg/random/levels/{column}" in history.columns
  sizes = history.column("lpg/random/levels/size")
  assert np.all((sizes >= 4) & (sizes <= 6))
  # The agents play their drawn levels.
  agents = jax.device_get(result.state.agents[0])
  np.testing.assert_array_equal(
      agents.actor.env_state.level.size[:, 0], agents.levels.level.size
  )


def test_sampler_state_survives_kill_and_resume_bit_for_bit(plr_run, tmp_path):
  src, out = plr_run["out"], tmp_path / "resumed"
  out.mkdir()
  shutil.copy(src / run_folder.CONFIG_FILE, out / run_folder.CONFIG_FILE)
  shutil.copy(src / run_folder.METRICS_FILE, out / run_folder.METRICS_FILE)
  (out / run_folder.CHECKPOINT_DIR).mkdir()
  shutil.copytree(
      src / run_folder.CHECKPOINT_DIR / "2",
      out / run_folder.CHECKPOINT_DIR / "2",
  )
  config = _level_config(out)
  config.resume = True
  mt.train(config, log=lambda _: None, progress=False)
  plan = plan_lib.build(_level_config(tmp_path / "x"))
  template = plan_lib.abstract_state(plan.population, plan.rule)
  x = ckpt_lib.restore_latest(out / run_folder.CHECKPOINT_DIR, template)
  y = ckpt_lib.restore_latest(src / run_folder.CHECKPOINT_DIR, template)
  assert x.step == y.step == 4
  assert int(jax.device_get(x.state.levels[0].clock)) == 4
  for u, v in zip(
      jax.tree.leaves(jax.device_get(x.state)),
      jax.tree.leaves(jax.device_get(y.state)),
      strict=True,
  ):
    np.testing.assert_array_equal(u, v)
  assert (out / run_folder.METRICS_FILE).read_text() == (
      src / run_folder.METRICS_FILE
  ).read_text()


@pytest.mark.parametrize(
    "sampler, overrides, match",
    [
        (dict(kind="curriculum"), {}, "kind='curriculum' is unknown"),
        (dict(score_fn="regret"), {}, "score_fn='regret' is unknown"),
        (
            {},
            dict(population=(dict(env="catch", num_agents=2),)),
            "'catch' has none",
        ),
        (dict(buffer_size=1), {}, "smaller than the population"),
        ({}, dict(lifetime_meta_steps=0), "never start one"),
        ({}, dict(estimator="pes"), "estimator='backprop' only"),
    ],
)
def test_bad_input(sampler, overrides, match, tmp_path):
  config = _level_config(tmp_path / "o", **sampler)
  config.update(overrides)
  with pytest.raises(errors.UsageError, match=match):
    plan_lib.build(config)


def test_bad_input_exits_2_with_one_line(tmp_path):
  result = run_launcher(
      [*TINY_FLAGS, "--config.level_sampler.kind=plrr"], cwd=tmp_path
  )
  assert result.returncode == 2, result.stderr[-2000:]
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and "kind='plrr' is unknown" in lines[0], lines
