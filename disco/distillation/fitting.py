"""Fitting a student meta-network to a teacher's targets, and measuring their
agreement.

On one sample (``dataset.Shard``: a learner batch with the agent's parameters
and rule state) the teacher rebuilds its meta-network inputs as in a learner
step; teacher and student give targets ``pi [T, B, A]``, ``y``, ``z [T, B, P]``
from them. The loss is the KL from the teacher's targets to the student's, per
head the student learns (``Disco.target_heads``), averaged over the loss
``mask`` and weighted by ``pi_cost``, ``y_cost``, ``z_cost``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from disco import ops
from disco.distillation import dataset as dataset_lib
from disco.networks import meta_nets
from disco.update_rules import base
from disco.update_rules import disco as disco_rule


@dataclasses.dataclass(frozen=True)
class Pair:
  """A teacher and a student rule on one shard's agent.

  Attributes:
    shard: the samples and the teacher's plan (agent, rule).
    teacher_params: the teacher's meta-parameters.
    student: the student rule (the teacher's rule with another meta-net).
  """

  shard: dataset_lib.Shard
  teacher_params: Any
  student: disco_rule.Disco

  @property
  def teacher(self) -> disco_rule.Disco:
    return self.shard.plan.agent.rule

  @property
  def heads(self) -> tuple[str, ...]:
    """The targets compared: those the student's agent learns."""
    return self.student.target_heads


def targets(
    pair: Pair,
    sample: Mapping[str, Any],
    student_params: Any,
    student_rnn_state: Any = None,
) -> tuple[dict[str, jax.Array], dict[str, jax.Array], jax.Array]:
  """``(teacher_out, student_out, mask [T, B])`` on one ``sample`` (no leading
  axis), each with the heads ``pair.heads`` (``pi [T, B, A]``, ``y``,
  ``z [T, B, P]``); ``student_rnn_state`` defaults to the student's initial one.
  """
  agent = pair.shard.plan.agent
  rule_state = sample["rule_state"]
  rollout = sample["batch"]
  agent_out = agent.unroll(sample["params"], rollout.observations)
  inputs = agent.rule_inputs(agent_out, rollout)
  context = base.LearnerContext(
      meta_params=pair.teacher_params,
      params=sample["params"],
      rule_state=rule_state,
      unroll_fn=agent.unroll,
      rng=jax.random.PRNGKey(0),
      axis_name=None,
  )
  meta_inputs, _, _ = pair.teacher.meta_net_inputs(inputs, context)
  meta_inputs = jax.lax.stop_gradient(meta_inputs)
  teacher_out, _ = pair.teacher.apply_meta_net(
      pair.teacher_params, rule_state["rnn_state"], meta_inputs
  )
  if student_rnn_state is None:
    student_rnn_state = _initial_rnn_state(pair.student)
  student_out, _ = pair.student.apply_meta_net(
      student_params,
      student_rnn_state,
      _with_lifetime(pair, meta_inputs, sample["learner_steps"]),
  )
  teacher_out = {k: jax.lax.stop_gradient(teacher_out[k]) for k in pair.heads}
  return teacher_out, {k: student_out[k] for k in pair.heads}, inputs.mask


def _initial_rnn_state(student: disco_rule.Disco):
  state = jax.eval_shape(student.init_rule_state, jax.random.PRNGKey(0), {})[
      "rnn_state"
  ]
  return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), state)


def _with_lifetime(pair: Pair, meta_inputs, learner_steps):
  """``meta_inputs`` with the student's lifetime entry (n / N, log N) where
  it reads one."""
  if not pair.student.lifetime_conditioning:
    return meta_inputs
  lifetime = pair.student.lifetime_inputs(
      dict(num_updates=learner_steps, lifetime=float(pair.shard.lifetime))
  )
  lead = meta_inputs.rewards.shape
  extra = dict(meta_inputs.extra_from_rule)
  extra[meta_nets.LIFETIME_KEY] = jnp.broadcast_to(lifetime, lead + (2,))
  return meta_inputs.replace(extra_from_rule=extra)


def _masked_mean(x: jax.Array, mask: jax.Array) -> jax.Array:
  return jnp.sum(x * mask) / (jnp.sum(mask) + 1e-8)


def head_kls(
    teacher_out: Mapping[str, jax.Array],
    student_out: Mapping[str, jax.Array],
    mask: jax.Array,
) -> dict[str, jax.Array]:
  """``{head: mean KL(teacher || student)}`` over the ``mask``ed transitions,
  per head of ``student_out``."""
  return {
      k: _masked_mean(ops.categorical_kl(teacher_out[k], student_out[k]), mask)
      for k in student_out
  }


