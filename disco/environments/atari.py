"""Atari 2600 games (the Arcade Learning Environment) as host environments
``atari/<Game>``, with the standard preprocessing.

Each agent step repeats the action for ``frame_skip`` frames and returns
the pixel-wise maximum of the last two, in grey, resized to 84x84, the
last ``frame_stack`` of them stacked: uint8 ``[B, 84, 84, 4]`` observations
(channels last). The defaults are the protocol of Machado et al. (2018):
sticky actions (``repeat_action_probability=0.25``), the full action set of
18, no loss-of-life episodes, no no-op starts, games cut at 108,000 frames
(a truncation); ``noop_max=30`` with ``repeat_action_probability=0`` is
the older protocol of Mnih et al. (2015). ``episodic_life=True`` ends the
game at the first life lost (a termination; the next episode is a new
game), not only the episode as DQN's wrapper did. Rewards are the game's score
changes, unclipped, so episode returns are game scores; the learner's
clipping is a loop setting (``reward_clip``).

Backends: ``envpool`` (batched C++, threads) where it installs, else
``ale`` (``ale-py`` through gymnasium's ``AtariPreprocessing``, one
process); both are in the ``atari`` extra. Their random streams differ, so
the same seed gives each its own (reproducible) episodes.
"""

from __future__ import annotations

import functools
import importlib.util
from typing import Any

import numpy as np

from disco.environments import gymnasium_envs

PREFIX = "atari/"
BACKENDS = ("auto", "envpool", "ale")
# The 57 games of the Atari benchmark (Badia et al. 2020), as ALE names.
GAMES: tuple[str, ...] = (
    "Alien", "Amidar", "Assault", "Asterix", "Asteroids", "Atlantis",
    "BankHeist", "BattleZone", "BeamRider", "Berzerk", "Bowling", "Boxing",
    "Breakout", "Centipede", "ChopperCommand", "CrazyClimber", "Defender",
    "DemonAttack", "DoubleDunk", "Enduro", "FishingDerby", "Freeway",
    "Frostbite", "Gopher", "Gravitar", "Hero", "IceHockey", "Jamesbond",
    "Kangaroo", "Krull", "KungFuMaster", "MontezumaRevenge", "MsPacman",
    "NameThisGame", "Phoenix", "Pitfall", "Pong", "PrivateEye", "Qbert",
    "Riverraid", "RoadRunner", "Robotank", "Seaquest", "Skiing", "Solaris",
    "SpaceInvaders", "StarGunner", "Surround", "Tennis", "TimePilot",
    "Tutankham", "UpNDown", "Venture", "VideoPinball", "WizardOfWor",
    "YarsRevenge", "Zaxxon",
)  # fmt: skip
# The 26 games of Atari-100k (Kaiser et al. 2020).
ATARI_100K_GAMES: tuple[str, ...] = (
    "Alien", "Amidar", "Assault", "Asterix", "BankHeist", "BattleZone",
    "Boxing", "Breakout", "ChopperCommand", "CrazyClimber", "DemonAttack",
    "Freeway", "Frostbite", "Gopher", "Hero", "Jamesbond", "Kangaroo",
    "Krull", "KungFuMaster", "MsPacman", "Pong", "PrivateEye", "Qbert",
    "RoadRunner", "Seaquest", "UpNDown",
)  # fmt: skip
# Atari-100k: 100k agent steps (400k frames at frame skip 4).
ATARI_100K_ENV_STEPS = 100_000
SETTINGS = dict(
    backend="auto",
    repeat_action_probability=0.25,
    full_action_space=True,
    noop_max=0,
    episodic_life=False,
    frame_skip=4,
    frame_stack=4,
    max_episode_frames=108_000,
)
SCREEN_SIZE = 84


class AtariError(ValueError):
  """Atari settings or packages that cannot work."""


def available_backends() -> tuple[str, ...]:
  """The installed backends, preferred first."""
  return tuple(
      b
      for b, module in (("envpool", "envpool"), ("ale", "ale_py"))
      if importlib.util.find_spec(module) is not None
  )


def _backend(backend: str) -> str:
  if backend not in BACKENDS:
    raise AtariError(f"backend={backend!r}: use one of {', '.join(BACKENDS)}.")
  installed = available_backends()
  if backend == "auto":
    if not installed:
      raise ImportError(
          "Atari needs envpool or ale-py: pip install -e '.[atari]'."
      )
    return installed[0]
  if backend not in installed:
    package = "envpool" if backend == "envpool" else "ale-py"
    raise ImportError(
        f"Atari backend {backend!r} needs {package}: pip install -e "
        "'.[atari]' (or use backend='auto')."
    )
  return backend


def _check(settings: dict[str, Any]) -> None:
  p = settings["repeat_action_probability"]
  if not 0.0 <= float(p) < 1.0:
    raise AtariError(f"repeat_action_probability={p} must be in [0, 1).")
  for key, low in (
      ("noop_max", 0),
      ("frame_skip", 1),
      ("frame_stack", 1),
      ("max_episode_frames", 1),
  ):
    if int(settings[key]) < low:
      raise AtariError(f"{key}={settings[key]} must be >= {low}.")


