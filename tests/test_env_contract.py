"""The contract every registered environment keeps (``disco.environments``).

``base.Environment`` promises, for ``B`` streams: specs (a float32
observation, or uint8 images ``[H, W, C]``; an int32 scalar action in ``[0, num_actions)``, or a float32
action ``[D]`` with finite bounds, clipped to them by ``step``, where
``num_actions`` raises); ``reset`` gives
FIRST timesteps with reward 0 and discount 1, leaves leading with ``[B]``;
``step`` gives MID or LAST, never FIRST (episodes reset by themselves), with
discount 1 on MID, and on LAST 0 (a termination) or 1 (a truncation, only at
the step limit); float32 rewards and discounts, int32 step types. A
jittable environment's ``reset``/``step`` run under ``jit``/``vmap``/``scan``,
are determined by their key (the same keys give the same trajectories, in
any order of the vmapped seeds; a vmapped run equals the same key's
unbatched, unjitted run), and copies of its state step alike. A host
environment is driven from a Python loop, passing on the state its
``reset`` gave, and determined by its ``seed`` setting or its reset key.

Checked on environments chosen from the registry's listing, not by hand:
per group (a family, the part of a name before ``/``: ``gymnax``, ``lpg``,
...; its continuous-action names form a group of their own), one name of
each kind (the name without its digits: ``MiniGrid-Empty-5x5`` and ``-8x8``
are one kind), and of a group of more than ``PER_FAMILY`` kinds (or its
``PER_GROUP`` count), that many spread evenly over its listing, so that a
new family or environment is covered without editing this file. Rollouts act uniformly
at random (over the discrete actions, or over the box of continuous
ones). Settings come from the registry too: a
step limit (``STEP_LIMIT_SETTINGS``) is set to ``LIMIT`` so that truncations
happen, and an XLand ruleset file (``benchmark_path``) is a tiny one written
here. The per-suite files test what is particular to a suite (the packages'
own state and observations, the dynamics of each world) and reuse
``rollout`` and ``check_rollout`` for their own environments and settings.
"""

from __future__ import annotations

import collections
import functools
from pathlib import Path
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from disco import types
from disco.environments import base
from disco.environments import brax_envs
from disco.environments import gymnax_envs
from disco.environments import registry

from conftest import assert_copies_step_alike

B = 2  # streams
SEEDS = 2  # vmapped rollouts
STEPS = 100  # steps per scanned rollout
LIMIT = 6  # the step limit, where an environment has one: truncations happen
PER_FAMILY = 4
# Groups that run more kinds: every continuous gymnax kind (small, cheap).
PER_GROUP = {"gymnax/continuous": 5}
# Settings that bound an episode's length (gymnax's, xminigrid's, brax's,
# craftax's, jumanji Sokoban's).
STEP_LIMIT_SETTINGS = (
    "max_steps_in_episode",
    "max_steps",
    "episode_length",
    "max_timesteps",
    "time_limit",
    "max_episode_frames",
)
# Registered names the contract cannot build here, and why.
EXCLUDED = {
    # Building it reads MNIST files, downloaded once (test_env_gymnax.py
    # checks that it never downloads).
    "gymnax/MNISTBandit-bsuite": "needs the MNIST files",
    # brax compiles slowly on CPU (tens of seconds a program):
    # brax/inverted_pendulum, the cheapest, runs the contract; the others
    # go through the same adapter code, and test_env_brax.py builds and
    # traces every one.
    **{
        n: "brax/inverted_pendulum covers the adapter"
        for n in brax_envs.ENV_NAMES
        if n != "brax/inverted_pendulum"
    },
    # Craftax compiles slowly too (a step and a world generation).
    # Craftax-Classic-Symbolic-v1 runs the contract; the full game goes
    # through the same adapter code, and the pixel variants are the same
    # games rendered: test_env_craftax.py traces them.
    "craftax/Craftax-Symbolic-v1": "the Classic game covers its adapter",
    "craftax/Craftax-Classic-Pixels-v1": "the symbolic game, rendered",
    "craftax/Craftax-Pixels-v1": "the symbolic game, rendered",
}
# Families of optional packages: their names are skipped, with the reason,
# where the package is not installed: family -> (module, setup.cfg extra).
OPTIONAL_PACKAGES = {
    "brax": ("brax", "brax"),
    "craftax": ("craftax", "craftax"),
    "jumanji": ("jumanji", "sokoban"),
    "atari": ("ale_py", "atari"),
}
# Names with continuous actions (a group of their own in the choice).
CONTINUOUS = frozenset(gymnax_envs.CONTINUOUS_NAMES + brax_envs.ENV_NAMES)


