"""The ``bmg`` estimator (bootstrapped meta-gradients): its meta-gradient
against a direct computation, its settings, and a tiny run of the launcher.

The direct computation builds the target on its own (the rule's
``learner_update``, the value function's update and the outer loss's
gradient step written out here), treats it as a constant, and differentiates
the distance to the learner after the ``K`` inner updates through those
updates with ``jax.grad``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from disco import errors
from disco.meta import bmg
from disco.meta import history as history_lib
from disco.meta import meta_gradient as meta_gradient_lib
from disco.meta import plan as plan_lib
from disco.meta import run_folder

from meta_settings import TINY_FLAGS
from meta_settings import TINY_LPG
from meta_settings import TINY_LPG_FLAGS
from meta_settings import run_launcher
from meta_settings import tiny_config

INNER_STEPS = 2


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
  """One tiny LPG agent on Catch after its rollouts: the group, its state,
  ``K = 2`` training rollouts, the validation rollout and the key."""
  plan = plan_lib.build(
      tiny_config(
          **TINY_LPG,
          estimator="bmg",
          inner_steps=INNER_STEPS,
          output_dir=str(tmp_path_factory.mktemp("bmg") / "o"),
      )
  )
  group = plan.groups[0]
  population = plan.population
  state = population.init(jax.random.PRNGKey(0), plan.meta_params)
  agent_state = jax.tree.map(lambda x: x[0], state.agents[0])
  _, train, _, valid, _, _ = jax.jit(
      lambda s: population._rollouts(group, s, jax.random.PRNGKey(1))
  )(agent_state)
  return dict(
      plan=plan,
      group=group,
      state=agent_state,
      train=train,
      valid=valid,
      rng=jax.random.PRNGKey(2),
  )


def _estimate(setup, config):
  """The estimator's meta-gradient and meta-logs for ``config``."""
  plan, group = setup["plan"], setup["group"]
  population = bmg.BMGPopulation(
      plan.groups, plan.population.config, config, optax.sgd(1.0)
  )
  grads, (learner, _, _, logs) = jax.jit(
      lambda mp: population._meta_gradient(
          group,
          mp,
          setup["state"],
          setup["train"],
          setup["valid"],
          setup["rng"],
      )
  )(plan.meta_params)
  return grads, learner, logs


def _direct(setup, config):
  """``jax.grad`` of ``mu(target, x_K(w))`` (plus the rule's regulariser) with
  the target built here and held constant; and ``x_K``."""
  plan, group = setup["plan"], setup["group"]
  agent, value_fn = group.agent, group.value_fn
  state, train, valid = setup["state"], setup["train"], setup["valid"]
  outer = plan.population.config.outer
  train_rng, target_rng = jax.random.split(setup["rng"])

  def inner(w):
    return meta_gradient_lib.inner_updates(
        agent,
        value_fn,
        w,
        state.learner,
        state.value,
        train,
        jax.random.split(train_rng, INNER_STEPS),
        max_unrolled=outer.max_unrolled_inner_steps,
    )

  def target(w):
    learner, value_state, _, _ = inner(w)
    rule_steps = config.target_steps
    if config.target_final_step == "outer":
      rule_steps -= 1
    keys = jax.random.split(target_rng, max(rule_steps, 1))
    for n in range(rule_steps):
      logits = agent.unroll(learner.params, valid.observations)["logits"]
      value_state, _ = value_fn.update(value_state, valid, logits)
      learner = agent.learner_update(
          keys[n], valid, learner, w, is_meta_training=True
      ).learner_state
    if config.target_final_step == "outer" and config.target_steps:

      def outer_loss(params):
        logits = agent.unroll(params, valid.observations)["logits"]
        outs = value_fn.value_outs(value_state, valid, logits)[0]
        log_pi = jax.nn.log_softmax(logits[:-1])
        taken = jnp.take_along_axis(log_pi, valid.actions[:-1, :, None], -1)[
            ..., 0
        ]
        entropy = -jnp.sum(jnp.exp(log_pi) * log_pi, -1).mean()
        pg = -jnp.mean(taken * jax.lax.stop_gradient(outs.normalized_adv))
        return pg - outer.entropy_cost * entropy

      grads = jax.grad(outer_loss)(learner.params)
      learner, _ = agent.apply_gradients(learner, grads, learner.rule_state)
    return learner

  fixed = jax.jit(target)(plan.meta_params)
  fixed_logits = agent.unroll(fixed.params, valid.observations)["logits"]

  def loss(w):
    learner, _, _, meta_out = inner(w)
    out = agent.unroll(learner.params, valid.observations)
    if config.distance == "squared":
      diffs = jax.tree.map(jnp.subtract, learner.params, fixed.params)
      mu = sum(jnp.sum(d**2) for d in jax.tree.leaves(diffs))
    else:
      p = jax.nn.softmax(fixed_logits[:-1])
      mu = jnp.sum(
          p
          * (
              jax.nn.log_softmax(fixed_logits[:-1])
              - jax.nn.log_softmax(out["logits"][:-1])
          ),
          -1,
      ).mean()
    reg, _ = agent.rule.meta_regularizer(meta_out, out, valid.actions[:-1])
    return mu + config.rule_regularizer_cost * reg, learner

  grads, learner = jax.jit(jax.grad(loss, has_aux=True))(plan.meta_params)
  return grads, learner


