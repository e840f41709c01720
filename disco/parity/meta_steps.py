"""The multi-step fixture: several meta-steps of the published
meta-training notebook against our population, step by step.

The fixture's format (``meta_train_steps_fixture`` writes it,
``benchmarks/published_meta_train.py fixture`` records it) and its check
(``check_meta_train_steps``, with its tolerances) are described below.
"""

from __future__ import annotations

from typing import Any
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import optax

from disco import agent as agent_lib
from disco import types
from disco import weights as weights_lib
from disco.environments import registry as env_registry
from disco.meta import keys as keys_lib
from disco.meta import meta_step
from disco.meta import population as population_lib
from disco.meta import value_function
from disco.parity import comparisons
from disco.parity import fixtures
from disco.parity import runners
from disco.update_rules import registry

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
    fx[f"settings{fixtures.SEP}{k}"] = np.asarray(v)
  fx[f"inputs{fixtures.SEP}loop_rng"] = np.asarray(loop_rng)
  fx[f"inputs{fixtures.SEP}step_keys"] = np.stack(
      [np.asarray(s["key"]) for s in steps]
  )
  theta0 = fixtures.flatten_arrays(initial["meta_params"])
  for k, v in theta0.items():
    fx[f"inputs{fixtures.SEP}meta_params_sketch{fixtures.SEP}{k}"] = sketch(
        k, v
    )
  for i, agent in enumerate(initial["agents"]):
    for k, v in fixtures.flatten_arrays(agent).items():
      fx[f"inputs{fixtures.SEP}agents{fixtures.SEP}{i}{fixtures.SEP}{k}"] = v
  per_step = [_step_summary(s, theta0) for s in steps]
  for key in per_step[0]:
    fx[f"outputs{fixtures.SEP}{key}"] = np.stack([p[key] for p in per_step])
  for i, agent in enumerate(steps[-1]["agents"]):
    for k, v in fixtures.flatten_arrays(agent).items():
      if not any(f in k for f in EXACT_FIELDS + SKETCHED_ONLY):
        fx[
            f"outputs{fixtures.SEP}agents{fixtures.SEP}{i}{fixtures.SEP}{k}{fixtures.SEP}final"
        ] = v
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
    out[f"logs{fixtures.SEP}{k}"] = np.asarray(v, np.float64)
  theta = fixtures.flatten_arrays(step["meta_params"])
  trees = dict(
      meta_grads=fixtures.flatten_arrays(step["grads"]),
      meta_params_delta={k: theta[k] - theta0[k] for k in theta},
  )
  for i, agent in enumerate(step["agents"]):
    trees[f"agents{fixtures.SEP}{i}"] = fixtures.flatten_arrays(agent)
  for prefix, tree in trees.items():
    for k, v in tree.items():
      name = f"{prefix}{fixtures.SEP}{k}"
      if _is_exact(k):
        out[f"{name}{fixtures.SEP}steps"] = v
      else:
        out[f"{name}{fixtures.SEP}sketch"] = sketch(k, v)
        out[f"{name}{fixtures.SEP}norm"] = np.asarray(
            np.linalg.norm(v), np.float64
        )
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
  return fixtures.flatten_arrays(
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
          rule_state=runners.rule_state_from(tree["meta_state"]),
      ),
      value=like.value.replace(
          params=arrays(tree["value_params"]),
          opt_state=opt_state("value_opt_state", like.value.opt_state),
          adv_ema_state=runners.ema_state(tree["value_adv_ema_state"]),
          td_ema_state=runners.ema_state(tree["value_td_ema_state"]),
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
  st = {
      k.split(fixtures.SEP, 1)[1]: fx[k]
      for k in fx
      if k.startswith("settings" + fixtures.SEP)
  }
  defaults = registry.default_settings("disco")
  settings = defaults.replace(
      loss_mask="published",
      learning_rate=float(st["agent_learning_rate"]),
      network=dict(
          defaults.network,
          dense=tuple(int(x) for x in st["dense"]),
          model_lstm_size=int(st["lstm_size"]),
          model_head_hiddens=tuple(int(x) for x in st["head_mlp_hiddens"]),
      ),
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
  group = meta_step.AgentGroup(
      name="catch",
      env=env,
      agent=agent,
      value_fn=value_fn,
      num_agents=int(st["num_agents"]),
  )
  population = population_lib.BackpropPopulation(
      [group],
      meta_step.PopulationConfig(
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
) -> comparisons.Comparison:
  """``||a - b|| <= rel ||b|| + allowance``, with ``||a - b||`` estimated
  from the sketches; the error is reported relative to
  ``||b|| + allowance / rel``."""
  err = np.linalg.norm(sketch(sketch_name, ours) - ref_sketch)
  err /= np.sqrt(SKETCH_DIM)
  scale = ref_norm + allowance / rel
  return comparisons.Comparison(
      name, float(err / scale), bool(err <= rel * scale)
  )


def check_meta_train_steps(
    fx: dict[str, np.ndarray],
) -> list[comparisons.Comparison]:
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
  theta0 = fixtures.flatten_arrays(jax.device_get(meta_params))
  for k, v in theta0.items():
    ref = fx[f"inputs{fixtures.SEP}meta_params_sketch{fixtures.SEP}{k}"]
    norm = float(np.linalg.norm(ref) / np.sqrt(SKETCH_DIM))
    results.append(
        _sketch_comparison(
            f"initial{fixtures.SEP}meta_params{fixtures.SEP}{k}",
            k,
            v,
            ref,
            norm,
            rel=1e-6,
        )
    )
  state = population.init(jax.random.PRNGKey(agent_seed), meta_params)
  results.append(
      comparisons.exact(
          "initial::loop_rng", state.rng, fx[f"inputs{fixtures.SEP}loop_rng"]
      )
  )
  num_agents = population.groups[0].num_agents
  ours_agents = jax.device_get(state.agents[0])
  fixture_agents = []
  for i in range(num_agents):
    mine = jax.tree.map(lambda x, i=i: x[i], ours_agents)
    ref = fixtures.unflatten(fx, f"inputs{fixtures.SEP}agents{fixtures.SEP}{i}")
    for k, v in _our_agent_layout(mine).items():
      name = f"initial{fixtures.SEP}agents{fixtures.SEP}{i}{fixtures.SEP}{k}"
      want = fx[f"inputs{fixtures.SEP}agents{fixtures.SEP}{i}{fixtures.SEP}{k}"]
      results.append(
          comparisons.exact(name, v, want)
          if _is_exact(k)
          else comparisons.compare_array(name, v, want)
      )
    fixture_agents.append(_agent_from_layout(ref, mine))
  stacked = jax.tree.map(lambda *x: jnp.stack(x), *fixture_agents)
  state = population.place(state.replace(agents=(stacked,)))

  num_steps = fx[f"inputs{fixtures.SEP}step_keys"].shape[0]
  loop_rng = state.rng
  for step in range(num_steps):
    loop_rng, step_key = keys_lib.next_step_key(loop_rng)
    results.append(
        comparisons.exact(
            f"steps{fixtures.SEP}{step}{fixtures.SEP}key",
            step_key,
            fx[f"inputs{fixtures.SEP}step_keys"][step],
        )
    )
    state, logs = population.step(state)
    logs = jax.device_get(logs)
    results += _compare_step(fx, step, state, logs, theta0, num_agents)
  return results


# Our log names for the notebook's, and factors: the notebook counts positive
# and negative rewards over all inner steps' rollouts, we per rollout.
_LOG_NAMES = {"meta_up_norm": "meta_update_norm"}
_LOG_PER_ROLLOUT = ("pos_rewards", "neg_rewards")


def _compare_logs(fx, step, logs) -> list[comparisons.Comparison]:
  """The step's logs against the fixture's (those both record)."""
  results = []
  out = f"outputs{fixtures.SEP}"
  st_inner = int(fx[f"settings{fixtures.SEP}inner_steps"])
  for key in sorted(k for k in fx if k.startswith(f"{out}logs{fixtures.SEP}")):
    name = key[len(f"{out}logs{fixtures.SEP}") :]
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
        comparisons.Comparison(
            f"steps{fixtures.SEP}{step}{fixtures.SEP}logs{fixtures.SEP}{name}",
            err,
            err <= STEPS_LOG_REL,
        )
    )
  return results


def _compare_step(fx, step, state, logs, theta0, num_agents):
  results = _compare_logs(fx, step, logs)
  out = f"outputs{fixtures.SEP}"
  meta_lr = float(fx[f"settings{fixtures.SEP}meta_learning_rate"])
  trees = dict(
      meta_grads=fixtures.flatten_arrays(
          jax.device_get(state.meta_opt_state[0])
      ),
      meta_params_delta={
          k: v - theta0[k]
          for k, v in fixtures.flatten_arrays(
              jax.device_get(state.meta_params)
          ).items()
      },
  )
  agents = jax.device_get(state.agents[0])
  for i in range(num_agents):
    trees[f"agents{fixtures.SEP}{i}"] = _our_agent_layout(
        jax.tree.map(lambda x, i=i: x[i], agents)
    )
  grad_norm = np.sqrt(
      sum(
          fx[f"{out}meta_grads{fixtures.SEP}{k}{fixtures.SEP}norm"][step] ** 2
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
      base = f"{out}{prefix}{fixtures.SEP}{k}"
      name = f"steps{fixtures.SEP}{step}{fixtures.SEP}{prefix}{fixtures.SEP}{k}"
      if _is_exact(k):
        results.append(
            comparisons.exact(name, v, fx[f"{base}{fixtures.SEP}steps"][step])
        )
        continue
      results.append(
          _sketch_comparison(
              name,
              k,
              v,
              fx[f"{base}{fixtures.SEP}sketch"][step],
              float(fx[f"{base}{fixtures.SEP}norm"][step]),
              allowance,
          )
      )
      final = f"{base}{fixtures.SEP}final"
      if (
          step == fx[f"inputs{fixtures.SEP}step_keys"].shape[0] - 1
          and final in fx
      ):
        results.append(
            comparisons.compare_array(
                f"final{fixtures.SEP}{prefix}{fixtures.SEP}{k}",
                v,
                fx[final],
                True,
            )
        )
  return results