def eval_without(modules: tuple[str, ...], env: str, output_dir: Path):
  """``disco-eval --config.env=ENV`` in a subprocess where importing any of
  ``modules`` fails, as when their package is not installed."""
  blocked = "".join(f"sys.modules[{m!r}] = None; " for m in modules)
  code = (
      f"import sys; {blocked}from disco.launch import evaluate; evaluate.main()"
  )
  return subprocess.run(
      [
          sys.executable,
          "-c",
          code,
          f"--config.env={env}",
          f"--config.output_dir={output_dir}",
      ],
      capture_output=True,
      text=True,
      timeout=300,
      check=False,
  )


def family(name: str) -> str:
  return name.split("/")[0]


def group(name: str) -> str:
  """The family, with ``/continuous`` for continuous-action names."""
  return family(name) + ("/continuous" if name in CONTINUOUS else "")


def kind(name: str) -> str:
  """The name without its digits (sizes, versions, rulesets)."""
  return re.sub(r"\d+", "", name)


def spread(names: list[str], count: int) -> list[str]:
  """``count`` of ``names`` evenly spread, the first and last included."""
  if len(names) <= count:
    return list(names)
  return [
      names[round(i * (len(names) - 1) / (count - 1))] for i in range(count)
  ]


def contract_names() -> list[str]:
  """The registered names the contract runs on (see the module docstring)."""
  kinds = collections.defaultdict(dict)  # group -> {kind: its first name}
  for name in registry.env_names():
    if name not in EXCLUDED:
      kinds[group(name)].setdefault(kind(name), name)
  return [
      n
      for key, names in kinds.items()
      for n in spread(list(names.values()), PER_GROUP.get(key, PER_FAMILY))
  ]


NAMES = contract_names()
JITTABLE = [n for n in NAMES if registry.is_jittable(n)]
HOST = [n for n in NAMES if not registry.is_jittable(n)]
# The first name of each group: the costlier checks run on it alone.
FIRST_OF_FAMILY = [
    n
    for i, n in enumerate(JITTABLE)
    if group(n) not in map(group, JITTABLE[:i])
]
CONTINUOUS_JITTABLE = [n for n in JITTABLE if n in CONTINUOUS]


def xland_benchmark_file(path: Path) -> Path:
  """A two-ruleset benchmark file in xminigrid's format (bz2 pickle).

  Ruleset 0: reach a red ball (stand next to it and move forward into it);
  objects: the ball and a green square. Ruleset 1: hold a green square, made
  by picking up the red ball (the only object).
  """
  # pylint: disable=g-import-not-at-top
  from xminigrid import benchmarks
  from xminigrid.core import constants
  from xminigrid.core import goals
  from xminigrid.core import rules
  # pylint: enable=g-import-not-at-top
  tiles, colors = constants.Tiles, constants.Colors
  ball = constants.TILES_REGISTRY[tiles.BALL, colors.RED]
  square = constants.TILES_REGISTRY[tiles.SQUARE, colors.GREEN]
  nothing = constants.TILES_REGISTRY[tiles.EMPTY, colors.EMPTY]
  rulesets = [
      (goals.AgentNearGoal(tile=ball), rules.EmptyRule(), (ball, square)),
      (
          goals.AgentHoldGoal(tile=square),
          rules.AgentHoldRule(tile=ball, prod_tile=square),
          (ball, nothing),
      ),
  ]
  contents = dict(
      goals=np.stack([np.asarray(g.encode()) for g, _, _ in rulesets]),
      rules=np.stack([np.asarray(r.encode())[None] for _, r, _ in rulesets]),
      init_tiles=np.asarray([t for _, _, t in rulesets], np.uint8),
      num_rules=np.asarray([[0], [1]], np.uint8),
  )
  benchmarks.save_bz2_pickle(contents, str(path))
  return path


