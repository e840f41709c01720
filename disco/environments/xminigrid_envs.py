"""XLand-MiniGrid environments as batched, jittable disco environments.

Every id of xminigrid's registry is ``xminigrid/<id>`` (``ENV_NAMES``): the
MiniGrid ports (e.g. ``MiniGrid-Empty-8x8``) and XLand (e.g.
``XLand-MiniGrid-R1-9x9``), whose ruleset comes from a local benchmark file
(xminigrid's bz2 pickle; never downloaded, only its arrays read):

```python
env = xminigrid_envs.make("XLand-MiniGrid-R1-9x9", batch_size=16,
                          benchmark_path="/data/trivial_21k",
                          ruleset_id=3)
```

Settings: ``height``, ``width``, ``view_size``, ``max_steps`` (None:
xminigrid's default for the grid), ``num_objects`` (MiniGrid-Playground),
and for XLand ``benchmark_path`` (required) and ``ruleset_id`` (0).

Reaching the goal is a termination (LAST, discount 0), ``max_steps`` a
truncation (LAST, discount 1). Observations: ``[view_size, view_size, 2]``
(tile id, colour id) as float32; 6 actions.
"""

from __future__ import annotations

import bz2
from collections.abc import Callable
import dataclasses
import functools
import numbers
import os
import pickle
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from disco.environments import base
from disco.environments import suite_utils

PREFIX = "xminigrid/"
XLAND_PREFIX = "XLand-MiniGrid"

# The ids of xminigrid 0.9.3's registry (tests check this list against the
# installed xminigrid).
_XLAND_SIZES = {
    "R1": (9, 11, 13, 15, 17),
    "R2": (9, 11, 13, 15, 17),
    "R4": (9, 11, 13, 15, 17),
    "R6": (13, 17, 19),
    "R9": (16, 19, 25),
}
XLAND_IDS: tuple[str, ...] = tuple(
    f"{XLAND_PREFIX}-{rooms}-{size}x{size}"
    for rooms, sizes in _XLAND_SIZES.items()
    for size in sizes
)
MINIGRID_IDS: tuple[str, ...] = (
    "MiniGrid-BlockedUnlockPickUp",
    "MiniGrid-DoorKey-5x5",
    "MiniGrid-DoorKey-6x6",
    "MiniGrid-DoorKey-8x8",
    "MiniGrid-DoorKey-16x16",
    "MiniGrid-Empty-5x5",
    "MiniGrid-Empty-6x6",
    "MiniGrid-Empty-8x8",
    "MiniGrid-Empty-16x16",
    "MiniGrid-EmptyRandom-5x5",
    "MiniGrid-EmptyRandom-6x6",
    "MiniGrid-EmptyRandom-8x8",
    "MiniGrid-EmptyRandom-16x16",
    "MiniGrid-FourRooms",
    "MiniGrid-LockedRoom",
    "MiniGrid-MemoryS8",
    "MiniGrid-MemoryS16",
    "MiniGrid-MemoryS32",
    "MiniGrid-MemoryS64",
    "MiniGrid-MemoryS128",
    "MiniGrid-Playground",
    "MiniGrid-Unlock",
    "MiniGrid-UnlockPickUp",
)
ENV_IDS: tuple[str, ...] = XLAND_IDS + MINIGRID_IDS
ENV_NAMES: tuple[str, ...] = tuple(PREFIX + i for i in ENV_IDS)

# Parameter fields that are not settings: the ruleset comes from the
# benchmark file, the layout from the id, and nothing is rendered.
_NOT_SETTINGS = ("ruleset", "grid_type", "render_mode")
_BENCHMARK_KEYS = ("goals", "rules", "init_tiles", "num_rules")


def _strip(env_id: str) -> str:
  return env_id.removeprefix(PREFIX)


def _is_xland(env_id: str) -> bool:
  return env_id.startswith(XLAND_PREFIX)


@functools.cache
def _defaults(env_id: str) -> dict[str, Any]:
  """Accepted settings of ``env_id`` with their defaults."""
  import xminigrid  # pylint: disable=g-import-not-at-top

  _, params = xminigrid.make(env_id)
  defaults = {
      f.name: getattr(params, f.name)
      for f in dataclasses.fields(params)
      if f.name not in _NOT_SETTINGS
  }
  defaults["max_steps"] = None
  if _is_xland(env_id):
    defaults.update(benchmark_path=None, ruleset_id=0)
  return defaults


