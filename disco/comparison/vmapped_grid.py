"""A tuning grid trained as one compiled program: the grid points of one rule
on one environment vmapped over their values (and, within each point, over the
seeds), where only numbers that enter the rule's and optimiser's arithmetic
differ between the points.

``prepare(plans, keys)`` returns a ``GridProgram`` or why the points must train
one by one; ``train`` returns each point's ``evaluation.EvalResult``, as
``evaluation.run`` of that point alone would. The rule, agent and loop are
built inside the traced program with the grid's values as traced scalars, so a
rule that reads one of them in Python control flow, a shape or a check fails to
trace, and its grid trains point by point.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
import dataclasses
import sys
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import tqdm

from disco import errors
from disco import evaluation
from disco import ops
from disco import stopping
from disco import types
from disco.evaluation import plan as eval_plan
from disco.training import analysis
from disco.training import loop as loop_lib
from disco.update_rules import agent_settings as agent_settings_lib
from disco.update_rules import registry as rule_registry

# Agent settings a vmapped grid may vary besides the rule's hyper-parameters.
VMAPPABLE_SETTINGS = ("learning_rate",)
# Errors of building or tracing a program with traced grid values: a value
# read as a Python number (control flow, a shape, a check).
_TRACE_ERRORS = (jax.errors.JAXTypeError, ValueError, errors.UsageError)


def point_values(
    plan: evaluation.EvalPlan, keys: Sequence[str]
) -> dict[str, float]:
  """The values of the grid ``keys`` in ``plan``'s agent settings."""
  settings = plan.rule.settings
  return {
      k: settings.learning_rate
      if k == "learning_rate"
      else settings.hyper_params[k]
      for k in keys
  }


def with_values(
    settings: agent_settings_lib.AgentSettings, values: Mapping[str, Any]
) -> agent_settings_lib.AgentSettings:
  """``settings`` with the grid ``values`` (numbers or traced scalars) set:
  ``learning_rate`` and hyper-parameters."""
  hyper_params = dict(settings.hyper_params)
  learning_rate = settings.learning_rate
  for key, value in values.items():
    if key == "learning_rate":
      learning_rate = value
    else:
      hyper_params[key] = value
  return settings.replace(
      learning_rate=learning_rate, hyper_params=hyper_params
  )


def make_loop(
    plan: evaluation.EvalPlan, values: Mapping[str, Any]
) -> loop_lib.EvalLoop:
  """``plan``'s loop with the grid ``values`` (traced scalars inside a traced
  program): its rule built from the settings as the registry builds it, without
  their checks (``plan``'s are checked), and its agent and loop as
  ``evaluation.build`` makes them."""
  settings = with_values(plan.rule.settings, values)
  rule = rule_registry.get_entry(settings.rule).make(
      hyper_params=dict(settings.hyper_params),
      **agent_settings_lib.thawed(settings.rule_kwargs),
  )
  _, loop = eval_plan.agent_and_loop(
      dataclasses.replace(plan.rule, settings=settings, rule=rule),
      plan.env,
      plan.loop_config,
      plan.iterations,
  )
  return loop


def _programs(
    plan: evaluation.EvalPlan,
) -> tuple[Callable[..., Any], Callable[..., Any]]:
  """Jitted ``init(values, seeds) -> states [P, S]`` and ``run(values, states,
  meta_params) -> (states, metrics {name: [P, S, iterations_per_call]})``,
  vmapped over the points' ``values`` (``{key: [P]}``)."""

  def init_point(values, seeds):
    loop = make_loop(plan, values)
    return jax.vmap(lambda seed: loop.init(jax.random.PRNGKey(seed)))(seeds)

  def run_point(values, states, meta_params):
    return make_loop(plan, values).run_traceable(
        states, meta_params, plan.iterations_per_call
    )

  return (
      jax.jit(jax.vmap(init_point, in_axes=(0, None))),
      jax.jit(jax.vmap(run_point, in_axes=(0, 0, None))),
  )


@dataclasses.dataclass(frozen=True)
class GridProgram:
  """The traced programs of a grid's ``plans`` (one per point, the same but
  for the ``values`` ``{key: [P]}``)."""

  plans: tuple[evaluation.EvalPlan, ...]
  values: dict[str, jax.Array]
  seeds: np.ndarray
  init: Any  # jax.stages.Traced
  run: Any  # jax.stages.Traced


def _trace(
    plan: evaluation.EvalPlan, values: dict[str, jax.Array]
) -> tuple[Any, Any]:
  """``(init, run)`` traced for ``values`` (raises ``_TRACE_ERRORS``)."""
  init, run = _programs(plan)
  seeds = ops.prng_seeds(plan.seeds)
  traced_init = init.trace(values, seeds)
  return traced_init, run.trace(
      values, traced_init.out_info, plan.rule.meta_params
  )


def _differences(
    plans: Sequence[evaluation.EvalPlan], keys: Sequence[str]
) -> list[str]:
  """What differs between ``plans`` besides the grid's values."""

  def parts(plan):
    return dict(
        agent_settings=with_values(
            plan.rule.settings, dict.fromkeys(keys, 0.0)
        ),
        env=(plan.settings.env, plan.env_settings),
        loop=plan.loop_config,
        seeds=tuple(plan.seeds),
        iterations=(plan.iterations_per_call, plan.num_calls),
    )

  first = parts(plans[0])
  out = []
  for plan in plans[1:]:
    out += [k for k, v in parts(plan).items() if v != first[k] and k not in out]
  meta = [jax.tree.map(np.asarray, p.rule.meta_params) for p in plans]
  for other in meta[1:]:
    same = jax.tree.structure(other) == jax.tree.structure(meta[0]) and all(
        a.shape == b.shape and np.array_equal(a, b)
        for a, b in zip(
            jax.tree.leaves(other), jax.tree.leaves(meta[0]), strict=True
        )
    )
    if not same and "meta_params" not in out:
      out.append("meta_params")
  return out