@pytest.fixture(scope="module")
def benchmark_path(tmp_path_factory) -> Path:
  return xland_benchmark_file(
      tmp_path_factory.mktemp("xland") / "tiny_benchmark"
  )


def settings_for(name: str, benchmark_path: Path | None = None) -> dict:
  """The contract's settings of ``name``: its step limit at ``LIMIT``, and
  the tiny ruleset file where it needs one (skips the test where the
  family's optional package is not installed)."""
  if family(name) in OPTIONAL_PACKAGES:
    pytest.importorskip(
        OPTIONAL_PACKAGES[family(name)][0],
        reason=f"{name} needs the optional package (pip install -e "
        f"'.[{OPTIONAL_PACKAGES[family(name)][1]}]')",
    )
  accepted = registry.get_entry(name).settings
  settings = {k: LIMIT for k in STEP_LIMIT_SETTINGS if k in accepted}
  if "benchmark_path" in accepted:
    settings["benchmark_path"] = str(benchmark_path)
  return settings


# ----------------------------------------------------------- rollouts ----


def random_actions(env, key, lead: tuple[int, ...]):
  """Uniformly random actions ``lead + action shape``: discrete ones in
  ``[0, num_actions)``, continuous ones in the spec's bounds."""
  spec = env.action_spec()
  if base.is_continuous(spec):
    return jax.random.uniform(
        key, lead + spec.shape, minval=spec.minimum, maxval=spec.maximum
    )
  return jax.random.randint(key, lead, 0, env.num_actions)


def rollout_fn(env, steps: int = STEPS):
  """``run(key) -> (first timestep, [steps, B] timesteps, the state after
  every step)``: reset, then a ``lax.scan`` of uniformly random actions."""

  def run(key):
    reset_key, action_key = jax.random.split(key)
    state, first = env.reset(reset_key)
    actions = random_actions(env, action_key, (steps, env.batch_size))

    def step(state, action):
      state, ts = env.step(state, action)
      return state, (ts, state)

    _, (ts, states) = jax.lax.scan(step, state, actions)
    return first, ts, states

  return run


@functools.cache
def _rollouts(name: str, settings: tuple) -> tuple:
  env = registry.make_env(name, B, **dict(settings))
  run = jax.jit(jax.vmap(rollout_fn(env)))
  keys = jax.random.split(jax.random.PRNGKey(1), SEEDS)
  return env, run, keys, jax.device_get(run(keys))


def rollout(name: str, **settings):
  """``(env, run, keys, (first, ts, states))``: ``run = jit(vmap(
  rollout_fn(env)))`` of ``B`` streams of ``name`` with ``settings``, and its
  outputs (``[SEEDS, STEPS, B]``) for ``SEEDS`` keys; cached per name and
  settings, so the contract and a suite's own test share one."""
  return _rollouts(name, tuple(sorted(settings.items())))


def episode_lengths(ts) -> tuple[np.ndarray, np.ndarray]:
  """The length of every episode that ends in ``ts`` (``[..., T, B]``) and
  whether it was truncated (LAST with discount 1)."""
  last = np.moveaxis(np.asarray(ts.step_type == types.LAST), -2, -1)
  discount = np.moveaxis(np.asarray(ts.discount), -2, -1)
  lengths, truncated = [], []
  for index in np.ndindex(last.shape[:-1]):
    steps = 0
    for t, ended in enumerate(last[index]):
      steps += 1
      if ended:
        lengths.append(steps)
        truncated.append(discount[index][t] == 1.0)
        steps = 0
  return np.asarray(lengths, int), np.asarray(truncated, bool)


def check_timestep(env, ts, lead: tuple[int, ...]) -> None:
  """Shapes ``lead + [B]`` and dtypes of a timestep."""
  obs = env.observation_spec()
  assert ts.observation.shape == lead + (env.batch_size,) + obs.shape
  assert ts.observation.dtype == obs.dtype
  assert obs.dtype == np.float32 or (
      obs.dtype == np.uint8 and len(obs.shape) == 3
  )
  for x, dtype in (
      (ts.reward, np.float32),
      (ts.discount, np.float32),
      (ts.step_type, np.int32),
  ):
    assert x.shape == lead + (env.batch_size,) and x.dtype == dtype


