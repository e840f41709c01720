"""gymnax environments as batched, jittable disco environments.

Every id of gymnax 1.0.1's registry is ``gymnax/<id>``: discrete
(``DISCRETE_IDS``) or continuous (``CONTINUOUS_IDS``; ``[B, D]`` actions
clipped to the ``Box`` bounds):

```python
env = gymnax_envs.make("CartPole-v1", batch_size=32,
                       max_steps_in_episode=200)
```

Settings: the constructor arguments and parameter fields (``env_specs()``).
gymnax's ``terminated`` and ``truncated`` flags are kept, so environments
that end only by their time limit (e.g. Freeway-MinAtar, the bandits) end
with discount 1. Observations keep gymnax's shape, as float32.
MNISTBandit-bsuite needs its MNIST files in ``/tmp/mnist`` (never
downloaded).
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
import functools
import inspect
import os
from typing import Any

import numpy as np

from disco.environments import base
from disco.environments import suite_utils

PREFIX = "gymnax/"

# The discrete-action ids of gymnax 1.0.1's registry (tests check this list
# against the installed gymnax).
DISCRETE_IDS: tuple[str, ...] = (
    "CartPole-v1",
    "Acrobot-v1",
    "MountainCar-v0",
    "Asterix-MinAtar",
    "Breakout-MinAtar",
    "Freeway-MinAtar",
    "Seaquest-MinAtar",
    "SpaceInvaders-MinAtar",
    "Catch-bsuite",
    "DeepSea-bsuite",
    "MemoryChain-bsuite",
    "UmbrellaChain-bsuite",
    "DiscountingChain-bsuite",
    "MNISTBandit-bsuite",
    "SimpleBandit-bsuite",
    "FourRooms-misc",
    "MetaMaze-misc",
    "BernoulliBandit-misc",
    "GaussianBandit-misc",
    "Pong-misc",
    "FrozenLake-misc",
)
# The continuous-action ids of gymnax 1.0.1's registry (Box action spaces).
CONTINUOUS_IDS: tuple[str, ...] = (
    "Pendulum-v1",
    "MountainCarContinuous-v0",
    "PointRobot-misc",
    "Reacher-misc",
    "Swimmer-misc",
)
ENV_IDS: tuple[str, ...] = DISCRETE_IDS + CONTINUOUS_IDS
ENV_NAMES: tuple[str, ...] = tuple(PREFIX + i for i in ENV_IDS)
CONTINUOUS_NAMES: tuple[str, ...] = tuple(PREFIX + i for i in CONTINUOUS_IDS)

MNIST_ID = "MNISTBandit-bsuite"
MNIST_DIR = "/tmp/mnist"  # where gymnax's loader looks (and downloads to)
MNIST_FILES = (
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
)


def _import_gymnax():
  """Imports gymnax, with a clear message if ``six`` is missing."""
  try:
    import gymnax  # pylint: disable=g-import-not-at-top
  except ModuleNotFoundError as e:
    if e.name == "six":
      raise ImportError(
          "gymnax needs the package `six` when imported: pip install six"
      ) from e
    raise
  return gymnax


def _check_mnist_files() -> None:
  missing = [
      f for f in MNIST_FILES if not os.path.isfile(os.path.join(MNIST_DIR, f))
  ]
  if missing:
    raise ValueError(
        f"{PREFIX}{MNIST_ID} needs the MNIST files {missing} in {MNIST_DIR}: "
        "gymnax downloads them when it builds the environment, which disco "
        "never does. Put them there first, or use another environment."
    )


def _strip(env_id: str) -> str:
  return env_id.removeprefix(PREFIX)


def _constructor_defaults(cls: type[Any]) -> dict[str, Any]:
  """Keyword arguments (with defaults) of an environment's constructor."""
  params = inspect.signature(cls.__init__).parameters.values()
  kinds = (
      inspect.Parameter.POSITIONAL_OR_KEYWORD,
      inspect.Parameter.KEYWORD_ONLY,
  )
  return {
      p.name: p.default
      for p in params
      if p.name != "self"
      and p.kind in kinds
      and p.default is not inspect.Parameter.empty
  }


def _params_fields(params: Any) -> dict[str, Any]:
  return {f.name: getattr(params, f.name) for f in dataclasses.fields(params)}


