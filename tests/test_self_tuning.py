"""Self-tuning rules (stac, self_tuning_ppo): the online meta-gradient against
finite differences, bounds, the base rule's update at a zero meta learning
rate, settings errors and the hyper-parameter columns of a run."""

from __future__ import annotations

import functools

import faults
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_launcher_errors import assert_one_line
from test_launcher_errors import launch_process

from disco import agent as agent_lib
from disco import evaluation
from disco import self_tuning_step
from disco import types
from disco.comparison import report
from disco.comparison import results as results_lib
from disco.training import analysis
from disco.update_rules import registry
from disco.update_rules import self_tuning

import conftest

T, B, A = 3, 2, 3
OBS = (5, 5, 1)
NETWORK = dict(
    dense=(8,),
    head_w_init_std=1e-2,
    model_lstm_size=8,
    model_head_hiddens=(8,),
)


def _settings(rule, rule_kwargs=None, **changes):
  settings = registry.default_settings(rule)
  return settings.replace(
      network=NETWORK,
      rule_kwargs={**settings.rule_kwargs, **(rule_kwargs or {})},
      **changes,
  )


def _agent(settings):
  agent = agent_lib.make_agent(settings, num_actions=A)
  state = jax.jit(agent.initial_learner_state)(
      jax.random.PRNGKey(0), np.zeros(OBS, np.float32)
  )
  return agent, state


def _rollout(agent, params, seed):
  """A ``[T+1, B]`` rollout with random observations and behaviour outputs
  (one episode ends, terminated, mid-way)."""
  rng = np.random.default_rng(seed)
  obs = jnp.asarray(rng.random((T + 1, B) + OBS) < 0.2, jnp.float32)
  out = jax.tree.map(
      lambda s: jnp.asarray(rng.normal(size=s.shape), s.dtype),
      jax.eval_shape(agent.unroll, params, obs),
  )
  not_last = np.ones((T + 1, B), bool)
  not_last[1, 0] = False
  return types.ActorRollout(
      observations=obs,
      actions=jnp.asarray(rng.integers(0, A, (T + 1, B)), jnp.int32),
      rewards=jnp.asarray(rng.normal(size=(T + 1, B)), jnp.float32),
      **conftest.step_fields(not_last),
      agent_outs=out,
      logits=out["logits"],
  )


def _as_float64(tree):
  return jax.tree.map(
      lambda x: (
          jnp.asarray(x, jnp.float64)
          if jnp.issubdtype(jnp.asarray(x).dtype, jnp.floating)
          else x
      ),
      tree,
  )


# ------------------------------------------------------- meta-gradient ----