def prepare(
    plans: Sequence[evaluation.EvalPlan], keys: Sequence[str]
) -> GridProgram | str:
  """The grid program of the points ``plans`` (grid ``keys``), or one line
  saying why they train one by one: fewer than two points, several
  processes, a host environment, a key other than ``VMAPPABLE_SETTINGS`` and
  the rule's hyper-parameters, bfloat16 compute (a traced value is not weakly
  typed), settings that differ beyond the grid's values, or a rule that reads
  a grid value outside arithmetic (then naming the keys)."""
  if len(plans) < 2:
    return "one point to train"
  plan = plans[0]
  if jax.process_count() > 1:
    return "it runs on several processes"
  if not plan.env.is_jittable:
    return f"environment {plan.settings.env} runs on the host"
  settings = plan.rule.settings
  other = [
      k
      for k in keys
      if k not in VMAPPABLE_SETTINGS and k not in settings.hyper_params
  ]
  if other:
    return f"grid key(s) {other} change the program, not only its numbers"
  if settings.network.get("compute_dtype", "float32") != "float32":
    return "the network computes in " + settings.network["compute_dtype"]
  differences = _differences(plans, keys)
  if differences:
    return f"the points differ in {', '.join(differences)}"
  values = {
      k: jnp.asarray([point_values(p, keys)[k] for p in plans], jnp.float32)
      for k in keys
  }
  try:
    traced_init, traced_run = _trace(plan, values)
  except _TRACE_ERRORS as e:
    return _untraceable(plan, values, e)
  return GridProgram(
      plans=tuple(plans),
      values=values,
      seeds=ops.prng_seeds(plan.seeds),
      init=traced_init,
      run=traced_run,
  )


def _untraceable(
    plan: evaluation.EvalPlan, values: dict[str, jax.Array], error: Exception
) -> str:
  """Why ``values`` cannot be traced: the keys that fail alone, else
  ``error``."""
  failing = []
  for key in values:
    try:
      _trace(plan, {key: values[key]})
    except _TRACE_ERRORS:
      failing.append(key)
  rule = plan.rule.settings.rule
  if failing:
    return (
        f"rule {rule} reads {', '.join(failing)} outside arithmetic (Python "
        "control flow, a shape or a check)"
    )
  return f"rule {rule} cannot take traced values: {errors.one_line(error)}"


def train(
    program: GridProgram, progress: bool = True
) -> list[evaluation.EvalResult]:
  """Trains every point of ``program``, one compiled call at a time; returns
  each point's result (its seeds' final states and host metrics; its share
  ``1 / P`` of each call's and the whole run's seconds)."""
  plan = program.plans[0]
  num_points = len(program.plans)
  wall_start = time.perf_counter()
  states = program.init.lower().compile()(program.values, program.seeds)
  run = None
  chunks: list[dict[str, np.ndarray]] = []
  call_times: list[float] = []
  steps = plan.iterations_per_call * plan.loop_config.env_steps_per_iteration
  with tqdm.tqdm(
      total=plan.env_steps * num_points,
      unit="step",
      unit_scale=True,
      desc=f"{plan.label} x{num_points} points",
      disable=not progress,
      file=sys.stderr,
      dynamic_ncols=True,
  ) as bar:
    for call in range(plan.num_calls):
      stopping.check_stop(f"before training call {call} of the tuning grid")
      start = time.perf_counter()
      if run is None:
        run = program.run.lower().compile()
      states, metrics = run(program.values, states, plan.rule.meta_params)
      chunks.append(jax.device_get(metrics))
      call_times.append(time.perf_counter() - start)
      bar.update(steps * num_points)
  wall_time = time.perf_counter() - wall_start
  return [
      _point_result(plan, i, states, chunks, call_times, wall_time, num_points)
      for i in range(num_points)
  ]


def _point_result(
    plan: evaluation.EvalPlan,
    i: int,
    states: loop_lib.TrainState,
    chunks: list[dict[str, np.ndarray]],
    call_times: list[float],
    wall_time: float,
    num_points: int,
) -> evaluation.EvalResult:
  """Point ``i``'s ``EvalResult`` from the grid's states ``[P, S, ...]`` and
  each call's metrics ``{name: [P, S, iterations_per_call]}``."""
  mine = analysis.concat_metrics(
      [{k: v[i] for k, v in chunk.items()} for chunk in chunks]
  )
  done = mine["learner_steps"][
      :, plan.iterations_per_call - 1 :: plan.iterations_per_call
  ].sum(axis=0)
  point_states: types.ArrayTree = jax.tree.map(lambda x: x[i], states)
  return evaluation.EvalResult(
      states=point_states,
      metrics=mine,
      call_times=[t / num_points for t in call_times],
      learner_steps_per_call=[int(x) for x in np.diff(done, prepend=0)],
      wall_time=wall_time / num_points,
  )