def sample_loss(
    pair: Pair,
    costs: Mapping[str, float],
    student_params: Any,
    sample: Mapping[str, Any],
    student_rnn_state: Any = None,
) -> tuple[jax.Array, dict[str, jax.Array]]:
  """The distillation loss of one sample and its per-head KLs."""
  kls = head_kls(*targets(pair, sample, student_params, student_rnn_state))
  loss = sum(costs[f"{k}_cost"] * kls[k] for k in kls)
  return loss, kls


def _index(tree, i):
  return jax.tree.map(lambda x: x[i], tree)


def fit(
    pairs: Sequence[Pair],
    init_params: Any,
    fit_settings,
    on_log: Callable[[int, dict[str, float]], None] | None = None,
) -> tuple[Any, list[dict[str, float]]]:
  """Adam on the student's meta-parameters; each step averages the loss of one
  random sample of every pair's shard.

  Returns:
    The student's meta-parameters, and per ``log_every`` steps the mean loss and
      KLs (``{step, loss, pi_kl, y_kl[, z_kl]}``).
  """
  heads = pairs[0].heads
  costs = {f"{k}_cost": getattr(fit_settings, f"{k}_cost") for k in heads}
  optimizer = optax.chain(
      optax.clip_by_global_norm(fit_settings.max_grad_norm),
      optax.adam(fit_settings.learning_rate),
  )
  data = [jax.device_put(p.shard.samples) for p in pairs]
  sizes = [p.shard.num_samples for p in pairs]

  def loss_fn(params, data, rng):
    keys = jax.random.split(rng, len(pairs))
    total, kls = 0.0, {k: 0.0 for k in heads}
    for pair, samples, size, key in zip(pairs, data, sizes, keys, strict=True):
      i = jax.random.randint(key, [], 0, size)
      loss, logs = sample_loss(pair, costs, params, _index(samples, i))
      total += loss / len(pairs)
      kls = {k: kls[k] + logs[k] / len(pairs) for k in heads}
    return total, kls

  def chunk(carry, data):
    def step(carry, _):
      params, opt_state, rng = carry
      rng, key = jax.random.split(rng)
      (loss, kls), grads = jax.value_and_grad(loss_fn, has_aux=True)(
          params, data, key
      )
      updates, opt_state = optimizer.update(grads, opt_state, params)
      params = optax.apply_updates(params, updates)
      return (params, opt_state, rng), dict(loss=loss, **kls)

    carry, logs = jax.lax.scan(step, carry, None, fit_settings.log_every)
    return carry, jax.tree.map(jnp.mean, logs)

  chunk = jax.jit(chunk)
  (seed,) = ops.prng_seeds([fit_settings.seed])
  carry = jax.jit(
      lambda params, seed: (
          params,
          optimizer.init(params),
          jax.random.PRNGKey(seed),
      )
  )(init_params, seed)
  history = []
  num_chunks = -(-fit_settings.steps // fit_settings.log_every)
  for n in range(1, num_chunks + 1):
    carry, logs = chunk(carry, data)
    row = dict(
        step=n * fit_settings.log_every,
        loss=float(logs["loss"]),
        **{f"{k}_kl": float(logs[k]) for k in heads},
    )
    history.append(row)
    if on_log is not None:
      on_log(n, row)
  return carry[0], history


def agreement(
    pair: Pair, students: Mapping[str, Any]
) -> dict[str, dict[str, float]]:
  """How close each student's targets (``students``: name -> meta-parameters of
  one network) are to the teacher's over every sample of the shard: the mean KL
  per head (``pi_kl``, ``y_kl``, ``z_kl``) and the share of transitions where
  both policy targets rank the same action first (``pi_top1``)."""

  @jax.jit
  def one(params, sample):
    teacher_out, student_out, mask = targets(pair, sample, params)
    kls = head_kls(teacher_out, student_out, mask)
    same = jnp.argmax(teacher_out["pi"], -1) == jnp.argmax(
        student_out["pi"], -1
    )
    return dict(**kls, pi_top1=_masked_mean(same.astype(jnp.float32), mask))

  out = {}
  for name, params in students.items():
    rows = [
        jax.device_get(one(params, _index(pair.shard.samples, i)))
        for i in range(pair.shard.num_samples)
    ]
    means = {k: float(np.mean([r[k] for r in rows])) for k in rows[0]}
    out[name] = {f"{k}_kl" if k in pair.heads else k: means[k] for k in means}
  return out