@pytest.mark.parametrize("meta_gradient", ["outer", "linearized"])
@pytest.mark.parametrize("rule", ["stac", "self_tuning_ppo"])
def test_meta_gradient_matches_finite_differences(rule, meta_gradient):
  """The logged meta-gradient of each tuned hyper-parameter's unconstrained
  ``x`` equals the outer loss's gradient (the agent's own kind: targets held
  constant) at the updated parameters (``"outer"``) or at the parameters
  before the update (``"linearized"``), times the updated parameters'
  central differences through one inner update, in float64.

  The agent's Adam holds its denominator constant for meta-gradients
  (``disco.optimizers``); with second moments of 100 here, far above the new
  gradient's share ((1 - b2) g^2, |g| < 1), the true function's denominator
  moves by under 1e-5 relatively, below the tolerance; ``atol`` covers the
  differences' float64 rounding (1e-16 of the inner product, over ``h``).
  """
  with jax.enable_x64(True):
    agent, state = _agent(
        _settings(
            rule,
            learning_rate=0.1,
            anneal_learning_rate=False,
            hyper_params=dict(
                registry.default_settings(rule).hyper_params,
                discount_factor=0.8,
            ),
            rule_kwargs=dict(
                tuned=[
                    *registry.get_entry(rule).make.default_tuned,
                    "step_size",
                ],
                meta_gradient=meta_gradient,
                **(dict(categorical_value=False) if rule == "stac" else {}),
            ),
        )
    )
    tuner = agent.rule
    assert "step_size" in tuner.tuned
    state = _as_float64(state)
    adam = state.opt_state[
        [type(s).__name__ for s in state.opt_state].index("ScaleByAdamState")
    ]
    moments = adam._replace(
        count=jnp.asarray(10**6, jnp.int32),
        nu=jax.tree.map(lambda x: jnp.full_like(x, 100.0), adam.nu),
    )
    state = state.replace(
        opt_state=tuple(moments if s is adam else s for s in state.opt_state)
    )
    rollout = _as_float64(_rollout(agent, state.params, seed=1))
    rng = jax.random.PRNGKey(2)
    update = jax.jit(agent.learner_update)(rng, rollout, state, {})
    x = tuner.meta_variables(state.rule_state)
    base_state = tuner.base_state(state.rule_state)

    # The outer loss's gradient (the agent's own kind: targets held
    # constant), and the updated parameters' finite differences.
    at = update.learner_state if meta_gradient == "outer" else state
    outer, outer_grads = jax.value_and_grad(
        lambda p: agent.outer_loss(
            tuner.outer_rule, p, rollout, base_state, rng, {}
        )
    )(at.params)
    np.testing.assert_allclose(update.logs["outer_loss"], outer, rtol=1e-12)

    @jax.jit
    def outer_through_update(x):
      moved = state.replace(
          rule_state=tuner.with_meta_variables(state.rule_state, x)
      )
      params = agent.learner_update(rng, rollout, moved, {}).learner_state
      return sum(
          jnp.vdot(g, p)
          for g, p in zip(
              jax.tree.leaves(outer_grads),
              jax.tree.leaves(params.params),
              strict=True,
          )
      )

    h = 1e-4
    for name in tuner.tuned:
      up = outer_through_update(dict(x, **{name: x[name] + h}))
      down = outer_through_update(dict(x, **{name: x[name] - h}))
      finite_difference = (up - down) / (2 * h)
      logged = update.logs[self_tuning.GRADIENT_PREFIX + name]
      assert abs(finite_difference) > 1e-10, name  # a gradient to compare
      np.testing.assert_allclose(
          logged, finite_difference, rtol=1e-4, atol=1e-11, err_msg=name
      )


def _sum_of_squares(params, target):
  return sum(
      jnp.sum(jnp.square(p - t))
      for p, t in zip(
          jax.tree.leaves(params), jax.tree.leaves(target), strict=True
      )
  )


def test_bmg_meta_gradient_matches_a_direct_gradient():
  """With ``meta_gradient="bmg"``, the squared distance and two target
  steps, the logged meta-gradient equals ``jax.grad`` over ``x`` of the
  distance from the inner update's parameters to the target, rebuilt here
  from the agent's public steps (an inner-rule update, then the optimiser on
  the outer loss's gradient) and held constant, in float64."""
  with jax.enable_x64(True):
    agent, state = _agent(
        _settings(
            "stac",
            learning_rate=0.1,
            anneal_learning_rate=False,
            rule_kwargs=dict(
                categorical_value=False,
                meta_gradient="bmg",
                bmg_target_steps=2,
                bmg_distance="squared",
            ),
        )
    )
    tuner = agent.rule
    state = _as_float64(state)
    rollout = _as_float64(_rollout(agent, state.params, seed=1))
    rng = jax.random.PRNGKey(2)
    step = jax.jit(agent.learner_update)
    update = step(rng, rollout, state, {})
    x = tuner.meta_variables(state.rule_state)

    def with_x(learner_state, x):
      return learner_state.replace(
          rule_state=tuner.with_meta_variables(learner_state.rule_state, x)
      )

    # The target: one more inner-rule update (its meta step's x dropped),
    # then one optimiser step on the outer loss's gradient.
    target = step(
        jax.random.fold_in(rng, 0), rollout, with_x(update.learner_state, x), {}
    ).learner_state
    _, outer_grads = self_tuning_step.outer_value_and_grad(
        agent, rng, rollout, target.params, target.rule_state, {}
    )
    target, _ = agent.apply_gradients(target, outer_grads, target.rule_state)

    @jax.jit
    def distance_through_update(x):
      params = agent.learner_update(
          rng, rollout, with_x(state, x), {}
      ).learner_state.params
      return _sum_of_squares(params, target.params)

    direct = jax.grad(distance_through_update)(x)
    np.testing.assert_allclose(
        update.logs["bmg_distance"], distance_through_update(x), rtol=1e-10
    )
    assert "outer_loss" not in update.logs
    for name in tuner.tuned:
      logged = update.logs[self_tuning.GRADIENT_PREFIX + name]
      assert abs(direct[name]) > 1e-10, name  # a gradient to compare
      np.testing.assert_allclose(
          logged, direct[name], rtol=1e-8, atol=1e-14, err_msg=name
      )


