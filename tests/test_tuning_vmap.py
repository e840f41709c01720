"""The tuning grid as one vmapped program (``disco.comparison.vmapped_grid``):
the same per-point returns as separate runs, the fallback for a
hyper-parameter a rule reads outside arithmetic, and the tuning-vs-reported
check of ``disco.comparison.tuning`` (tiny Catch runs)."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

from disco import comparison
from disco import evaluation
from disco.comparison import settings as settings_lib
from disco.comparison import tuning as tuning_lib
from disco.comparison import vmapped_grid
from disco.update_rules import actor_critic
from disco.update_rules import registry

LOOP = dict(
    env="catch",
    env_settings=dict(rows=5, columns=5),
    num_seeds=2,
    seed=10,
    total_env_steps=480,
    num_envs=4,
    rollout_len=6,
    batch_size=4,
    replay_capacity=0,
    min_replay_size=0,
    iterations_per_call=10,
    last_episodes=20,
)


def _plans(rule, points, tmp_path):
  """One ``EvalPlan`` per grid point (``{"learning_rate": x, hyper: y}``)."""
  plans = []
  for i, point in enumerate(points):
    hyper = {k: v for k, v in point.items() if k != "learning_rate"}
    config = evaluation.make_config(
        rule=rule,
        output_dir=str(tmp_path / f"p{i}"),
        hyper_params=hyper,
        **(
            {"learning_rate": point["learning_rate"]}
            if "learning_rate" in point
            else {}
        ),
        **LOOP,
    )
    plans.append(evaluation.build(config, log=lambda _: None))
  return plans


def test_vmapped_grid_equals_separate_runs(tmp_path):
  """Per point, the vmapped grid acts exactly as that point's own run (the same
  episodes and returns); losses and parameters agree to float tolerance, as
  XLA composes the vmapped program's matrix products and sums in another
  order."""
  points = [
      dict(learning_rate=1e-3, entropy_cost=0.01),
      dict(learning_rate=1e-2, entropy_cost=0.01),
      dict(learning_rate=1e-3, entropy_cost=0.2),
  ]
  plans = _plans("actor_critic", points, tmp_path)
  program = vmapped_grid.prepare(plans, ["learning_rate", "entropy_cost"])
  assert isinstance(program, vmapped_grid.GridProgram), program
  vmapped = vmapped_grid.train(program, progress=False)
  losses = []
  for plan, result in zip(plans, vmapped, strict=True):
    alone = evaluation.run(plan, lambda _: None, progress=False)
    for key in ("return_sum", "episodes", "learner_steps"):
      np.testing.assert_array_equal(result.metrics[key], alone.metrics[key])
    np.testing.assert_allclose(
        result.metrics["learner/total_loss"],
        alone.metrics["learner/total_loss"],
        rtol=1e-3,
        atol=1e-5,
    )
    for a, b in zip(
        jax.tree.leaves(result.states.learner.params),
        jax.tree.leaves(alone.states.learner.params),
        strict=True,
    ):
      np.testing.assert_allclose(a, b, atol=1e-4)
    losses.append(result.metrics["learner/total_loss"])
  # The grid's values reached each point.
  assert not np.allclose(losses[0], losses[1])
  assert not np.allclose(losses[0], losses[2])


class _Gated(actor_critic.ActorCritic):
  """Actor-critic with a hyper-parameter read in Python control flow."""

  default_hyper_params = dict(actor_critic.ACTOR_CRITIC_HYPER_PARAMS, gate=1.0)

  def agent_loss(self, inputs, meta_out, backprop):
    loss, logs = super().agent_loss(inputs, meta_out, backprop)
    if self.hyper_params["gate"] > 0:  # a Python branch: not traceable
      loss = 2.0 * loss
    return loss, logs


@pytest.fixture
def gated_rule():
  registry.register_rule(
      "gated_test",
      _Gated,
      dict(learning_rate=5e-4, network=registry.SMALL_NETWORK),
  )
  yield "gated_test"
  registry.unregister_rule("gated_test")


def test_key_read_outside_arithmetic_falls_back(gated_rule, tmp_path):
  """A grid over ``gate`` trains point by point, naming it; the same rule's
  grid over ``entropy_cost`` alone is vmapped."""
  plans = _plans(
      gated_rule,
      [dict(gate=1.0, entropy_cost=0.01), dict(gate=-1.0, entropy_cost=0.2)],
      tmp_path,
  )
  why = vmapped_grid.prepare(plans, ["gate", "entropy_cost"])
  assert isinstance(why, str)
  assert "reads gate outside arithmetic" in why and "entropy_cost" not in why
  plans = _plans(
      gated_rule,
      [dict(entropy_cost=0.01), dict(entropy_cost=0.2)],
      tmp_path,
  )
  program = vmapped_grid.prepare(plans, ["entropy_cost"])
  assert isinstance(program, vmapped_grid.GridProgram), program


def test_other_fallbacks_say_why(tmp_path):
  plans = _plans("actor_critic", [dict(entropy_cost=0.01)], tmp_path)
  assert vmapped_grid.prepare(plans, ["entropy_cost"]) == "one point to train"
  plans = _plans(
      "actor_critic",
      [dict(entropy_cost=0.01), dict(entropy_cost=0.2)],
      tmp_path,
  )
  other = evaluation.build(
      evaluation.make_config(
          rule="actor_critic",
          output_dir=str(tmp_path / "other"),
          hyper_params=dict(entropy_cost=0.3),
          **dict(LOOP, rollout_len=7),
      ),
      log=lambda _: None,
  )
  why = vmapped_grid.prepare([*plans, other], ["entropy_cost"])
  assert why.startswith("the points differ in loop")


def _choice(score, interval):
  point = dict(learning_rate=1e-3)
  return dict(
      rule="actor_critic",
      label="actor_critic-tuned",
      env="catch/5x5",
      point=point,
      score=score,
      interval=interval,
      seeds=[1000, 1001, 1002],
      total_env_steps=480,
      points=[
          dict(
              point=point,
              score=score,
              interval=interval,
              mean_return=score,
              per_seed=[score] * 3,
          )
      ],
      grid=dict(mode="vmapped", why=None, points=1),
  )


def test_tuning_and_reported_scores_that_disagree_warn(tmp_path):
  tuning = np.array([0.90, 0.92, 0.94])
  score, interval = tuning_lib._mean_and_interval(tuning, 0.95)
  agreeing = tuning_lib.reported_check(
      _choice(score, interval), tuning, np.array([0.88, 0.93, 0.95]), 0.95
  )
  assert agreeing["warning"] is None
  assert agreeing["reported"]["score"] == pytest.approx(0.92)
  reported = np.array([0.10, 0.12, 0.11])
  choice = tuning_lib.reported_check(
      _choice(score, interval), reported, reported, 0.95
  )
  assert "do not overlap" in choice["warning"]
  assert "tune on more seeds" in choice["warning"]

  # Both scores and the warning reach report.md, tuning.csv and
  # statistics.json.
  config = settings_lib.make_config(
      rules=("actor_critic",),
      envs=("catch:rows=5,columns=5",),
      num_seeds=3,
      output_dir=str(tmp_path / "cmp"),
      tune=dict(rules=("actor_critic",), grid="learning_rate=(1e-3,)"),
  )
  plan = comparison.build(config)
  (plan.output_dir).mkdir(parents=True)
  (plan.output_dir / "statistics.json").write_text("{}")
  (plan.output_dir / "report.md").write_text("# Report\n")
  tuning_lib.write(plan, [choice], {})
  report = (plan.output_dir / "report.md").read_text()
  assert f"**Warning:** {choice['warning']}" in report
  assert "| 0.920 [" in report and "| 0.110 [" in report
  assert "one vmapped program (1 points)" in report
  csv_text = (plan.output_dir / tuning_lib.TUNING_CSV).read_text()
  assert "reported_score" in csv_text.splitlines()[0]
  saved = json.loads((plan.output_dir / "statistics.json").read_text())
  assert saved["tuning"]["choices"][0]["warning"] == choice["warning"]


def test_three_tuning_seeds_by_default():
  config = settings_lib.make_config(
      rules=("actor_critic",),
      envs=("catch",),
      tune=dict(rules=("actor_critic",), grid="learning_rate=(1e-3,1e-2)"),
  )
  tuning = settings_lib.CompareSettings.from_config(config).tuning
  assert tuning.seeds == (1000, 1001, 1002)
  assert tuning.vmap is True
