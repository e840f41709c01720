"""Parity checks against fixtures computed by the published implementation.

Usage::

    python -m disco.parity FIXTURE.npz [FIXTURE.npz ...] [--weights PATH]

For each fixture it prints its kind, the rule its updated parameters were
checked by, the worst relative error and PASS/FAIL, and exits non-zero on any
failure or unsupported fixture kind. Tolerances (from the fixtures' README),
for every fixture array ``b`` and ours ``a``:

* gradients (``grads::*``: of the learner step's loss with respect to the
  agent parameters, before the optimiser; ``meta_grads::*``), per array:
  ``||a-b|| <= 1e-3 ||b|| + 1e-7``;
* parameters after an update (``params``, ``learner_params``,
  ``value_params``), in a fixture that carries gradients: at least 99% of
  elements within ``1e-4 (1 + max|b|)`` and every element within
  ``2 N lr max_abs_update + 1e-4 (1 + max|b|)``, the most that ``N``
  clipped Adam steps of learning rate ``lr`` can move a weight apart (a
  gradient within rounding of zero may flip the sign of Adam's first,
  normalised step; a wrong gradient fails the bound above instead);
* parameters after an update in a fixture without gradients: 99.9% of
  elements within ``1e-4 (1 + max|b|)``, all within ``1e-2 (1 + max|b|)``;
* everything else (logs, rule state, meta-network outputs):
  ``max|a-b| <= 1e-4 (1 + max|b|)``.

A learner-step fixture without gradients is checked with those of its copy
in a ``grads/`` folder beside it (same name), when that copy holds the same
inputs and outputs.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
import dataclasses
import functools
from pathlib import Path
import sys
from typing import Any
import zlib

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import optax

from disco import agent as agent_lib
from disco import types
from disco import weights as weights_lib
from disco.environments import registry as env_registry
from disco.meta import keys as keys_lib
from disco.meta import meta_gradient
from disco.meta import population as population_lib
from disco.meta import value_function
from disco.networks import meta_nets
from disco.update_rules import registry

SEP = "::"
ATOL_REL = 1e-4
# Updated parameters of fixtures without gradients.
LOOSE_REL = 1e-2
FRACTION = 0.999
# Updated parameters of fixtures with gradients (see the module docstring).
ROBUST_FRACTION = 0.99
# Gradients, by norm.
GRAD_REL = 1e-3
GRAD_ABS = 1e-7
GRADIENT_GROUPS = ("grads", "meta_grads")
UPDATED_GROUPS = ("params", "learner_params", "value_params")
# Where a fixture without gradients finds a copy with them.
GRADS_DIR = "grads"


@dataclasses.dataclass
class Comparison:
  key: str
  error: float  # the worst error relative to the tolerance's scale
  ok: bool


@dataclasses.dataclass
class Report:
  path: str
  kind: str
  comparisons: list[Comparison]
  error: str | None = None  # set when the fixture could not be checked
  # The rule updated parameters were checked by: "gradients" (the
  # rounding-robust one), "99.9%", or "-" (none in the fixture).
  rule: str = "-"

  @property
  def ok(self) -> bool:
    return self.error is None and all(c.ok for c in self.comparisons)

  @property
  def worst(self) -> Comparison | None:
    return max(self.comparisons, key=lambda c: c.error, default=None)


# ---------------------------------------------------------------- trees
def unflatten(flat: dict[str, np.ndarray], prefix: str) -> dict[str, Any]:
  """``{'a::b::c': x}`` -> ``{'a': {'b': {'c': x}}}`` for keys under prefix."""
  out: dict[str, Any] = {}
  for key, value in flat.items():
    if not key.startswith(prefix + SEP):
      continue
    *path, leaf = key[len(prefix) + len(SEP) :].split(SEP)
    node = out
    for p in path:
      node = node.setdefault(p, {})
    node[leaf] = value
  return out


def flatten(tree: Any, prefix: str) -> dict[str, np.ndarray]:
  """Inverse of ``unflatten`` for dicts, named tuples and dataclasses."""
  if isinstance(tree, dict):
    items = tree.items()
  elif hasattr(tree, "_fields"):
    items = ((f, getattr(tree, f)) for f in tree._fields)
  elif dataclasses.is_dataclass(tree):
    items = ((f.name, getattr(tree, f.name)) for f in dataclasses.fields(tree))
  else:
    return {prefix: np.asarray(tree)}
  out = {}
  for k, v in items:
    out.update(flatten(v, f"{prefix}{SEP}{k}"))
  return out


def _lstm_state(tree: dict[str, np.ndarray]) -> hk.LSTMState:
  return hk.LSTMState(
      hidden=jnp.asarray(tree["hidden"]), cell=jnp.asarray(tree["cell"])
  )


def _ema_state(tree: dict[str, np.ndarray]) -> types.EmaState:
  return types.EmaState(**{k: jnp.asarray(v) for k, v in tree.items()})


# ------------------------------------------------------------ comparisons
def _as_f64(ours, ref) -> tuple[np.ndarray, np.ndarray]:
  return np.asarray(ours, np.float64), np.asarray(ref, np.float64)


def _shape_mismatch(key: str, ours, ref) -> Comparison | None:
  if ours.shape == ref.shape:
    return None
  return Comparison(
      f"{key} (shape {ours.shape} != {ref.shape})", float("inf"), False
  )


def compare_array(
    key: str,
    ours: np.ndarray,
    ref: np.ndarray,
    updated_params: bool = False,
    max_step: float | None = None,
) -> Comparison:
  """Max-abs comparison scaled by ``1 + max|ref|``.

  With ``updated_params``: the 99.9% rule, or with ``max_step`` (the most
  the updates can move a weight apart, ``2 N lr max_abs_update``) the
  rounding-robust one; see the module docstring.
  """
  ours, ref = _as_f64(ours, ref)
  if (bad := _shape_mismatch(key, ours, ref)) is not None:
    return bad
  scale = 1.0 + (np.abs(ref).max() if ref.size else 0.0)
  diff = np.abs(ours - ref)
  worst = float(diff.max() / scale) if diff.size else 0.0
  if not updated_params:
    return Comparison(key, worst, bool(worst <= ATOL_REL))
  within = np.mean(diff <= ATOL_REL * scale) if diff.size else 1.0
  if max_step is None:
    ok = within >= FRACTION and worst <= LOOSE_REL
  else:
    bound = max_step + ATOL_REL * scale
    ok = within >= ROBUST_FRACTION and (diff.max() if diff.size else 0) <= bound
  return Comparison(key, worst, bool(ok))


def compare_gradient(key: str, ours: np.ndarray, ref: np.ndarray) -> Comparison:
  ours, ref = _as_f64(ours, ref)
  if (bad := _shape_mismatch(key, ours, ref)) is not None:
    return bad
  err = np.linalg.norm(ours - ref)
  ref_norm = np.linalg.norm(ref)
  return Comparison(
      key,
      float(err / (ref_norm + 1e-12)),
      bool(err <= GRAD_REL * ref_norm + GRAD_ABS),
  )


def has_gradients(fixture: dict[str, np.ndarray]) -> bool:
  """Whether the fixture carries gradients (``grads::*``, ``meta_grads::*``)."""
  return any(
      k.startswith(f"outputs{SEP}{g}{SEP}")
      for k in fixture
      for g in GRADIENT_GROUPS
  )


def compare_outputs(
    ours: dict[str, np.ndarray],
    fixture: dict[str, np.ndarray],
    max_steps: dict[str, float] | None = None,
) -> list[Comparison]:
  """Compares every ``outputs::`` array of the fixture with ours.

  ``max_steps``: for each group of updated parameters (``UPDATED_GROUPS``),
  the most its updates can move a weight apart; given, those groups are
  checked by the rounding-robust rule, else by the 99.9% rule.
  """
  results = []
  for key in sorted(k for k in fixture if k.startswith("outputs" + SEP)):
    name = key[len("outputs" + SEP) :]
    if name not in ours:
      results.append(Comparison(f"{name} (missing)", float("inf"), False))
      continue
    group = name.split(SEP)[0]
    if group in GRADIENT_GROUPS:
      results.append(compare_gradient(name, ours[name], fixture[key]))
    elif group in UPDATED_GROUPS:
      max_step = None if max_steps is None else max_steps[group]
      results.append(
          compare_array(name, ours[name], fixture[key], True, max_step)
      )
    else:
      results.append(compare_array(name, ours[name], fixture[key]))
  return results


def _max_step(num_steps: int, learning_rate: float, max_abs_update: float):
  """How far ``num_steps`` clipped updates can move a weight apart."""
  return 2.0 * num_steps * learning_rate * max_abs_update


# --------------------------------------------------------------- runners
# A runner returns our outputs (flat, keys start with '::') and, for each
# group of updated parameters, the most its updates can move a weight apart.
RunnerOutput = tuple[dict[str, np.ndarray], dict[str, float]]


def _run_meta_net(fx: dict[str, np.ndarray], meta_params) -> RunnerOutput:
  inputs_tree = unflatten(fx, "inputs")
  inputs = types.UpdateRuleInputs(
      observations=None,
      actions=inputs_tree["actions"],
      rewards=inputs_tree["rewards"],
      is_terminal=inputs_tree["is_terminal"],
      agent_out=inputs_tree["agent_out"],
      behaviour_agent_out=inputs_tree["behaviour_agent_out"],
      extra_from_rule=inputs_tree["extra_from_rule"],
  )
  net = meta_nets.make_meta_net(meta_nets.MetaNetConfig())
  state = {
      "lstm": {"meta_rnn_state": _lstm_state(inputs_tree["meta_rnn_state"])}
  }
  out, new_state = jax.jit(net.apply)(meta_params, state, None, inputs)
  ours = {k: out[k] for k in ("pi", "y", "z", "meta_input_emb")}
  ours["meta_rnn_state"] = new_state["lstm"]["meta_rnn_state"]
  return flatten(ours, ""), {}


def _rollout_from(
    tree: dict[str, Any], agent_outs: str = "agent_outs", logits: str = "logits"
) -> types.ActorRollout:
  return types.ActorRollout(
      observations=jnp.asarray(tree["observations"]),
      actions=jnp.asarray(tree["actions"]),
      rewards=jnp.asarray(tree["rewards"]),
      # The published rollouts mark LAST steps with discount False; every
      # episode end in the fixtures is a termination.
      step_types=jnp.where(tree["discounts"], types.MID, types.LAST),
      discounts=jnp.asarray(tree["discounts"], jnp.float32),
      agent_outs=jax.tree.map(jnp.asarray, tree[agent_outs]),
      logits=jnp.asarray(tree[logits]),
  )


def _params_with_adam(
    optimizer: optax.GradientTransformation,
    name: str,
    inputs: dict[str, Any],
    fx: dict[str, np.ndarray],
) -> dict[str, Any]:
  """``params`` (the fixture's ``{name}_params``) and ``opt_state``:
  ``optimizer``'s state with Adam's moments from the fixture."""
  params = jax.tree.map(jnp.asarray, inputs[f"{name}_params"])
  prefix = f"{name}_opt_state"
  adam = optax.ScaleByAdamState(
      count=jnp.asarray(fx[f"inputs{SEP}{prefix}_count"]),
      mu=jax.tree.map(jnp.asarray, inputs[f"{prefix}_mu"]),
      nu=jax.tree.map(jnp.asarray, inputs[f"{prefix}_nu"]),
  )
  state = optimizer.init(params)
  return dict(params=params, opt_state=(adam,) + tuple(state[1:]))


def _rule_state_from(tree: dict[str, Any]) -> dict[str, Any]:
  state = {}
  for key, value in tree.items():
    if key.endswith("ema_state"):
      state[key] = _ema_state(value)
    elif key == "rnn_state":
      state[key] = {
          m: {"meta_rnn_state": _lstm_state(v["meta_rnn_state"])}
          for m, v in value.items()
      }
    else:
      state[key] = jax.tree.map(jnp.asarray, value)
  return state


def _run_learner_step(
    fx: dict[str, np.ndarray], meta_params, rule: str
) -> RunnerOutput:
  settings = registry.default_settings(rule)
  settings.learning_rate = float(fx["learning_rate"])
  settings.loss_mask = "published"
  inputs = unflatten(fx, "inputs")
  rollout = _rollout_from(inputs, "behaviour_agent_outs", "behaviour_logits")
  agent = agent_lib.make_agent(settings, num_actions=rollout.logits.shape[-1])
  params = jax.tree.map(jnp.asarray, inputs["params"])
  state = types.LearnerState(
      params=params,
      opt_state=agent.optimizer.init(params),
      rule_state=_rule_state_from(inputs["meta_state"]),
  )

  @jax.jit
  def step(rng, rollout, state, meta_params):
    update = agent.learner_update(rng, rollout, state, meta_params)
    return update.learner_state, update.logs, update.grads

  new_state, logs, grads = step(
      jax.random.PRNGKey(0),
      rollout,
      state,
      meta_params if rule == "disco" else {},
  )
  # The fixtures name the rule state ``meta_state``, as the published code.
  ours = dict(
      params=new_state.params,
      meta_state=new_state.rule_state,
      logs=logs,
      grads=grads,
  )
  max_step = _max_step(1, settings.learning_rate, settings.max_abs_update)
  return flatten(ours, ""), dict(params=max_step)


def _run_meta_gradient(
    fx: dict[str, np.ndarray],
    meta_params,
    config: meta_gradient.OuterLossConfig = meta_gradient.OuterLossConfig(),
) -> RunnerOutput:
  del meta_params  # The fixture carries its own.
  inputs = unflatten(fx, "inputs")
  settings = registry.default_settings("disco")
  settings.loss_mask = "published"
  settings.learning_rate = 5e-4
  settings.network.model_lstm_size = 256
  settings.network.model_head_hiddens = (256,)
  train = _rollout_from(inputs["train_rollouts"])
  valid = _rollout_from(inputs["valid_rollout"])
  agent = agent_lib.make_agent(settings, num_actions=train.logits.shape[-1])
  value_fn = value_function.ValueFunction(value_function.ValueFnConfig())
  learner = types.LearnerState(
      **_params_with_adam(agent.optimizer, "learner", inputs, fx),
      rule_state=_rule_state_from(inputs["meta_state"]),
  )
  value_state = value_function.ValueState(
      **_params_with_adam(value_fn._optimizer, "value", inputs, fx),
      adv_ema_state=_ema_state(inputs["value_adv_ema_state"]),
      td_ema_state=_ema_state(inputs["value_td_ema_state"]),
  )
  fn = jax.jit(
      lambda mp, lr, v, tr, va: meta_gradient.meta_gradient(
          mp, agent, value_fn, lr, v, tr, va, jax.random.PRNGKey(0), config
      )
  )
  grads, (new_learner, new_value, _, meta_logs) = fn(
      jax.tree.map(jnp.asarray, inputs["meta_params"]),
      learner,
      value_state,
      train,
      valid,
  )
  ours = dict(
      meta_grads=grads,
      meta_log=meta_logs,
      learner_params=new_learner.params,
      value_params=new_value.params,
  )
  num_steps = train.actions.shape[0]
  value_config = value_fn.config
  max_steps = dict(
      learner_params=_max_step(
          num_steps, settings.learning_rate, settings.max_abs_update
      ),
      value_params=_max_step(
          num_steps, value_config.learning_rate, value_config.max_abs_update
      ),
  )
  return flatten(ours, ""), max_steps


# ---------------------------------------------- several meta-training steps
# A fixture of K consecutive meta-steps of the published meta-training
# notebook (``benchmarks/published_meta_train.py fixture``). Large arrays are
# kept as random projections ("sketches"): ``sketch(name, x)`` projects ``x``
# on SKETCH_DIM fixed Gaussian directions (seeded by ``name``), so
# ``||sketch(a) - sketch(b)|| / sqrt(SKETCH_DIM)`` estimates ``||a - b||``.
#
# Keys (``A`` agents, ``K`` meta-steps, ``S = SKETCH_DIM``):
# * ``settings::*``: sizes, seeds and learning rates of the run;
# * ``inputs::loop_rng`` [2]: the notebook's loop key after initialisation;
#   ``inputs::step_keys`` [K, 2]: the key of each meta-step;
# * ``inputs::meta_params_sketch::<param>`` [S]: the initial meta-parameters
#   (``init_meta_params(PRNGKey(1 + seed))``);
# * ``inputs::agents::<i>::<field>``: agent i's initial state (``AGENT_FIELDS``);
# * ``outputs::logs::<name>`` [K]: the notebook's logs (rewards,
#   pos_rewards, neg_rewards, meta_grad_norm, meta_up_norm) and every
#   agent's meta-loss logs and ``inner/<name>`` learner logs, averaged over
#   the agents (and inner steps);
# * ``outputs::meta_grads::<param>::{sketch [K, S], norm [K]}``: the mean
#   meta-gradient; ``outputs::meta_params_delta::<param>::{sketch, norm}``:
#   the meta-parameters minus the initial ones, after each step;
# * ``outputs::agents::<i>::<field>::{sketch [K, S], norm [K], final}`` for
#   float arrays and ``::steps`` [K, ...] for exact ones (environments,
#   counters).
META_STEPS_KIND = "disco_meta_train_steps"
SKETCH_DIM = 16
NOTEBOOK_LOGS = (
    "rewards",
    "pos_rewards",
    "neg_rewards",
    "meta_grad_norm",
    "meta_up_norm",
)
EXACT_FIELDS = ("env_game", "env_rng", "timestep_", "_count")
# Agent fields kept as sketches only (also at the end), to keep files small.
SKETCHED_ONLY = ("_opt_state_mu", "_opt_state_nu", "target_params")


def sketch(name: str, x: Any) -> np.ndarray:
  """``[SKETCH_DIM]`` random projection of ``x``, fixed by ``name``."""
  flat = np.asarray(x, np.float64).reshape(-1)
  seed = zlib.crc32(name.encode())
  directions = np.random.default_rng(seed).standard_normal(
      (SKETCH_DIM, flat.size), np.float32
  )
  return directions @ flat


def _is_exact(name: str) -> bool:
  return any(f in name for f in EXACT_FIELDS)


def flatten_arrays(tree: Any) -> dict[str, np.ndarray]:
  """``flatten`` without a prefix, as numpy arrays."""
  return {k[len(SEP) :]: np.asarray(v) for k, v in flatten(tree, "").items()}


def meta_train_steps_fixture(
    settings: dict[str, Any],
    loop_rng: np.ndarray,
    initial: dict[str, Any],
    steps: list[dict[str, Any]],
) -> dict[str, np.ndarray]:
  """Builds a ``disco_meta_train_steps`` fixture (see the keys above).

  ``initial`` holds ``meta_params`` and ``agents`` (a list of agent states);
  each of ``steps`` the meta-step's ``key``, the ``meta_params`` and
  ``agents`` after it, the notebook's ``log``, the agents' mean meta-gradient
  ``grads`` and each agent's logs ``agent_logs``. Agent states are trees
  of ``AGENT_FIELDS``.
  """
  fx = {"kind": np.asarray(META_STEPS_KIND)}
  for k, v in settings.items():
    fx[f"settings{SEP}{k}"] = np.asarray(v)
  fx[f"inputs{SEP}loop_rng"] = np.asarray(loop_rng)
  fx[f"inputs{SEP}step_keys"] = np.stack([np.asarray(s["key"]) for s in steps])
  theta0 = flatten_arrays(initial["meta_params"])
  for k, v in theta0.items():
    fx[f"inputs{SEP}meta_params_sketch{SEP}{k}"] = sketch(k, v)
  for i, agent in enumerate(initial["agents"]):
    for k, v in flatten_arrays(agent).items():
      fx[f"inputs{SEP}agents{SEP}{i}{SEP}{k}"] = v
  per_step = [_step_summary(s, theta0) for s in steps]
  for key in per_step[0]:
    fx[f"outputs{SEP}{key}"] = np.stack([p[key] for p in per_step])
  for i, agent in enumerate(steps[-1]["agents"]):
    for k, v in flatten_arrays(agent).items():
      if not any(f in k for f in EXACT_FIELDS + SKETCHED_ONLY):
        fx[f"outputs{SEP}agents{SEP}{i}{SEP}{k}{SEP}final"] = v
  return fx


def _step_summary(step, theta0) -> dict[str, np.ndarray]:
  """One meta-step's entries (without the leading ``outputs::``)."""
  out = {}
  logs = {k: step["log"][k] for k in NOTEBOOK_LOGS}
  agent_logs = step["agent_logs"]
  for k in agent_logs[0]:
    if k not in logs:
      logs[k] = np.mean([np.mean(a[k]) for a in agent_logs])
  for k, v in logs.items():
    out[f"logs{SEP}{k}"] = np.asarray(v, np.float64)
  theta = flatten_arrays(step["meta_params"])
  trees = dict(
      meta_grads=flatten_arrays(step["grads"]),
      meta_params_delta={k: theta[k] - theta0[k] for k in theta},
  )
  for i, agent in enumerate(step["agents"]):
    trees[f"agents{SEP}{i}"] = flatten_arrays(agent)
  for prefix, tree in trees.items():
    for k, v in tree.items():
      name = f"{prefix}{SEP}{k}"
      if _is_exact(k):
        out[f"{name}{SEP}steps"] = v
      else:
        out[f"{name}{SEP}sketch"] = sketch(k, v)
        out[f"{name}{SEP}norm"] = np.asarray(np.linalg.norm(v), np.float64)
  return out


def _keep_gradient() -> optax.GradientTransformation:
  """Identity whose state is the last gradient (to read the meta-gradient)."""
  return optax.GradientTransformation(
      lambda params: jax.tree.map(jnp.zeros_like, params),
      lambda grads, state, params=None: (grads, grads),
  )


def _our_agent_layout(agent: Any) -> dict[str, np.ndarray]:
  """One (unstacked) population agent in the fixture's layout."""
  adam, value_adam = agent.learner.opt_state[0], agent.value.opt_state[0]
  timestep = agent.actor.timestep
  return flatten_arrays(
      dict(
          learner_params=agent.learner.params,
          learner_opt_state_mu=adam.mu,
          learner_opt_state_nu=adam.nu,
          learner_opt_state_count=adam.count,
          meta_state=agent.learner.rule_state,
          value_params=agent.value.params,
          value_opt_state_mu=value_adam.mu,
          value_opt_state_nu=value_adam.nu,
          value_opt_state_count=value_adam.count,
          value_adv_ema_state=agent.value.adv_ema_state,
          value_td_ema_state=agent.value.td_ema_state,
          env_game=agent.actor.env_state.game,
          env_rng=agent.actor.env_state.rng,
          timestep_observation=timestep.observation,
          timestep_reward=timestep.reward,
          timestep_last=timestep.step_type == types.LAST,
      )
  )


def _agent_from_layout(tree: dict[str, Any], like: Any) -> Any:
  """The fixture's agent state in our structure (``like``: ours, unstacked)."""
  arrays = lambda t: jax.tree.map(jnp.asarray, t)

  def opt_state(prefix, old):
    adam = optax.ScaleByAdamState(
        count=jnp.asarray(tree[f"{prefix}_count"]),
        mu=arrays(tree[f"{prefix}_mu"]),
        nu=arrays(tree[f"{prefix}_nu"]),
    )
    return (adam,) + tuple(old[1:])

  last = jnp.asarray(tree["timestep_last"])
  timestep = like.actor.timestep
  return like.replace(
      learner=types.LearnerState(
          params=arrays(tree["learner_params"]),
          opt_state=opt_state("learner_opt_state", like.learner.opt_state),
          rule_state=_rule_state_from(tree["meta_state"]),
      ),
      value=like.value.replace(
          params=arrays(tree["value_params"]),
          opt_state=opt_state("value_opt_state", like.value.opt_state),
          adv_ema_state=_ema_state(tree["value_adv_ema_state"]),
          td_ema_state=_ema_state(tree["value_td_ema_state"]),
      ),
      actor=like.actor.replace(
          env_state=like.actor.env_state.replace(
              game=jnp.asarray(tree["env_game"]),
              rng=jnp.asarray(tree["env_rng"]),
          ),
          timestep=timestep.replace(
              observation=jnp.asarray(tree["timestep_observation"]),
              reward=jnp.asarray(tree["timestep_reward"]),
              step_type=jnp.where(last, types.LAST, timestep.step_type),
              discount=jnp.where(last, 0.0, timestep.discount),
          ),
      ),
  )


def _meta_train_population(fx: dict[str, np.ndarray]):
  """Our population at the fixture's settings, and its initial meta-params."""
  st = {k.split(SEP, 1)[1]: fx[k] for k in fx if k.startswith("settings" + SEP)}
  settings = registry.default_settings("disco")
  settings.loss_mask = "published"
  settings.learning_rate = float(st["agent_learning_rate"])
  settings.network.dense = tuple(int(x) for x in st["dense"])
  settings.network.model_lstm_size = int(st["lstm_size"])
  settings.network.model_head_hiddens = tuple(
      int(x) for x in st["head_mlp_hiddens"]
  )
  env = env_registry.make_env(
      "catch",
      int(st["batch_size"]),
      rows=int(st["rows"]),
      columns=int(st["columns"]),
  )
  agent = agent_lib.make_agent(settings, env.num_actions)
  value_fn = value_function.ValueFunction(
      value_function.ValueFnConfig(
          dense=tuple(int(x) for x in st["value_dense"])
      )
  )
  group = population_lib.AgentGroup(
      name="catch",
      env=env,
      agent=agent,
      value_fn=value_fn,
      num_agents=int(st["num_agents"]),
  )
  population = population_lib.Population(
      [group],
      population_lib.PopulationConfig(
          rollout_len=int(st["rollout_len"]),
          inner_steps=int(st["inner_steps"]),
          key_scheme=keys_lib.PUBLISHED,
      ),
      optax.chain(
          _keep_gradient(), optax.adam(float(st["meta_learning_rate"]))
      ),
      jax.devices()[:1],
  )
  seed = int(st["seed"])
  if str(st["init_meta_params"]) == "disco103":
    meta_params = weights_lib.load_disco103()
  else:
    meta_params = jax.jit(agent.rule.init_meta_params)(
        jax.random.PRNGKey(1 + seed)
    )
  return population, meta_params, 4 + seed


# Tolerances of the multi-step check (see ``check_meta_train_steps``).
STEPS_LOG_REL = 1e-3
STEPS_REL = 1e-2
STEPS_GRAD_TREE_REL = 1e-3
STEPS_FLIPS = 4


def _sketch_comparison(
    name, sketch_name, ours, ref_sketch, ref_norm, allowance=1e-7, rel=STEPS_REL
) -> Comparison:
  """``||a - b|| <= rel ||b|| + allowance``, with ``||a - b||`` estimated
  from the sketches; the error is reported relative to
  ``||b|| + allowance / rel``."""
  err = np.linalg.norm(sketch(sketch_name, ours) - ref_sketch)
  err /= np.sqrt(SKETCH_DIM)
  scale = ref_norm + allowance / rel
  return Comparison(name, float(err / scale), bool(err <= rel * scale))


def check_meta_train_steps(fx: dict[str, np.ndarray]) -> list[Comparison]:
  """Runs ``K`` meta-steps of our population from the fixture's initial
  state and compares them with the notebook's, step by step.

  Our initial state (from the same seeds, ``key_scheme='published'``) is
  compared with the fixture's first; the steps then start from the
  fixture's agents, so that they test the meta-step alone.

  Tolerances: logs ``|a - b| <= STEPS_LOG_REL (1 + |b|)``; sketched arrays
  ``||a - b|| <= STEPS_REL ||b||``, plus ``STEPS_GRAD_TREE_REL`` times the
  whole meta-gradient's norm for a meta-gradient array (a tiny array carries
  the rounding of the large ones) and ``2 sqrt(STEPS_FLIPS) lr`` for the
  change of a meta-parameter array (Adam's first steps are about
  ``lr sign(g)``, so an element whose gradient is within rounding of zero
  may step the other way); exact arrays (environments, keys, counters)
  equal; the agents' final arrays as ``compare_array`` for updated
  parameters. Measured: a 1e-7 relative change of the agents' parameters
  moves the first meta-gradient by 7e-4 (the agents' first inner Adam step
  flips the same way); the notebook and we differ by 2e-3 there, by 1e-5 in
  later steps. A wrong key, rollout or formula differs by O(1), and the
  environments (exact) diverge.
  """
  population, meta_params, agent_seed = _meta_train_population(fx)
  results = []
  theta0 = flatten_arrays(jax.device_get(meta_params))
  for k, v in theta0.items():
    ref = fx[f"inputs{SEP}meta_params_sketch{SEP}{k}"]
    norm = float(np.linalg.norm(ref) / np.sqrt(SKETCH_DIM))
    results.append(
        _sketch_comparison(
            f"initial{SEP}meta_params{SEP}{k}", k, v, ref, norm, rel=1e-6
        )
    )
  state = population.init(jax.random.PRNGKey(agent_seed), meta_params)
  results.append(
      _exact("initial::loop_rng", state.rng, fx[f"inputs{SEP}loop_rng"])
  )
  num_agents = population.groups[0].num_agents
  ours_agents = jax.device_get(state.agents[0])
  fixture_agents = []
  for i in range(num_agents):
    mine = jax.tree.map(lambda x, i=i: x[i], ours_agents)
    ref = unflatten(fx, f"inputs{SEP}agents{SEP}{i}")
    for k, v in _our_agent_layout(mine).items():
      name = f"initial{SEP}agents{SEP}{i}{SEP}{k}"
      want = fx[f"inputs{SEP}agents{SEP}{i}{SEP}{k}"]
      results.append(
          _exact(name, v, want)
          if _is_exact(k)
          else compare_array(name, v, want)
      )
    fixture_agents.append(_agent_from_layout(ref, mine))
  stacked = jax.tree.map(lambda *x: jnp.stack(x), *fixture_agents)
  state = population.place(state.replace(agents=(stacked,)))

  num_steps = fx[f"inputs{SEP}step_keys"].shape[0]
  loop_rng = state.rng
  for step in range(num_steps):
    loop_rng, step_key = keys_lib.next_step_key(loop_rng)
    results.append(
        _exact(
            f"steps{SEP}{step}{SEP}key",
            step_key,
            fx[f"inputs{SEP}step_keys"][step],
        )
    )
    state, logs = population.step(state)
    logs = jax.device_get(logs)
    results += _compare_step(fx, step, state, logs, theta0, num_agents)
  return results


def _exact(name: str, ours: Any, ref: np.ndarray) -> Comparison:
  ours, ref = np.asarray(ours), np.asarray(ref)
  same = ours.shape == ref.shape and np.array_equal(ours, ref)
  mismatch = (
      0.0
      if same
      else float(np.mean(ours != ref) if ours.shape == ref.shape else 1.0)
  )
  return Comparison(f"{name} (exact)", mismatch, bool(same))


# Our log names for the notebook's, and factors: the notebook counts positive
# and negative rewards over all inner steps' rollouts, we per rollout.
_LOG_NAMES = {"meta_up_norm": "meta_update_norm"}
_LOG_PER_ROLLOUT = ("pos_rewards", "neg_rewards")


def _compare_step(fx, step, state, logs, theta0, num_agents):
  results = []
  out = f"outputs{SEP}"
  st_inner = int(fx[f"settings{SEP}inner_steps"])
  meta_lr = float(fx[f"settings{SEP}meta_learning_rate"])
  for key in sorted(k for k in fx if k.startswith(f"{out}logs{SEP}")):
    name = key[len(f"{out}logs{SEP}") :]
    ref = float(fx[key][step])
    ours_key = _LOG_NAMES.get(name, name)
    if ours_key not in logs:
      ours_key = f"catch/{ours_key}"
    if ours_key not in logs:
      continue  # logged by the notebook only (see the README)
    ours = float(logs[ours_key])
    if name in _LOG_PER_ROLLOUT:
      ours *= st_inner
    err = abs(ours - ref) / (1.0 + abs(ref))
    results.append(
        Comparison(
            f"steps{SEP}{step}{SEP}logs{SEP}{name}", err, err <= STEPS_LOG_REL
        )
    )
  trees = dict(
      meta_grads=flatten_arrays(jax.device_get(state.meta_opt_state[0])),
      meta_params_delta={
          k: v - theta0[k]
          for k, v in flatten_arrays(jax.device_get(state.meta_params)).items()
      },
  )
  agents = jax.device_get(state.agents[0])
  for i in range(num_agents):
    trees[f"agents{SEP}{i}"] = _our_agent_layout(
        jax.tree.map(lambda x, i=i: x[i], agents)
    )
  grad_norm = np.sqrt(
      sum(
          fx[f"{out}meta_grads{SEP}{k}{SEP}norm"][step] ** 2
          for k in trees["meta_grads"]
      )
  )
  allowances = dict(
      # Arrays with tiny gradients carry the rounding of the large ones.
      meta_grads=STEPS_GRAD_TREE_REL * grad_norm,
      # STEPS_FLIPS elements whose Adam step flipped sign (2 lr each).
      meta_params_delta=2 * np.sqrt(STEPS_FLIPS) * meta_lr,
  )
  for prefix, tree in trees.items():
    allowance = float(allowances.get(prefix, 1e-7))
    for k, v in tree.items():
      base = f"{out}{prefix}{SEP}{k}"
      name = f"steps{SEP}{step}{SEP}{prefix}{SEP}{k}"
      if _is_exact(k):
        results.append(_exact(name, v, fx[f"{base}{SEP}steps"][step]))
        continue
      results.append(
          _sketch_comparison(
              name,
              k,
              v,
              fx[f"{base}{SEP}sketch"][step],
              float(fx[f"{base}{SEP}norm"][step]),
              allowance,
          )
      )
      final = f"{base}{SEP}final"
      if step == fx[f"inputs{SEP}step_keys"].shape[0] - 1 and final in fx:
        results.append(
            compare_array(f"final{SEP}{prefix}{SEP}{k}", v, fx[final], True)
        )
  return results


def _strip(flat: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  return {k[len(SEP) :]: v for k, v in flat.items()}


KINDS: dict[str, Callable[..., RunnerOutput]] = {
    "disco_meta_net": _run_meta_net,
    "disco_learner_step": lambda fx, mp: _run_learner_step(fx, mp, "disco"),
    "actor_critic_learner_step": (
        lambda fx, mp: _run_learner_step(fx, mp, "actor_critic")
    ),
    "disco_meta_gradient": _run_meta_gradient,
}


def load_fixture(path: str | Path) -> dict[str, np.ndarray]:
  """A fixture's arrays by key."""
  with np.load(path, allow_pickle=False) as data:
    return {k: data[k] for k in data.files}


def with_companion_gradients(
    path: Path, fx: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
  """``fx`` with the gradients of its copy ``<dir>/grads/<name>``, if the
  fixture has none and that copy holds the same arrays otherwise."""
  companion = path.parent / GRADS_DIR / path.name
  if has_gradients(fx) or not companion.is_file():
    return fx
  try:
    other = load_fixture(companion)
  except (OSError, ValueError):
    return fx
  if set(fx) - set(other) or not all(
      np.array_equal(fx[k], other[k]) for k in fx
  ):
    return fx
  return dict(
      fx,
      **{
          k: v
          for k, v in other.items()
          if k.startswith(f"outputs{SEP}grads{SEP}")
      },
  )


# The precision of every parity computation (JAX's name for float32 products
# computed in float32).
MATMUL_PRECISION = "highest"


def check_fixture(
    path: str | Path,
    weights_path: str | Path | None = None,
    meta_gradient_config: meta_gradient.OuterLossConfig | None = None,
) -> Report:
  """Runs our implementation on a fixture's inputs and compares outputs.

  ``meta_gradient_config`` overrides the (default) settings of the
  meta-gradient fixtures' inner loop, e.g. to check the rolled loop.

  Matrix products run at full float32 precision (``MATMUL_PRECISION``), as
  the fixtures were computed, on every backend. JAX's default precision on
  NVIDIA GPUs computes float32 products in TF32: with it, on an H200, the
  Disco fixtures failed by up to 0.9 relative on meta-gradients.
  """
  with jax.default_matmul_precision(MATMUL_PRECISION):
    return _check_fixture(Path(path), weights_path, meta_gradient_config)


def _check_fixture(path, weights_path, meta_gradient_config) -> Report:
  try:
    fx = load_fixture(path)
  except (OSError, ValueError) as e:
    return Report(str(path), "?", [], f"cannot read fixture: {e}")
  kind = str(fx.get("kind", "?"))
  if kind not in KINDS and kind != META_STEPS_KIND:
    return Report(
        str(path),
        kind,
        [],
        f"unsupported fixture kind {kind!r} (supported: "
        f"{', '.join(KINDS)})",
    )
  if kind == META_STEPS_KIND:
    return Report(str(path), kind, check_meta_train_steps(fx))
  meta_params = None
  if kind in ("disco_meta_net", "disco_learner_step"):
    meta_params = weights_lib.load_disco103(weights_path)
  run = KINDS[kind]
  if kind == "disco_meta_gradient" and meta_gradient_config is not None:
    run = functools.partial(run, config=meta_gradient_config)
  ours, max_steps = run(fx, meta_params)
  fx = with_companion_gradients(path, fx)
  robust = has_gradients(fx)
  comparisons = compare_outputs(_strip(ours), fx, max_steps if robust else None)
  rule = "-" if not max_steps else ("gradients" if robust else "99.9%")
  return Report(str(path), kind, comparisons, rule=rule)


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(
      prog="python -m disco.parity", description=__doc__.split("\n\n")[0]
  )
  parser.add_argument("fixtures", nargs="+", help="fixture .npz files")
  parser.add_argument(
      "--weights",
      default=None,
      help="Disco103 weights file (default: search/download)",
  )
  parser.add_argument(
      "--verbose", "-v", action="store_true", help="print every compared array"
  )
  args = parser.parse_args(argv)
  failed = False
  for fixture in args.fixtures:
    try:
      report = check_fixture(fixture, args.weights)
    except weights_lib.WeightsError as e:
      report = Report(fixture, "?", [], str(e))
    if args.verbose:
      for c in report.comparisons:
        print(f"    {'ok ' if c.ok else 'BAD'} {c.error:.3e} {c.key}")
    if report.error:
      print(f"{report.path}: kind={report.kind} FAIL ({report.error})")
    else:
      worst = report.worst
      bad = [c.key for c in report.comparisons if not c.ok]
      print(
          f"{report.path}: kind={report.kind} arrays="
          f"{len(report.comparisons)} params_rule={report.rule} "
          f"worst_rel_error={worst.error:.3e} "
          f"({worst.key}) {'PASS' if report.ok else 'FAIL'}"
          + (f" failing: {', '.join(bad[:5])}" if bad else "")
      )
    failed |= not report.ok
  return 1 if failed else 0


if __name__ == "__main__":
  sys.exit(main())