@pytest.mark.parametrize("meta_gradient", ["bmg", "linearized"])
def test_the_meta_gradient_option_changes_the_meta_gradient_only(
    meta_gradient,
):
  """A bmg (KL distance) or linearised step updates the network as an outer
  step does, bit for bit; its meta-gradients, and so the tuned values,
  differ."""
  runs = []
  for option in ("outer", meta_gradient):
    agent, state = _agent(
        _settings(
            "stac",
            learning_rate=0.1,
            rule_kwargs=dict(meta_gradient=option, bmg_target_steps=3),
        )
    )
    update = jax.jit(agent.learner_update)(
        jax.random.PRNGKey(1), _rollout(agent, state.params, 1), state, {}
    )
    runs.append(update)
  outer, other = runs
  jax.tree.map(
      np.testing.assert_array_equal,
      outer.learner_state.params,
      other.learner_state.params,
  )
  if meta_gradient == "bmg":
    distance = other.logs["bmg_distance"]
    assert np.isfinite(distance) and distance > 0
  for name in agent.rule.tuned:
    key = self_tuning.GRADIENT_PREFIX + name
    assert np.isfinite(other.logs[key]), name
    assert other.logs[key] != outer.logs[key], name


@pytest.mark.parametrize(
    "rule, default", [("stac", 1e-3), ("self_tuning_ppo", 3e-3)]
)
def test_each_rule_has_its_own_default_meta_learning_rate(rule, default):
  """STAC's 1e-3 for ``stac``; ``self_tuning_ppo``'s own; a given value
  wins, in the rule's settings and in the rule built from them."""
  settings = registry.default_settings(rule)
  assert settings.rule_kwargs["meta_learning_rate"] == default
  assert registry.make_rule(settings).meta_learning_rate == default
  given = settings.replace(
      rule_kwargs={**settings.rule_kwargs, "meta_learning_rate": 5e-4}
  )
  assert registry.make_rule(given).meta_learning_rate == 5e-4


def test_bounded_values_start_exactly_and_stay_inside():
  start = jnp.asarray(2.5, jnp.float32)
  assert self_tuning.bounded(start, start, 0.997, 0.0, 1.0) == jnp.float32(
      0.997
  )
  for x in (-1e4, -30.0, 30.0, 1e4):
    value = self_tuning.bounded(jnp.asarray(x), start, 0.5, 0.1, 2.0)
    assert 0.1 <= value <= 2.0


def test_hyper_params_stay_in_bounds_with_a_large_meta_learning_rate():
  agent, state = _agent(
      _settings(
          "stac",
          learning_rate=0.1,
          rule_kwargs=dict(categorical_value=False, meta_learning_rate=10.0),
      )
  )
  step = jax.jit(agent.learner_update)
  bounds = agent.rule.bounds
  moved = set()
  for i in range(12):
    update = step(
        jax.random.PRNGKey(i), _rollout(agent, state.params, i), state, {}
    )
    state = update.learner_state
    for name, value in agent.rule.values(state.rule_state).items():
      low, high = bounds[name]
      assert low <= value <= high, (name, value)
      if abs(value - agent.rule.hyper_params[name]) > 0.2 * (high - low):
        moved.add(name)
  assert moved  # the large steps reached far into the bounds


# ------------------------------------------------ zero meta learning rate ----