@functools.cache
def _defaults(env_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
  """``(constructor defaults, parameter defaults)`` of an id."""
  gymnax = _import_gymnax()
  if env_id == MNIST_ID:
    # Built only from its class: building it would download MNIST.
    # pylint: disable-next=g-import-not-at-top
    from gymnax.environments.bsuite import mnist

    return (
        _constructor_defaults(mnist.MNISTBandit),
        _params_fields(mnist.EnvParams()),
    )
  env, params = gymnax.make(env_id)
  ctor = _constructor_defaults(type(env))
  fields = _params_fields(params)
  clash = sorted(set(ctor) & set(fields))
  if clash:  # not the case in gymnax 1.0.1
    raise ValueError(
        f"{PREFIX}{env_id}: settings {clash} are both "
        "constructor arguments and parameters."
    )
  return ctor, fields


def _check_id(env_id: str) -> str:
  """The bare gymnax id of a supported environment, or ``ValueError``."""
  gymnax = _import_gymnax()
  env_id = _strip(env_id)
  valid = [i for i in gymnax.registered_envs if i in ENV_IDS]
  if env_id in valid:
    return env_id
  raise suite_utils.unknown_name_error("gymnax environment", env_id, valid)


class GymnaxEnvironment(suite_utils.SuiteEnvironment):
  """``batch_size`` streams of a gymnax environment, stepped (and reset) by
  gymnax's own ``step``."""

  def _num_package_actions(self) -> int:
    return self.package_env.action_space(self.package_params).n

  def _package_action_bounds(self):
    from gymnax.environments import spaces  # pylint: disable=g-import-not-at-top

    space = self.package_env.action_space(self.package_params)
    if isinstance(space, spaces.Discrete):
      return None
    return (
        np.broadcast_to(np.asarray(space.low, np.float32), space.shape),
        np.broadcast_to(np.asarray(space.high, np.float32), space.shape),
    )

  def _reset_stream(self, params, key):
    obs, env_state = self.package_env.reset(key, params)
    return env_state, obs

  def _step_stream(self, params, env_state, action, key):
    obs, env_state, reward, terminated, truncated, _ = self.package_env.step(
        key, env_state, action, params
    )
    return env_state, obs, reward, terminated, truncated


def make(env_id: str, batch_size: int, **settings: Any) -> GymnaxEnvironment:
  """Builds ``batch_size`` streams of gymnax environment ``env_id``.

  Args:
    env_id: a gymnax id (``"gymnax/"`` prefix optional).
    batch_size: number of streams ``B`` (>= 1).
    **settings: constructor arguments and parameters (``env_specs()``).

  Raises:
    ValueError: for an unknown id or setting, a bad value,
      MNISTBandit-bsuite without its files, or an action space neither
      discrete nor a ``[D]`` box.
  """
  gymnax = _import_gymnax()
  from gymnax.environments import spaces  # pylint: disable=g-import-not-at-top

  env_id = _check_id(env_id)
  name = PREFIX + env_id
  ctor_defaults, param_defaults = _defaults(env_id)
  suite_utils.check_setting_names(
      name, settings, {**ctor_defaults, **param_defaults}
  )
  defaults = {**ctor_defaults, **param_defaults}
  for key, value in settings.items():
    suite_utils.check_setting_value(name, key, value, defaults[key])
  if env_id == MNIST_ID:
    _check_mnist_files()
  ctor_kwargs = {k: v for k, v in settings.items() if k in ctor_defaults}
  overrides = {k: v for k, v in settings.items() if k in param_defaults}
  package_env, params = gymnax.make(env_id, **ctor_kwargs)
  params = params.replace(**overrides)
  space = package_env.action_space(params)
  discrete = isinstance(space, spaces.Discrete)
  if discrete != (env_id in DISCRETE_IDS) or (
      not discrete and len(space.shape) != 1
  ):
    raise ValueError(
        f"{name}: unexpected action space {space!r} (this adapter supports "
        "gymnax 1.0.1's discrete spaces and boxes of shape [D])."
    )
  return GymnaxEnvironment(batch_size, package_env, params, name)


@functools.cache
def env_specs() -> (
    dict[str, tuple[Callable[..., base.Environment], dict[str, Any]]]
):
  """``"gymnax/<id>"`` -> ``(factory(batch_size, **settings), defaults)``;
  imports gymnax and builds each environment once."""
  specs = {}
  for env_id in ENV_IDS:
    ctor, fields = _defaults(env_id)
    specs[PREFIX + env_id] = (
        functools.partial(make, env_id),
        {**ctor, **fields},
    )
  return specs