def _check_id(env_id: str) -> str:
  import xminigrid  # pylint: disable=g-import-not-at-top

  env_id = _strip(env_id)
  valid = list(xminigrid.registered_environments())
  if env_id not in valid:
    raise suite_utils.unknown_name_error("xminigrid environment", env_id, valid)
  return env_id


def _check_int(name: str, key: str, value: Any, minimum: int) -> None:
  if (
      isinstance(value, bool)
      or not isinstance(value, numbers.Integral)
      or value < minimum
  ):
    raise ValueError(
        f"Setting {key}={value!r} of environment {name!r} must be an integer "
        f">= {minimum}."
    )


def _array_from_jax_pickle(fun, args, array_state, aval_state):
  """``jax.Array``'s pickle reconstruction, as a NumPy array."""
  del aval_state
  value = fun(*args)
  value.__setstate__(array_state)
  return value


def _frombuffer(buffer, dtype, shape, order):
  return np.frombuffer(buffer, dtype=dtype).reshape(shape, order=order)


def _latin1_bytes(text: str, encoding: str = "latin1") -> bytes:
  """Pickle protocol 2's bytes (``_codecs.encode``), Latin-1 only."""
  if encoding != "latin1":
    raise pickle.UnpicklingError(f"bytes in encoding {encoding!r}")
  return text.encode("latin1")


# (module, name) -> what the restricted unpickler gives for it (NumPy 1 and
# 2 module names).
_ALLOWED_GLOBALS: dict[tuple[str, str], Any] = {
    ("_codecs", "encode"): _latin1_bytes,
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("jax._src.array", "_reconstruct_array"): _array_from_jax_pickle,
}
for _core in ("numpy.core", "numpy._core"):
  _ALLOWED_GLOBALS.update(
      {
          (f"{_core}.multiarray", "_reconstruct"): np.zeros(0).__reduce__()[0],
          (f"{_core}.multiarray", "scalar"): np.float32(0).__reduce__()[0],
          (f"{_core}.numeric", "_frombuffer"): _frombuffer,
      }
  )


class _ArrayUnpickler(pickle.Unpickler):
  """Unpickles containers of NumPy arrays only: any other global is refused
  before it is looked up."""

  def find_class(self, module: str, name: str) -> Any:
    found = _ALLOWED_GLOBALS.get((module, name))
    if found is None:
      raise pickle.UnpicklingError(
          f"it refers to {module}.{name}, which a ruleset file has no use "
          "for (only NumPy arrays are read; nothing in the file is run)"
      )
    return found


def load_benchmark(path: str | os.PathLike[str]) -> dict[str, Any]:
  """The dict of arrays of an xminigrid benchmark file (a bz2 pickle), read
  without running code.

  Raises:
    pickle.UnpicklingError: the file refers to anything but NumPy arrays.
    OSError, EOFError, ValueError: not a (complete) bz2 stream.
  """
  with bz2.open(path, "rb") as f:
    raw = _ArrayUnpickler(f).load()
  if not isinstance(raw, dict):
    raise ValueError(f"it holds a {type(raw).__name__}, not a dict")
  for key, value in raw.items():
    if isinstance(value, np.ndarray) and value.dtype.hasobject:
      raise ValueError(f"{key!r} is an object array, not numbers")
  return raw