@pytest.mark.xla_optimized
@pytest.mark.parametrize("step_size", [False, True])
@pytest.mark.parametrize(
    "rule, base_rule", [("stac", "actor_critic"), ("self_tuning_ppo", "ppo")]
)
def test_zero_meta_learning_rate_trains_as_the_base_rule(
    rule, base_rule, step_size
):
  """Bit for bit, after several learner steps from the same seeds (a scalar
  value head: XLA compiles a categorical head's expectation over its bins with
  another rounding once the meta-gradient shares the program). With the step
  size tuned (the default), the parameters match to a float32 rounding: its
  factor, though 1, splits the fused multiply-add that ends the base rule's
  Adam step."""
  kwargs = dict(learning_rate=0.1, anneal_learning_rate=False)
  scalar = dict(categorical_value=False) if rule == "stac" else {}
  tuned = registry.get_entry(rule).make.default_tuned
  if not step_size:
    tuned = tuple(t for t in tuned if t != self_tuning.STEP_SIZE)
  runs = []
  for name, rule_kwargs in (
      (base_rule, scalar),
      (rule, dict(scalar, meta_learning_rate=0.0, tuned=tuned)),
  ):
    agent, state = _agent(_settings(name, rule_kwargs=rule_kwargs, **kwargs))
    step = jax.jit(agent.learner_step, static_argnums=4)
    for i in range(3):
      rollout = _rollout(agent, state.params, i)
      state, logs = step(jax.random.PRNGKey(i), rollout, state, {}, False)
    runs.append((state, logs))
  (base_state, base_logs), (state, logs) = runs
  assert (self_tuning.STEP_SIZE in agent.rule.tuned) == step_size
  same = (
      functools.partial(np.testing.assert_allclose, rtol=1e-6, atol=0)
      if step_size
      else np.testing.assert_array_equal
  )
  jax.tree.map(
      same,
      (base_state.params, base_state.opt_state),
      (state.params, state.opt_state),
  )
  for key, value in base_logs.items():
    np.testing.assert_array_equal(logs[key], value, err_msg=key)
  tuned = agent.rule.values(state.rule_state)
  for name, value in tuned.items():
    assert value == np.float32(agent.rule.hyper_params[name])
    assert logs[self_tuning.LOG_PREFIX + name] == value
    assert logs[self_tuning.GRADIENT_PREFIX + name] != 0


# ------------------------------------------------------------ settings ----


@pytest.mark.parametrize(
    "rule_kwargs, match",
    [
        (dict(tuned=("discount_factor", "bogus")), "['bogus'] cannot be tuned"),
        (dict(tuned=()), "tuned is empty"),
        (dict(bounds=dict(bogus=(0, 1))), "bounds.bogus: not a tunable"),
        (dict(bounds=dict(entropy_cost=(0.5, 0.1))), "low < high"),
        (dict(bounds=dict(discount_factor=(0.5, 1.5))), "within [0.0, 1.0]"),
        (
            dict(bounds=dict(entropy_cost=(0.3, 0.5))),
            "must contain the initial value hyper_params.entropy_cost=0.2",
        ),
        (dict(outer_hyper_params=dict(bogus=1.0)), "unknown ['bogus']"),
        (dict(outer_hyper_params=dict(td_lambda=2.0)), "td_lambda=2.0"),
        (dict(meta_learning_rate=-1.0), "meta_learning_rate=-1.0"),
        (dict(meta_gradient="bogus"), "meta_gradient='bogus' is unknown"),
        (dict(meta_gradient="bmg", bmg_target_steps=0), "bmg_target_steps=0"),
        (dict(bmg_target_steps=1.5), "bmg_target_steps=1.5"),
        (dict(bmg_distance="l1"), "bmg_distance='l1' is unknown"),
    ],
)
def test_bad_settings_are_one_line(rule_kwargs, match):
  settings = registry.default_settings("stac")
  settings = settings.replace(
      rule_kwargs={**settings.rule_kwargs, **rule_kwargs}
  )
  with pytest.raises(ValueError) as info:
    registry.make_rule(settings)
  assert match in str(info.value) and "\n" not in str(info.value)


def test_tuned_names_and_bounds_from_the_command_line():
  settings = registry.default_settings("stac")
  rule = registry.make_rule(
      settings.replace(
          rule_kwargs={
              **settings.rule_kwargs,
              "tuned": ("discount_factor, entropy_cost",),
              "bounds": {**settings.rule_kwargs["bounds"], "pg_cost": [0, 3]},
          }
      )
  )
  assert rule.tuned == ("discount_factor", "entropy_cost")
  assert rule.bounds["pg_cost"] == (0.0, 3.0)
  assert rule.outer_rule.hyper_params["discount_factor"] == 0.995
  assert rule.hyper_params["discount_factor"] == 0.997


