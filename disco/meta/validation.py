"""Meta-validation: train fresh agents with the current meta-parameters on
held-out environments, score them, and keep the best rule.

A meta-training run (``disco-meta-train``, ``config.validation``) or a
process following its checkpoints (``disco-validate RUN_DIR --follow``)
validates meta-parameters like this: on every held-out environment, agents
of ``num_seeds`` seeds are trained from scratch for ``total_env_steps`` by
the ``disco-eval`` loop (``disco.launch.evaluate``: ``build`` once per
environment, so its loop compiles once; the meta-parameters are an argument
of the compiled program, never a constant); each seed's final return (the
mean of its last ``last_episodes`` episodes) is normalised as
``disco-compare`` normalises it (``disco.environments.reference_scores``: 0
is the uniform random policy, 1 the reference), and the aggregate score of
the meta-parameters is the interquartile mean of all ``seeds x environments``
normalised scores (``disco.scoring.aggregates.iqm``, disco-compare's
headline aggregate; NaN if a seed diverged or finished no episode).

The run folder gets (``Record``):

* ``validation.csv``: one row per meta-step, environment and seed:
  ``meta_step, env, seed, return, normalized_score, aggregate`` (rewritten
  whole and atomically at every validation, so a kill never leaves half a
  row);
* ``validation.png``: the aggregate and every environment's mean normalised
  score against the meta-step;
* ``best_meta_params.npz``: the meta-parameters with the best aggregate so
  far, in the format of ``meta_params.npz`` (``disco-eval
  --config.rule=<run>/best_meta_params.npz``), its metadata adding
  ``validation_score`` and ``validation_envs``;
* ``validation.json``: the validation settings the rows were made with,
  and the files the held-out environments read (an XLand ruleset file) by
  SHA-256 digest (a later validation with other settings, or with such a file
  changed at the same path, is refused rather than mixed in).

A meta-step that ``validation.csv`` already holds is never validated again:
a resumed run (which repeats the meta-steps after its checkpoint bit for bit)
neither loses nor duplicates rows, and the best rule survives a kill (it is
written before the rows that name it). Writers take a file lock, so a
follower and the run itself may validate the same folder.

Validation only reads the meta-parameters: the meta-training computation is
the same with and without it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
import dataclasses
import math
from pathlib import Path
from typing import Any

import jax
from ml_collections import config_dict
import numpy as np

from disco import errors
from disco import evaluation
from disco.environments import reference_scores
from disco.meta import validation_record as record_lib
from disco.meta import validation_settings
from disco.scoring import aggregates
from disco.scoring import normalization
from disco.training import analysis
from disco.update_rules import agent_settings
from disco.update_rules import resolve

# ----------------------------------------------------------- validating ----


def aggregate_score(normalized: Mapping[str, np.ndarray]) -> float:
  """IQM of every seed's normalised score on every environment (NaN if one
  is not finite: a diverged seed, or one without a finished episode)."""
  scores = np.stack([np.asarray(x, np.float64) for x in normalized.values()])
  if not np.all(np.isfinite(scores)):
    return math.nan
  return aggregates.iqm(scores.T)


class Validator:
  """The held-out environments' ``disco-eval`` plans for one rule, built
  (and checked) once; ``validate`` trains them with given meta-parameters.

  Args:
    settings: the checked validation settings.
    rule_settings: the agent settings of the rule being meta-trained (its
      network, learning rate and rule settings: the validation agents are
      the meta-training agents).
    rule: the rule (whose meta-parameters ``validate`` gets).
    run_dir: the meta-training run's folder.

  Raises:
    UsageError: an environment, loop or budget that cannot run (e.g. fewer
      environment steps than one iteration, or too few for one agent
      update), or an environment without a normalisation reference.
  """

  def __init__(
      self,
      settings: validation_settings.ValidationSettings,
      rule_settings: agent_settings.AgentSettings,
      rule: Any,
      run_dir: Path,
  ):
    self.settings = settings
    self.run_dir = Path(run_dir)
    self.references = normalization.parse_references(settings.references)
    self.plans: dict[str, evaluation.EvalPlan] = {}
    for i, env in enumerate(settings.envs):
      resolved = resolve.ResolvedRule(
          label=f"validation on {env.key}",
          settings=rule_settings,
          rule=rule,
          meta_params=None,
          source="file",
      )
      where = f"config.validation.envs[{i}] ({env.key})"
      try:
        reference_scores.normalize(0.0, env.key, self.references)
      except ValueError as e:
        raise errors.UsageError(
            f"{where}: {errors.one_line(e)} (or give it as "
            "config.validation.references: "
            "'env:random=R,reference=X,source=TEXT')"
        ) from None
      try:
        plan = evaluation.build(
            self._eval_config(env), log=lambda _: None, rule=resolved
        )
      except errors.UsageError as e:
        raise errors.UsageError(f"{where}: {errors.one_line(e)}") from None
      self._check_budget(plan, env, where)
      self.plans[env.key] = plan

  def _eval_config(
      self, env: validation_settings.HeldOutEnv
  ) -> config_dict.ConfigDict:
    s = self.settings
    config = evaluation.default_config()
    with config.unlocked():
      config.env_settings = dict(env.env_settings)
    config.update(
        rule="validation",
        env=env.env,
        total_env_steps=env.total_env_steps,
        num_seeds=s.num_seeds,
        seed=s.seed,
        iterations_per_call=s.iterations_per_call,
        last_episodes=s.last_episodes,
        output_dir=str(self.run_dir),  # nothing is written there
        **s.loop,
    )
    return config

  @staticmethod
  def _check_budget(
      plan: evaluation.EvalPlan, env: validation_settings.HeldOutEnv, where: str
  ) -> None:
    loop = plan.loop_config
    per_iteration = loop.env_steps_per_iteration
    if env.total_env_steps < per_iteration:
      raise errors.UsageError(
          f"{where}: total_env_steps={env.total_env_steps} is fewer than one "
          f"iteration of the loop ({loop.num_envs} envs x "
          f"{loop.rollout_len} steps = {per_iteration}): raise "
          "total_env_steps or shrink the loop (config.validation.num_envs, "
          "rollout_len)."
      )
    if loop.num_updates(plan.iterations) < 1:
      raise errors.UsageError(
          f"{where}: total_env_steps={env.total_env_steps} ends before the "
          f"agents' first update (the replay first needs min_replay_size="
          f"{loop.min_replay_size} trajectories of {loop.num_envs} per "
          "iteration): raise total_env_steps or lower "
          "config.validation.min_replay_size."
      )

  def validate(
      self,
      meta_params: Any,
      meta_step: int,
      progress: bool = False,
      log: Callable[[str], None] = lambda _: None,
  ) -> record_lib.StepResult:
    """Trains fresh agents with ``meta_params`` on every held-out
    environment (every seed at once) and scores them."""
    meta_params = jax.device_get(meta_params)
    returns, normalized = {}, {}
    for key, plan in self.plans.items():
      plan = dataclasses.replace(
          plan, rule=dataclasses.replace(plan.rule, meta_params=meta_params)
      )
      result = evaluation.run(plan, log=log, progress=progress)
      scores = analysis.final_scores(
          result.metrics, self.settings.last_episodes
      )
      returns[key] = scores
      normalized[key] = reference_scores.normalize(scores, key, self.references)
    return record_lib.StepResult(
        meta_step=int(meta_step),
        returns=returns,
        normalized=normalized,
        aggregate=aggregate_score(normalized),
    )


class Validation:
  """A validator and a run folder's record together: what meta-training
  and the follower call."""

  def __init__(self, validator: Validator, record: record_lib.Record):
    self.validator = validator
    self.record = record

  @property
  def settings(self) -> validation_settings.ValidationSettings:
    return self.validator.settings

  def __call__(
      self,
      meta_params: Any,
      meta_step: int,
      log: Callable[[str], None] = print,
      progress: bool = False,
  ) -> record_lib.StepResult | None:
    """Validates and records ``meta_params`` (of ``meta_step``) unless the
    record holds that meta-step already (then returns None)."""
    if meta_step in self.record.validated_steps():
      return None
    meta_params = jax.device_get(meta_params)
    result = self.validator.validate(meta_params, meta_step, progress)
    new_best = self.record.add(result, meta_params)
    log(self.record.describe(result, new_best))
    return result


def summary(record: record_lib.Record) -> dict[str, Any]:
  """The validation part of a run's ``summary.json``."""
  best = record.best()
  return dict(
      csv=str(record.csv_path),
      validated_meta_steps=sorted(record.validated_steps()),
      best_meta_step=None if best is None else best[0],
      best_score=None if best is None else best[1],
      best_meta_params_file=str(record.best_path) if best else None,
  )