def load_ruleset(
    benchmark_path: str | os.PathLike[str],
    ruleset_id: int,
    name: str = "xminigrid",
) -> Any:
  """Ruleset ``ruleset_id`` of a local benchmark file (``load_benchmark``),
  as an ``xminigrid.types.RuleSet``; ``name`` names the environment in
  errors.

  Raises:
    ValueError: for a missing or unreadable file or an out-of-range id.
  """
  from xminigrid import benchmarks  # pylint: disable=g-import-not-at-top

  if benchmark_path is None:
    raise ValueError(
        f"{name} needs the setting benchmark_path=<local ruleset benchmark "
        "file, xminigrid's bz2-pickle format> (disco never downloads "
        "benchmarks)."
    )
  if not isinstance(benchmark_path, (str, os.PathLike)):
    raise ValueError(
        f"Setting benchmark_path={benchmark_path!r} of {name!r} "
        "must be a path."
    )
  if not os.path.isfile(benchmark_path):
    raise ValueError(
        f"Setting benchmark_path={str(benchmark_path)!r} of "
        f"{name!r}: no such file."
    )
  try:
    raw = load_benchmark(os.fspath(benchmark_path))
    missing = [k for k in _BENCHMARK_KEYS if k not in raw]
  except Exception as e:  # pylint: disable=broad-except
    raise ValueError(
        f"Setting benchmark_path={str(benchmark_path)!r} of {name!r}: not a "
        f"ruleset benchmark file in xminigrid's format ({e!r})."
    ) from e
  if missing:
    raise ValueError(
        f"Setting benchmark_path={str(benchmark_path)!r} of {name!r}: the "
        f"file lacks {missing}."
    )
  benchmark = benchmarks.Benchmark(
      **{k: jnp.asarray(raw[k]) for k in _BENCHMARK_KEYS}
  )
  count = benchmark.num_rulesets()
  _check_int(name, "ruleset_id", ruleset_id, 0)
  if ruleset_id >= count:
    raise ValueError(
        f"Setting ruleset_id={ruleset_id} of {name!r} is out of range: "
        f"{benchmark_path} holds {count} rulesets (0 to {count - 1})."
    )
  return benchmark.get_ruleset(ruleset_id)


class XMiniGridEnvironment(suite_utils.SuiteEnvironment):
  """``batch_size`` streams of an xminigrid environment; the package state is
  xminigrid's ``TimeStep``, ``state.params`` holds the (XLand: per-stream)
  ruleset."""

  def _num_package_actions(self) -> int:
    return self.package_env.num_actions(self.package_params)

  def _reset_stream(self, params, key):
    timestep = self.package_env.reset(params, key)
    return timestep, timestep.observation

  def _step_stream(self, params, env_state, action, key):
    stepped = self.package_env.step(params, env_state, action)
    done = stepped.last()
    terminated = jnp.logical_and(done, stepped.discount == 0.0)
    truncated = jnp.logical_and(done, jnp.logical_not(terminated))
    fresh = self.package_env.reset(params, key)
    following = jax.tree.map(
        lambda new, old: jnp.where(done, new, old), fresh, stepped
    )
    return (
        following,
        following.observation,
        stepped.reward,
        terminated,
        truncated,
    )


def make(env_id: str, batch_size: int, **settings: Any) -> XMiniGridEnvironment:
  """Builds ``batch_size`` streams of xminigrid environment ``env_id``.

  Args:
    env_id: an xminigrid id (``"xminigrid/"`` prefix optional).
    batch_size: number of streams ``B`` (>= 1).
    **settings: see the module docstring and ``env_specs()``.

  Raises:
    ValueError: for an unknown id or setting, a bad value, or (XLand) a
      bad benchmark file or ruleset id.
  """
  import xminigrid  # pylint: disable=g-import-not-at-top

  env_id = _check_id(env_id)
  name = PREFIX + env_id
  defaults = _defaults(env_id)
  suite_utils.check_setting_names(name, settings, defaults)
  settings = {**defaults, **settings}
  ruleset = None
  if _is_xland(env_id):
    ruleset = load_ruleset(
        settings.pop("benchmark_path"), settings.pop("ruleset_id"), name
    )
  for key, value in settings.items():
    if key == "max_steps" and value is None:
      continue
    _check_int(name, key, value, 1)
  package_env, registered = xminigrid.make(env_id)
  # max_steps is left to xminigrid unless given: it follows the grid size.
  kwargs = {
      f.name: getattr(registered, f.name)
      for f in dataclasses.fields(registered)
      if f.name not in ("max_steps", "ruleset", "render_mode")
  }
  kwargs.update(settings)
  params = package_env.default_params(**kwargs)
  if ruleset is not None:
    params = params.replace(ruleset=ruleset)
  return XMiniGridEnvironment(batch_size, package_env, params, name)


@functools.cache
def env_specs() -> (
    dict[str, tuple[Callable[..., base.Environment], dict[str, Any]]]
):
  """``"xminigrid/<id>"`` -> ``(factory(batch_size, **settings), defaults)``;
  imports xminigrid but builds nothing."""
  return {
      PREFIX + i: (functools.partial(make, i), dict(_defaults(i)))
      for i in ENV_IDS
  }