def check_first(ts) -> None:
  np.testing.assert_array_equal(ts.step_type, types.FIRST)
  np.testing.assert_array_equal(ts.reward, 0.0)
  np.testing.assert_array_equal(ts.discount, 1.0)


def check_rollout(env, first, ts, limit: int | None = None) -> None:
  """The contract of a rollout: ``first`` ``[SEEDS, B]``, ``ts`` ``[SEEDS,
  T, B]``; with a step ``limit``, episodes end within it and truncations
  (LAST with discount 1) happen exactly at it."""
  seeds, steps = ts.step_type.shape[:2]
  check_timestep(env, first, (seeds,))
  check_first(first)
  check_timestep(env, ts, (seeds, steps))
  last = ts.step_type == types.LAST
  assert set(np.unique(ts.step_type)) <= {types.MID, types.LAST}
  np.testing.assert_array_equal(ts.discount[~last], 1.0)
  assert set(np.unique(ts.discount[last])) <= {0.0, 1.0}
  assert np.isfinite(ts.reward).all() and np.isfinite(ts.observation).all()
  if limit is not None:
    lengths, truncated = episode_lengths(ts)
    assert lengths.size, "no episode ended"
    assert np.all(lengths <= limit)
    np.testing.assert_array_equal(lengths[truncated], limit)


def check_keys_determine(run, keys, outputs) -> None:
  """The same keys give the same outputs, also with the seeds reordered;
  other keys, other trajectories."""
  jax.tree.map(
      np.testing.assert_array_equal, outputs, jax.device_get(run(keys))
  )
  swapped = jax.device_get(run(keys[::-1]))
  jax.tree.map(
      lambda a, b: np.testing.assert_array_equal(a[0], b[1]), outputs, swapped
  )
  ts = outputs[1]
  assert not all(np.array_equal(x[0], x[1]) for x in jax.tree.leaves(ts))


# -------------------------------------------------------------- tests ----


def test_the_choice_covers_every_family():
  families = {family(n) for n in registry.env_names()}
  assert {family(n) for n in NAMES} == families
  assert {group(n) for n in NAMES} == {group(n) for n in registry.env_names()}
  assert set(gymnax_envs.CONTINUOUS_NAMES) <= set(NAMES)
  assert len(NAMES) == len(set(NAMES))
  for name in NAMES:
    assert name in registry.env_names() and name not in EXCLUDED
  assert spread(list("abcdefghij"), 4) == list("adgj")
  assert kind("xminigrid/MiniGrid-Empty-5x5") == "xminigrid/MiniGrid-Empty-x"


@pytest.mark.parametrize("name", NAMES)
def test_specs_and_reset(name, benchmark_path):
  env = registry.make_env(name, B, **settings_for(name, benchmark_path))
  assert env.batch_size == B and env.is_jittable == registry.is_jittable(name)
  obs = env.observation_spec()
  assert obs.dtype == np.float32 or (
      obs.dtype == np.uint8 and len(obs.shape) == 3
  )
  action = env.action_spec()
  assert env.is_continuous == (name in CONTINUOUS)
  if env.is_continuous:
    check_continuous_spec(env)
  else:
    assert action.dtype == np.int32 and action.shape == ()
    assert action.minimum == 0 and action.maximum == env.num_actions - 1
    assert env.num_actions >= 2
  state, ts = env.reset(jax.random.PRNGKey(0))
  check_timestep(env, ts, ())
  check_first(ts)
  if env.is_jittable:
    # Every leaf leads with the stream axis (copies and searches use it).
    for leaf in jax.tree.leaves(state):
      assert leaf.shape[:1] == (B,)