def _channels_last(obs: np.ndarray) -> np.ndarray:
  # A view: the copy happens once, where the host loop moves it to the device.
  return np.moveaxis(obs, 1, -1)


class _EnvpoolVector:
  """An envpool Atari pool with gymnasium's vector interface and same-step
  resets (envpool itself resets in the next step)."""

  def __init__(self, pool: Any):
    import gymnasium  # pylint: disable=g-import-not-at-top

    self._pool = pool
    self.num_envs = int(pool.config["num_envs"])
    self.single_observation_space = gymnasium.spaces.Box(
        0, 255, pool.observation_space.shape, np.uint8
    )
    self.single_action_space = gymnasium.spaces.Discrete(
        int(pool.action_space.n)
    )
    self.metadata = {"autoreset_mode": gymnasium.vector.AutoresetMode.SAME_STEP}

  def reset(self, seed: int | None = None):
    del seed  # the pool's seed is set when it is made
    obs, info = self._pool.reset()
    return obs[np.argsort(info["env_id"])], {}

  def step(self, actions: np.ndarray):
    obs, reward, terminated, truncated, info = self._pool.step(
        np.asarray(actions, np.int32)
    )
    order = np.asarray(info["env_id"])
    if (order != np.arange(self.num_envs)).any():  # sync pools keep order
      order = np.argsort(order)
      obs, reward = obs[order], reward[order]
      terminated, truncated = terminated[order], truncated[order]
    ended = np.flatnonzero(terminated | truncated)
    if ended.size:
      first, first_info = self._pool.reset(ended.astype(np.int32))
      obs = obs.copy()
      obs[first_info["env_id"]] = first
    return obs, reward, terminated, truncated, {}

  def close(self) -> None:
    close = getattr(self._pool, "close", None)
    if close is not None:
      close()


def envpool_pool(game: str, batch_size: int, seed: int = 0, **settings) -> Any:
  """envpool's own batched pool of ``batch_size`` games with the preprocessing
  of ``atari/<game>`` (``settings``: ``SETTINGS`` keys, their defaults
  otherwise), stepping in envpool's way: a finished game resets in the next
  step. ``atari/<game>`` wraps it; benchmarks step it bare as the reference.
  """
  import envpool  # pylint: disable=g-import-not-at-top

  s = {**SETTINGS, **settings}
  return envpool.make(
      f"{game}-v5",
      env_type="gymnasium",
      num_envs=batch_size,
      seed=seed,
      repeat_action_probability=float(s["repeat_action_probability"]),
      full_action_space=bool(s["full_action_space"]),
      noop_max=max(int(s["noop_max"]), 1),  # envpool: 1 means none
      episodic_life=bool(s["episodic_life"]),
      frame_skip=int(s["frame_skip"]),
      stack_num=int(s["frame_stack"]),
      max_episode_steps=int(s["max_episode_frames"]) // int(s["frame_skip"]),
      reward_clip=False,
      use_fire_reset=False,
      img_height=SCREEN_SIZE,
      img_width=SCREEN_SIZE,
      gray_scale=True,
  )


def _ale_vector(game: str, batch_size: int, s: dict) -> Any:
  gym = gymnasium_envs.import_gymnasium()
  wrappers = gym.wrappers
  preprocess = functools.partial(
      wrappers.AtariPreprocessing,
      noop_max=int(s["noop_max"]),
      frame_skip=int(s["frame_skip"]),
      screen_size=SCREEN_SIZE,
      terminal_on_life_loss=bool(s["episodic_life"]),
      grayscale_obs=True,
  )
  stack = functools.partial(
      wrappers.FrameStackObservation, stack_size=int(s["frame_stack"])
  )
  return gym.make_vec(
      f"ALE/{game}-v5",
      num_envs=batch_size,
      vectorization_mode="sync",
      vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
      wrappers=[preprocess, stack],
      frameskip=1,
      repeat_action_probability=float(s["repeat_action_probability"]),
      full_action_space=bool(s["full_action_space"]),
      max_num_frames_per_episode=int(s["max_episode_frames"]),
  )


def make(game: str, batch_size: int, **settings: Any):
  """``batch_size`` streams of Atari ``game`` (a name in ``GAMES``).

  Args:
    game: e.g. ``"Breakout"``.
    batch_size: streams ``B`` (>= 1).
    **settings: ``SETTINGS`` keys (their defaults otherwise).

  Returns:
    A ``gymnasium_envs.GymnasiumEnv``: uint8 ``[B, 84, 84, frame_stack]``
    observations, ``[B]`` int32 actions.

  Raises:
    AtariError: for an unknown game or setting value.
    ImportError: one line naming the extra, without a backend.
  """
  if game not in GAMES:
    raise AtariError(
        f"Unknown Atari game {game!r}; the games are {', '.join(GAMES)}."
    )
  s = {**SETTINGS, **settings}
  _check(s)
  if int(batch_size) < 1:
    raise AtariError(f"batch_size={batch_size} must be >= 1.")
  backend = _backend(str(s["backend"]))

  def make_vector(seed: int):
    if backend == "envpool":
      return _EnvpoolVector(envpool_pool(game, int(batch_size), seed, **s))
    return _ale_vector(game, int(batch_size), s)  # seeded by its reset

  return gymnasium_envs.GymnasiumEnv(make_vector, _channels_last)