def test_auto_leaves_a_hyper_parameter_that_starts_on_a_bound():
  settings = registry.default_settings("self_tuning_ppo")
  assert settings.rule_kwargs["tuned"] == "auto"
  rule = registry.make_rule(settings)
  assert rule.tuned == rule.default_tuned
  at_zero = settings.replace(
      hyper_params={**settings.hyper_params, "entropy_cost": 0.0}
  )
  rule = registry.make_rule(at_zero)
  assert "entropy_cost" not in rule.tuned and "value_cost" in rule.tuned
  with pytest.raises(ValueError, match="must contain the initial value"):
    registry.make_rule(
        at_zero.replace(
            rule_kwargs={**at_zero.rule_kwargs, "tuned": ("entropy_cost",)}
        )
    )


def test_launcher_reports_bad_settings_in_one_line_with_status_2(tmp_path):
  out = tmp_path / "run"
  result = launch_process(
      "evaluate",
      [
          *faults.TINY_EVAL_FLAGS,
          "--config.rule=stac",
          "--config.rule_kwargs.bounds.entropy_cost=(0.5, 0.1)",
          f"--config.output_dir={out}",
      ],
      cwd=tmp_path,
  )
  assert_one_line(
      result, 2, "disco-eval", "rule_kwargs.bounds.entropy_cost", "low < high"
  )
  assert not out.exists()


def test_rules_are_listed():
  assert {"stac", "self_tuning_ppo"} <= set(registry.rule_names())
  assert {"stac", "self_tuning_ppo"} <= set(registry.continuous_rule_names())


# --------------------------------------------------------------- runs ----


def _tiny_config(tmp_path, **changes):
  config = evaluation.default_config()
  config.update(
      dict(
          output_dir=str(tmp_path / "run"),
          num_seeds=1,
          num_envs=2,
          rollout_len=5,
      ),
      **changes,
  )
  return config


@pytest.mark.parametrize(
    "rule, env, changes",
    [
        (
            "stac",
            "catch",
            dict(
                total_env_steps=200,
                batch_size=4,
                replay_capacity=16,
                min_replay_size=4,
                num_seeds=2,
            ),
        ),
        (
            "self_tuning_ppo",
            "gymnax/Pendulum-v1",
            dict(
                total_env_steps=40,
                batch_size=2,
                update_epochs=1,
                num_minibatches=2,
            ),
        ),
    ],
)
def test_runs_write_the_hyper_parameter_columns(tmp_path, rule, env, changes):
  config = _tiny_config(tmp_path, **changes)
  config.rule = rule
  config.env = env
  config.env_settings = dict(rows=5, columns=5) if env == "catch" else {}
  config.preset = "none"  # the registered settings: every default tuned
  evaluation.evaluate(config, log=lambda _: None, progress=False)
  metrics = analysis.read_metrics_csv(tmp_path / "run" / "metrics.csv")
  rule_obj = registry.make_rule(registry.default_settings(rule))
  for name in rule_obj.tuned:
    values = metrics[f"learner/{self_tuning.LOG_PREFIX}{name}"]
    learned = values[np.isfinite(values)]
    low, high = rule_obj.bounds[name]
    assert learned.size and np.all((low <= learned) & (learned <= high))
    assert np.isfinite(
        metrics[f"learner/{self_tuning.GRADIENT_PREFIX}{name}"][
            np.isfinite(values)
        ]
    ).all()
  assert np.isfinite(metrics["learner/outer_loss"][np.isfinite(values)]).all()
  if rule != "stac":
    return
  # A comparison's report draws how they moved.
  results = results_lib.Results.from_runs(
      [results_lib.load_run(tmp_path / "run")]
  )
  stats = report.write_report(
      results, tmp_path / "report", report.ReportSettings(reps=20)
  )
  figure = f"hyper_params_{report.file_name(results.envs[0])}.png"
  assert figure in stats["figures"]
  assert (tmp_path / "report" / figure).is_file()