def check_continuous_spec(env) -> None:
  """A float32 ``[D]`` action with finite bounds ``[D]``, minimum below
  maximum; no number of discrete actions."""
  action = env.action_spec()
  assert action.dtype == np.float32 and len(action.shape) == 1
  assert action.shape[0] >= 1
  for bound in (action.minimum, action.maximum):
    assert np.shape(bound) == action.shape
    assert np.asarray(bound).dtype == np.float32
    assert np.isfinite(bound).all()
  assert np.all(action.minimum < action.maximum)
  with pytest.raises(ValueError, match="continuous"):
    _ = env.num_actions


@pytest.mark.parametrize("name", JITTABLE)
def test_rollout_under_jit_vmap_scan(name, benchmark_path):
  settings = settings_for(name, benchmark_path)
  env, run, keys, outputs = rollout(name, **settings)
  first, ts, _ = outputs
  limited = any(k in settings for k in STEP_LIMIT_SETTINGS)
  check_rollout(env, first, ts, LIMIT if limited else None)
  check_keys_determine(run, keys, outputs)


@pytest.mark.parametrize("name", FIRST_OF_FAMILY)
def test_unbatched_unjitted_run_matches(name, benchmark_path):
  # Not jitted as a whole, so that anything impure in reset/step shows, nor
  # vmapped, so that no stream depends on another seed's.
  env, _, keys, outputs = rollout(name, **settings_for(name, benchmark_path))
  single = jax.device_get(rollout_fn(env)(keys[1]))
  jax.tree.map(lambda x, y: assert_same(x[1], y), outputs, single)


def assert_same(x, y) -> None:
  """Equal, floats up to the rounding of differently compiled programs."""
  if np.issubdtype(np.asarray(x).dtype, np.floating):
    np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
  else:
    np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("name", FIRST_OF_FAMILY)
def test_state_copies_step_alike(name, benchmark_path):
  env = registry.make_env(name, B, **settings_for(name, benchmark_path))
  if env.is_continuous:
    actions = random_actions(env, jax.random.PRNGKey(2), (B,))
  else:
    actions = jnp.arange(B, dtype=jnp.int32) % env.num_actions
  assert_copies_step_alike(env, actions)


@pytest.mark.parametrize("name", CONTINUOUS_JITTABLE)
def test_actions_beyond_the_bounds_act_as_clipped(name):
  env = registry.make_env(name, B, **settings_for(name))
  spec = env.action_spec()
  width = spec.maximum - spec.minimum
  state, _ = env.reset(jax.random.PRNGKey(7))
  above = jnp.arange(B)[:, None] % 2 == 0  # streams pushed above / below
  for t in range(3):
    # Actions beyond the bounds in every dimension (at step 1 exactly on
    # them).
    u = 1.0 + jax.random.uniform(jax.random.PRNGKey(t), (B,) + spec.shape)
    u = u if t != 1 else jnp.zeros_like(u)
    beyond = jnp.where(
        above, spec.maximum + u * width, spec.minimum - u * width
    )
    clipped = jnp.clip(beyond, spec.minimum, spec.maximum)
    expected = jax.device_get(env.step(state, clipped))
    state, ts = env.step(state, beyond)
    jax.tree.map(
        np.testing.assert_array_equal, jax.device_get((state, ts)), expected
    )


@pytest.mark.parametrize("name", HOST)
def test_host_environment_steps_from_a_loop(name, benchmark_path):
  settings = settings_for(name, benchmark_path)
  seeded = "seed" in registry.get_entry(name).settings

  def play():
    env = registry.make_env(
        name, B, **settings, **({"seed": 3} if seeded else {})
    )
    rng = np.random.default_rng(0)
    state, first = env.reset(jax.random.PRNGKey(3))
    steps = []
    for _ in range(STEPS):
      actions = rng.integers(0, env.num_actions, B).astype(np.int32)
      state, ts = env.step(state, actions)
      steps.append(ts)
    stacked = jax.tree.map(lambda *x: np.stack(x)[None], *steps)
    return env, jax.tree.map(lambda x: np.asarray(x)[None], first), stacked

  env, first, ts = play()
  assert not env.is_jittable
  check_rollout(env, first, ts)
  assert (ts.step_type == types.LAST).any()
  # The same seed setting or reset key, the same episodes.
  jax.tree.map(np.testing.assert_array_equal, (first, ts), play()[1:])
