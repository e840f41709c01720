"""gymnax environments as batched, jittable ``disco`` environments.

Every environment of gymnax's registry is available as ``gymnax/<id>``
(``ENV_NAMES``), e.g. ``gymnax/CartPole-v1`` or ``gymnax/Breakout-MinAtar``
(discrete actions, ``DISCRETE_IDS``) and ``gymnax/Pendulum-v1`` or
``gymnax/MountainCarContinuous-v0`` (continuous actions,
``CONTINUOUS_IDS``).

  env = gymnax_envs.make("CartPole-v1", batch_size=32,
                         max_steps_in_episode=200)

Settings are the environment's constructor arguments (e.g. ``rows`` and
``columns`` of Catch-bsuite, ``size`` of DeepSea-bsuite,
``use_minimal_action_set`` of MinAtar) and the fields of its parameters
dataclass (e.g. ``max_steps_in_episode``, ``gravity``); ``env_specs()`` lists
them with their defaults.

gymnax (1.0.1) ``step(key, state, action, params)`` returns six values
``(obs, state, reward, terminated, truncated, info)`` and resets by itself: on
``terminated or truncated`` the returned state and observation are those of
a fresh episode drawn from the same key (the final observation is in
``info["final_observation"]``). ``terminated`` is the environment's natural
end (a fallen pole, a lost game); ``truncated`` is
``state.time >= params.max_steps_in_episode``. The adapter keeps both flags as
they are: LAST with discount 0 where terminated, LAST with discount 1 where
only truncated. (Some gymnax environments end only by their time limit, e.g.
Freeway-MinAtar, DiscountingChain-bsuite and the misc bandits; gymnax calls
those ends truncations, so they have discount 1 here too.)

Actions. A discrete environment takes ``[B]`` int32 actions in
``[0, num_actions)``. A continuous one takes ``[B, D]`` float32 actions; its
``action_spec()`` has the bounds of gymnax's ``Box`` action space at the
environment's parameters (Pendulum-v1: ``[1]`` in ``[-2, 2]``, the
``max_torque`` setting; MountainCarContinuous-v0: ``[1]`` in ``[-1, 1]``;
PointRobot-misc: ``[2]`` in ``[-0.1, 0.1]``; Reacher-misc and Swimmer-misc:
``[2]`` in ``[-1, 1]``), and actions are clipped to them before gymnax sees
them.

Observations keep gymnax's shape (e.g. ``[4]`` for CartPole, ``[10, 10, C]``
for MinAtar) and are cast to float32. gymnax is imported only when an
environment is built, so ``import disco`` stays fast; gymnax needs ``six``
when imported.

MNISTBandit-bsuite downloads MNIST into ``/tmp/mnist`` when built; it is only
built here when those files are already there (``make`` says which).
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
  """``batch_size`` streams of a gymnax environment.

  ``reset(rng)`` -> ``(SuiteState, EnvTimestep)`` with observations
  ``[B, *gymnax obs shape]`` float32 and step_type FIRST; ``step(state,
  actions)`` (``[B]`` int32, or ``[B, D]`` float32 for a continuous action
  space, clipped to its bounds) steps every stream with gymnax's own
  ``step`` (which resets finished episodes) and maps its
  ``terminated``/``truncated`` flags to LAST with discount 0/1.
  """

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
    env_id: a gymnax id such as ``"CartPole-v1"`` or ``"Pendulum-v1"``
      (with or without the ``"gymnax/"`` prefix).
    batch_size: number of streams ``B`` (>= 1).
    **settings: constructor arguments and parameter overrides (see
      ``env_specs()``).

  Returns:
    A jittable ``GymnaxEnvironment``.

  Raises:
    ValueError: for an unknown id (naming the valid ones), an unknown
      setting (naming the valid ones), an ill-typed value, MNISTBandit-bsuite
      without its data files, or an action space that is neither discrete
      nor a box of dimension ``[D]``.
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
  """``"gymnax/<id>"`` -> ``(factory(batch_size, **settings), defaults)``.

  The defaults are the environment's constructor arguments and the fields of
  its default parameters (this imports gymnax and builds each environment
  once, except MNISTBandit-bsuite, whose defaults come from its class).
  """
  specs = {}
  for env_id in ENV_IDS:
    ctor, fields = _defaults(env_id)
    specs[PREFIX + env_id] = (
        functools.partial(make, env_id),
        {**ctor, **fields},
    )
  return specs