def _norm(tree) -> float:
  return float(optax.tree.norm(tree))


def test_no_target_steps_and_squared_distance_give_zero_gradient(setup):
  """``L = 0``: the target is ``x_K`` itself, so ``||x~ - x_K||^2`` and its
  meta-gradient are exactly zero."""
  config = bmg.BMGConfig(target_steps=0, distance="squared")
  grads, learner, logs = _estimate(setup, config)
  assert float(logs["meta_loss"]) == 0.0
  for leaf in jax.tree.leaves(grads):
    np.testing.assert_array_equal(leaf, 0.0)
  direct, direct_learner = _direct(setup, config)
  assert _norm(direct) == 0.0
  for a, b in zip(
      jax.tree.leaves(learner), jax.tree.leaves(direct_learner), strict=True
  ):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize(
    "config",
    [
        bmg.BMGConfig(
            target_steps=1, target_final_step="rule", distance="squared"
        ),
        bmg.BMGConfig(
            target_steps=2,
            target_final_step="outer",
            distance="kl",
            rule_regularizer_cost=1e-3,
        ),
    ],
    ids=["L1-rule-squared", "L2-outer-kl-regularised"],
)
def test_meta_gradient_is_the_distance_gradient_to_a_constant_target(
    setup, config
):
  grads, _, logs = _estimate(setup, config)
  direct, _ = _direct(setup, config)
  assert float(logs["matching_loss"]) > 0
  assert _norm(direct) > 0
  difference = jax.tree.map(jnp.subtract, grads, direct)
  assert _norm(difference) <= 1e-4 * _norm(direct), (
      _norm(difference),
      _norm(direct),
  )


@pytest.mark.parametrize(
    "values, match",
    [
        (dict(distance="cosine"), "Unknown distance 'cosine'"),
        (dict(target_steps=-1), "target_steps must be an integer >= 0"),
        (dict(target_final_step="adam"), "Unknown target_final_step"),
        (dict(rule_regularizer_cost=-1.0), "rule_regularizer_cost"),
        (dict(horizon=3), "horizon"),
    ],
)
def test_bad_settings_are_usage_errors(values, match, tmp_path):
  config = tiny_config(
      **TINY_LPG, estimator="bmg", output_dir=str(tmp_path / "o")
  )
  config.update(dict(bmg=dict(config.bmg.to_dict(), **values)))
  with pytest.raises(errors.UsageError, match=match):
    plan_lib.build(config)


@pytest.mark.parametrize(
    "flag, match",
    [
        ("--config.bmg.distance=cosine", "Unknown distance 'cosine'"),
        ("--config.bmg.target_steps=-2", "target_steps"),
    ],
)
def test_bad_settings_exit_2_with_one_line(flag, match, tmp_path):
  result = run_launcher(
      [*TINY_FLAGS, "--config.estimator=bmg", flag], cwd=tmp_path
  )
  assert result.returncode == 2, result.stderr[-3000:]
  lines = result.stderr.strip().splitlines()
  assert len(lines) == 1 and "Traceback" not in result.stderr, lines
  assert lines[0].startswith("disco-meta-train: error: "), lines[0]
  assert match in lines[0], lines[0]


def test_tiny_run_writes_its_outputs(tmp_path):
  out = tmp_path / "run"
  result = run_launcher(
      [
          *TINY_FLAGS,
          *TINY_LPG_FLAGS,
          "--config.estimator=bmg",
          "--config.bmg.target_steps=2",
          "--config.num_meta_steps=2",
          f"--config.output_dir={out}",
      ],
      cwd=tmp_path,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  for name in (
      run_folder.CONFIG_FILE,
      run_folder.METRICS_FILE,
      run_folder.META_PARAMS_FILE,
      run_folder.SUMMARY_FILE,
  ):
    assert (out / name).is_file(), name
  history = history_lib.MetricsHistory.read_csv(out / run_folder.METRICS_FILE)
  assert list(history.steps) == [1, 2]
  for column in ("meta_loss", "meta_grad_norm", "catch-5x5/matching_loss"):
    values = history.column(column)
    assert np.all(np.isfinite(values)), column
  assert np.all(history.column("meta_grad_norm") > 0)
  assert history.column("meta_update_skipped").sum() == 0
