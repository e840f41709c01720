"""Reference scores (uniform random policy and a reference, with sources)
and normalisation against them: ``(score - random) / (reference -
random)``.

``REFERENCE_TABLE`` holds the ``ReferenceEntry`` of each key;
``overrides={env: ReferenceEntry(...)}`` take precedence. Without an entry
or a ``reference_return`` normalising raises ``MissingReferenceError``.
Keys: ``"catch/<rows>x<columns>"`` (any size, ``catch_entry``; ``"catch"``
is 8x8), ``"delayed_chain"``, ``"gymnax/<id>"``, ``"xminigrid/<id>"``,
``"brax/<id>"``, ``"craftax/<id>"``, ``"jumanji/Sokoban-v0"``,
``"atari/<Game>"`` (Atari-100k's 26 games, human-normalised); ``env_key``
gives an environment's key. The LPG grid worlds have none.
Comparisons, meta-training's validation (through ``disco.scoring``) and ES
fitness (``disco.meta.es``) normalise with this table.
"""

from __future__ import annotations

from collections.abc import Mapping
import dataclasses
import json
import re
import types

import numpy as np

from disco.environments import registry as env_registry

_GYMNAX_README = (
    "gymnax README (github.com/RobertTLange/gymnax, commit 086ad956), table "
    "'Implemented Accelerated Environments', column 'Ckpt (Return)'"
)
_BLINES = (
    "gymnax-blines (github.com/RobertTLange/gymnax-blines, commit " "3f029d6b)"
)
_RANDOM_CMD = (
    "measured: python benchmarks/random_returns.py --episodes 4096 "
    "--seed 0 (uniform random actions, default parameters"
)
_XMINIGRID_SRC = (
    "xminigrid 0.9.3 (github.com/corl-team/xland-minigrid): reward "
    "1 - 0.9 * steps / max_steps on reaching the goal "
    "(src/xminigrid/environment.py)"
)


@dataclasses.dataclass(frozen=True)
class ReferenceEntry:
  """The two anchors of one environment's normalisation and their sources.

  Attributes:
    env: the table key, e.g. ``"gymnax/Breakout-MinAtar"``.
    random_return: mean episode return of the uniform random policy (0).
    random_source: how ``random_return`` was obtained.
    reference_return: the return that normalises to 1, or None if unknown.
    reference_algorithm: what achieves it (or "optimal policy").
    budget_env_steps: the reference's training steps (None: an optimum or
      unknown).
    source: citation of ``reference_return``.
    notes: caveats.
    any_settings: the anchors hold for every setting (``env(key=value,...)``
      falls back to ``env``).
  """

  env: str
  random_return: float
  random_source: str
  reference_return: float | None
  reference_algorithm: str
  budget_env_steps: int | None
  source: str
  notes: str = ""
  any_settings: bool = False


class MissingReferenceError(ValueError):
  """An environment has no (trustworthy) reference return."""


# ---------------------------------------------------------------- catch ----


def catch_entry(rows: int = 8, columns: int = 8) -> ReferenceEntry:
  """The exact entry of disco's Catch with ``rows`` x ``columns``: random
  ``2 / columns - 1``, optimal ``2 * reachable / columns - 1`` (the paddle
  reaches ``rows - 1`` columns either side of column ``columns // 2``)."""
  if rows < 2 or columns < 1:
    raise ValueError(
        f"Catch needs rows >= 2 and columns >= 1, got {rows}x" f"{columns}."
    )
  start = columns // 2
  reachable = sum(abs(x - start) <= rows - 1 for x in range(columns))
  return ReferenceEntry(
      env=f"catch/{rows}x{columns}",
      random_return=2.0 / columns - 1.0,
      random_source=(
          f"exact: P(catch) = 1/{columns} because the ball's column is "
          "uniform and independent of a policy that ignores it; return = "
          f"2/{columns} - 1"
      ),
      reference_return=2.0 * reachable / columns - 1.0,
      reference_algorithm="optimal policy (exact)",
      budget_env_steps=None,
      source=(
          f"exact: the paddle starts in column {start} and moves at most one "
          f"column in each of the {rows - 1} steps, so it can be under "
          f"{reachable} of the {columns} start columns; disco/environments/"
          "catch.py (+1 catch, -1 miss)"
      ),
  )


# ---------------------------------------------------------------- table ----


def _gymnax_minatar(
    name: str, random_return: float, sem: float, reference: float
) -> ReferenceEntry:
  return ReferenceEntry(
      env=f"gymnax/{name}",
      random_return=random_return,
      random_source=f"{_RANDOM_CMD}, minimal action set): {random_return} "
      f"+- {sem} s.e.m. over 4096 episodes",
      reference_return=reference,
      reference_algorithm="PPO (gymnax-blines checkpoint)",
      budget_env_steps=10_000_000,
      source=(
          f"{_GYMNAX_README}, row {name}: 'PPO (R: {reference:g})'; "
          f"budget: num_train_steps in {_BLINES} "
          f"agents/{name}/ppo.yaml"
      ),
      notes=(
          "Rounded to an integer in the source; evaluated on gymnax's "
          "MinAtar port, which differs from the original MinAtar (no "
          "sticky actions, time limit of max_steps_in_episode)."
      ),
  )


def _gymnax_control(
    name: str,
    random_return: float,
    sem: float,
    reference: float,
    ppo_steps: int,
    es_config: str,
    extra_note: str = "",
) -> ReferenceEntry:
  return ReferenceEntry(
      env=f"gymnax/{name}",
      random_return=random_return,
      random_source=f"{_RANDOM_CMD}): {random_return} +- {sem} s.e.m. over "
      "4096 episodes",
      reference_return=reference,
      reference_algorithm="PPO or ES (gymnax-blines checkpoints)",
      budget_env_steps=None,
      source=f"{_GYMNAX_README}, row {name}: 'PPO, ES (R: {reference:g})'",
      notes=(
          "The source gives one rounded return for its PPO and ES "
          "checkpoints without saying which reached it, so the budget is "
          f"unknown: {_BLINES} trains PPO for {ppo_steps:,} env steps "
          f"(agents/{name}/ppo.yaml) and ES for {es_config} "
          f"(agents/{name}/es.yaml).{extra_note}"
      ),
  )


_BRAX_RANDOM_CMD = (
    "measured: python benchmarks/random_returns.py --envs {name} --episodes "
    "{episodes} --seed 0 (uniform actions in [-1, 1]^D through disco's "
    "adapter, brax 0.14.2, backend positional, episode_length 1000)"
)
_BRAX_NO_REFERENCE = (
    "none documented for brax 0.14's environments: brax's training notebook "
    "(github.com/google/brax, notebooks/training.ipynb) gives PPO and SAC "
    "hyperparameters per environment and a plotted curve, no tabulated "
    "return (its stored plot does not match the hyperparameters beside it); "
    "purejaxrl's ppo_continuous_action.py publishes none; the returns of "
    "the Brax paper (Freeman et al. 2021) are of brax's older v1 "
    "environments (other bodies, rewards and observations)"
)
# id -> (random return, its s.e.m., episodes): benchmarks/random_returns.py.
_BRAX_RANDOM = {
    "ant": (-183.3508, 21.8798, 64),
    "halfcheetah": (-115.7181, 6.856, 64),
    "hopper": (92.3677, 11.8946, 64),
    "walker2d": (284.2074, 20.5147, 64),
    "humanoid": (413.124, 7.6245, 64),
    "humanoidstandup": (6841.9152, 38.1945, 64),
    "inverted_pendulum": (23.2656, 0.7466, 256),
    "inverted_double_pendulum": (502.0661, 6.8617, 256),
    "reacher": (-831.9896, 2.2716, 256),
    "pusher": (-1534.5526, 11.552, 64),
}


def _brax_entries() -> list[ReferenceEntry]:
  """The Brax entries (default settings): measured random returns, the exact
  maximum of ``brax/inverted_pendulum``, no reference for the others."""
  entries = []
  for env_id, (random_return, sem, episodes) in _BRAX_RANDOM.items():
    name = f"brax/{env_id}"
    command = _BRAX_RANDOM_CMD.format(name=name, episodes=episodes)
    common = dict(
        env=name,
        random_return=random_return,
        random_source=f"{command}: {random_return} +- {sem} s.e.m. over "
        f"{episodes} episodes",
    )
    if env_id == "inverted_pendulum":
      entries.append(
          ReferenceEntry(
              **common,
              reference_return=1000.0,
              reference_algorithm="optimal policy (maximum return)",
              budget_env_steps=None,
              source=(
                  "exact maximum: brax's InvertedPendulum pays +1 per step "
                  "while the pole is within 0.2 rad of upright "
                  "(brax/envs/inverted_pendulum.py), and an episode lasts "
                  "at most episode_length=1000 steps"
              ),
          )
      )
      continue
    entries.append(
        ReferenceEntry(
            **common,
            reference_return=None,
            reference_algorithm="none",
            budget_env_steps=None,
            source=_BRAX_NO_REFERENCE,
            notes=(
                "no documented reference return for brax 0.14's "
                f"{env_id} at backend positional and episode_length 1000"
            ),
        )
    )
  return entries


def _delayed_chain_entry() -> ReferenceEntry:
  """The delayed chain's exact entry (every variant)."""
  return ReferenceEntry(
      env="delayed_chain",
      random_return=0.0,
      random_source=(
          "exact: only the first action matters and a uniform random "
          "one is the rewarded one with probability 1/2 (+1, else -1)"
      ),
      reference_return=1.0,
      reference_algorithm="optimal policy (exact)",
      budget_env_steps=None,
      source=(
          "exact: the start state shows the rewarded first action "
          "(disco/environments/delayed_chain.py); the same for every "
          "variant and chain length (noisy variants add zero-mean "
          "rewards)"
      ),
      any_settings=True,
  )


def _cartpole_entry() -> ReferenceEntry:
  """CartPole's entry: the maximum return."""
  return ReferenceEntry(
      env="gymnax/CartPole-v1",
      random_return=22.2026,
      random_source=f"{_RANDOM_CMD}): 22.2026 +- 0.1843 s.e.m. over "
      "4096 episodes",
      reference_return=500.0,
      reference_algorithm="optimal policy (maximum return)",
      budget_env_steps=None,
      source=(
          "exact maximum: +1 per step and max_steps_in_episode=500 "
          "in gymnax's CartPole-v1 parameters; the same as the "
          f"{_GYMNAX_README}, row CartPole-v1: 'PPO, ES (R: 500)'"
      ),
  )


def _xminigrid_entries() -> list[ReferenceEntry]:
  """The exact xminigrid entries."""
  return [
      ReferenceEntry(
          env="xminigrid/MiniGrid-Empty-8x8",
          random_return=0.1117,
          random_source=f"{_RANDOM_CMD}, 6 actions): 0.1117 +- 0.0034 s.e.m. "
          "over 4096 episodes",
          reference_return=1.0 - 0.9 * 11 / 256,
          reference_algorithm="optimal policy (exact)",
          budget_env_steps=None,
          source=(
              "exact: the agent always starts at (1, 1) facing right and the "
              "goal is at (6, 6), so the shortest solution is 5 forward, 1 "
              "turn, 5 forward = 11 steps; max_steps = 4 * 8 * 8 = 256; "
              f"{_XMINIGRID_SRC}: 1 - 0.9 * 11 / 256 = 0.961328125 (confirmed "
              "by the breadth-first search of benchmarks/random_returns.py)"
          ),
      ),
      ReferenceEntry(
          env="xminigrid/MiniGrid-DoorKey-5x5",
          random_return=0.0464,
          random_source=f"{_RANDOM_CMD}, 6 actions): 0.0464 +- 0.0023 s.e.m. "
          "over 4096 episodes",
          reference_return=0.9646,
          reference_algorithm="optimal policy (exact, mean over layouts)",
          budget_env_steps=None,
          source=(
              "exact: the generator has 48 equally likely start layouts (2 "
              "door rows x 3 * 2 key/agent cells x 4 directions); a "
              "breadth-first search over xminigrid's own step function "
              "(benchmarks/random_returns.py, 2048 resets) finds their "
              "shortest solutions, 7 to 14 steps (9.83 on average); "
              f"max_steps = 10 * 5 * 5 = 250; {_XMINIGRID_SRC}: mean optimal "
              "return 0.9646"
          ),
      ),
  ]


_OPEN_RANDOM_CMD = (
    "measured: python benchmarks/open_env_returns.py random --episodes "
    "{episodes} --seed 0 (uniform random actions through disco's adapter, "
    "default settings; each stream's first episode)"
)
_CRAFTAX_PAPER = (
    "Matthews et al. (2024), Craftax: A Lightning-Fast Benchmark for "
    "Open-Ended Reinforcement Learning, ICML (arXiv:2402.16801)"
)


def _open_env_entries() -> list[ReferenceEntry]:
  """Craftax (the package's games) and Sokoban (jumanji's toy levels)."""
  classic = "craftax/Craftax-Classic-Symbolic-v1"
  full = "craftax/Craftax-Symbolic-v1"
  return [
      ReferenceEntry(
          env=classic,
          random_return=1.6029,
          random_source=_OPEN_RANDOM_CMD.format(episodes=1024)
          + "): 1.6029 +- 0.0412 s.e.m. over 1024 episodes (147 steps on "
          "average)",
          reference_return=0.9 * 22,
          reference_algorithm="PPO (Craftax authors' purejaxrl-based PPO)",
          budget_env_steps=1_000_000_000,
          source=(
              f"{_CRAFTAX_PAPER}, abstract: PPO with 1 billion environment "
              "interactions 'averages 90% of the optimal reward' on "
              "Craftax-Classic; the optimum is 22 (+1 per achievement, 22 "
              "achievements; the +-0.1 per health point changed sums to at "
              "most 0 from full health): 0.9 * 22 = 19.8"
          ),
          notes=(
              "A rounded percentage from the abstract, converted with the "
              "optimum of 22; symbolic observations. For the default "
              "settings (other ones, even reset_ratio, make another key)."
          ),
      ),
      ReferenceEntry(
          env=full,
          random_return=1.0834,
          random_source=_OPEN_RANDOM_CMD.format(episodes=1024)
          + "): 1.0834 +- 0.0365 s.e.m. over 1024 episodes (264 steps on "
          "average)",
          reference_return=0.119 * 226,
          reference_algorithm="PPO (Craftax authors' Craftax_Baselines ppo.py)",
          budget_env_steps=1_000_000_000,
          source=(
              "Craftax README (github.com/MichaelTMatthews/Craftax, commit "
              "0a2f7f99), Scoreboard, Craftax-1B: PPO 11.9 (reward as % of "
              f"the maximum, 226), from {_CRAFTAX_PAPER}: 0.119 * 226 = "
              "26.894"
          ),
          notes=(
              "At 1 million steps (Craftax-1M) the same table gives PPO "
              "2.2% (4.972). For the default settings (other ones, even "
              "reset_ratio, make another key)."
          ),
      ),
      ReferenceEntry(
          env="jumanji/Sokoban-v0",
          random_return=-11.8494,
          random_source=_OPEN_RANDOM_CMD.format(episodes=4096)
          + ", jumanji's toy levels): -11.8494 +- 0.0058 s.e.m. over 4096 "
          "episodes (all of them reach the 120-step limit)",
          reference_return=0.95,
          reference_algorithm="optimal policy (exact, mean over levels)",
          budget_env_steps=None,
          source=(
              "exact: python benchmarks/open_env_returns.py sokoban_optimal "
              "(breadth-first search with jumanji's rules, replayed in the "
              "environment). jumanji's ToyGenerator draws one of two levels "
              "with probability 1/2: the first is solved in 31 steps at best "
              "(-0.1 per step, +1 per box onto a target, +10 for solving: "
              "10.9); the second cannot be solved (a box starts against a "
              "wall with no target along it), at best 3 boxes reach targets "
              "and the episode runs to the 120-step limit (3 - 12 = -9.0): "
              "(10.9 - 9.0) / 2 = 0.95"
          ),
          notes=(
              "For the default generator='toy' and time_limit=120 only; "
              "Boxoban levels have other anchors."
          ),
      ),
  ]


_ATARI_SOURCE = (
    "the standard Atari random and human scores (Mnih et al. 2015, Nature "
    "518; van Hasselt et al. 2016, AAAI), as tabulated for Atari-100k in "
    "Cetin et al. 2022 (A-LIX, ICML), Table 5"
)
# Atari-100k's games: (random, human) episode scores.
_ATARI_ANCHORS = {
    "Alien": (227.8, 7127.7),
    "Amidar": (5.8, 1719.5),
    "Assault": (222.4, 742.0),
    "Asterix": (210.0, 8503.3),
    "BankHeist": (14.2, 753.1),
    "BattleZone": (2360.0, 37187.5),
    "Boxing": (0.1, 12.1),
    "Breakout": (1.7, 30.5),
    "ChopperCommand": (811.0, 7387.8),
    "CrazyClimber": (10780.5, 35829.4),
    "DemonAttack": (152.1, 1971.0),
    "Freeway": (0.0, 29.6),
    "Frostbite": (65.2, 4334.7),
    "Gopher": (257.6, 2412.5),
    "Hero": (1027.0, 30826.4),
    "Jamesbond": (29.0, 302.8),
    "Kangaroo": (52.0, 3035.0),
    "Krull": (1598.0, 2665.5),
    "KungFuMaster": (258.5, 22736.3),
    "MsPacman": (307.3, 6951.6),
    "Pong": (-20.7, 14.6),
    "PrivateEye": (24.9, 69571.3),
    "Qbert": (163.9, 13455.0),
    "RoadRunner": (11.5, 7845.0),
    "Seaquest": (68.4, 42054.7),
    "UpNDown": (533.4, 11693.2),
}


def _atari_entries() -> list[ReferenceEntry]:
  return [
      ReferenceEntry(
          env=f"atari/{game}",
          random_return=random_return,
          random_source=_ATARI_SOURCE,
          reference_return=human,
          reference_algorithm="human player",
          budget_env_steps=None,
          source=_ATARI_SOURCE,
          notes=(
              "Human-normalised: 1 is the human score. Measured by their "
              "sources without sticky actions (no-op starts); the anchors are "
              "used for every protocol, as Atari-100k papers do."
          ),
          any_settings=True,
      )
      for game, (random_return, human) in _ATARI_ANCHORS.items()
  ]


def _build_table() -> dict[str, ReferenceEntry]:
  entries = [
      catch_entry(8, 8),
      catch_entry(5, 5),
      _delayed_chain_entry(),
      _cartpole_entry(),
      _gymnax_control(
          "Acrobot-v1",
          -498.8977,
          0.1796,
          -80.0,
          500_000,
          "100 generations of OpenES",
      ),
      _gymnax_control(
          "MountainCar-v0",
          -200.0,
          0.0,
          -118.0,
          250_000,
          "1000 generations of SimpleGA",
          " The random return is the time limit: no random episode of "
          "4096 reached the goal within 200 steps.",
      ),
      _gymnax_control(
          "Pendulum-v1",
          -1232.4794,
          4.5355,
          -130.0,
          1_000_000,
          "100 generations of OpenES",
          " The random policy draws each torque uniformly from [-2, 2].",
      ),
      _gymnax_control(
          "MountainCarContinuous-v0",
          -33.1967,
          0.0513,
          92.0,
          1_000_000,
          "500 generations of SimpleGA",
          " The random policy draws each force uniformly from [-1, 1]: it "
          "pays about 0.1 / 3 a step for 999 steps and rarely reaches the "
          "goal.",
      ),
      _gymnax_minatar("Breakout-MinAtar", 0.4182, 0.0102, 28.0),
      _gymnax_minatar("Asterix-MinAtar", 0.4944, 0.0135, 15.0),
      _gymnax_minatar("Freeway-MinAtar", 0.3982, 0.0098, 58.0),
      _gymnax_minatar("SpaceInvaders-MinAtar", 4.0813, 0.0493, 131.0),
      *_xminigrid_entries(),
      *_brax_entries(),
      *_open_env_entries(),
      *_atari_entries(),
  ]
  return {e.env: e for e in entries}


REFERENCE_TABLE: Mapping[str, ReferenceEntry] = types.MappingProxyType(
    _build_table()
)
ALIASES: Mapping[str, str] = types.MappingProxyType({"catch": "catch/8x8"})

_CATCH_KEY = re.compile(r"^catch/(\d+)x(\d+)$")


# ---------------------------------------------------------------- API ----


def _how_to_supply(env: str) -> str:
  return (
      "Supply one as an override, e.g. normalize(scores, "
      f"{env!r}, overrides={{{env!r}: ReferenceEntry(env={env!r}, "
      "random_return=..., random_source='...', reference_return=..., "
      "reference_algorithm='...', budget_env_steps=..., source='...')}})."
  )


def env_key(env: str, settings: Mapping[str, object] | None = None) -> str:
  """The table key of registered environment ``env`` with ``settings``.

  ``catch/<rows>x<columns>`` for Catch; else the name followed by the
  settings that differ from the defaults, e.g.
  ``delayed_chain(chain_length=3)``.
  """
  settings = dict(settings or {})
  if env == "catch":
    return f"catch/{settings.get('rows', 8)}x{settings.get('columns', 8)}"
  try:
    defaults = env_registry.get_entry(env).settings
  except ValueError:  # not registered (here): every setting is shown
    defaults = {}
  changed = [
      f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}"
      for k, v in sorted(settings.items())
      if k not in defaults or _plain(defaults[k]) != _plain(v)
  ]
  return f"{env}({','.join(changed)})" if changed else env


def _plain(value: object) -> str:
  """A comparable, JSON-like form of a setting (tuples, lists and arrays
  alike)."""

  def array_or_text(x):
    return np.asarray(x).tolist() if hasattr(x, "__array__") else str(x)

  return json.dumps(value, sort_keys=True, default=array_or_text)


def get_entry(
    env: str, overrides: Mapping[str, ReferenceEntry] | None = None
) -> ReferenceEntry:
  """The entry of ``env``: from ``overrides``, the table, or ``catch_entry``.
  A key ``name(key=value,...)`` falls back to ``name``'s entry if it holds
  for ``any_settings``.

  Raises:
    MissingReferenceError: for an environment with no entry.
  """

  overrides = overrides or {}
  for key in (env, ALIASES.get(env)):
    if key is not None and key in overrides:
      return overrides[key]
  key = ALIASES.get(env, env)
  if key in REFERENCE_TABLE:
    return REFERENCE_TABLE[key]
  match = _CATCH_KEY.match(key)
  if match:
    return catch_entry(int(match.group(1)), int(match.group(2)))
  name, with_settings, _ = env.partition("(")
  if with_settings:
    try:
      entry = get_entry(name, overrides)
    except MissingReferenceError:
      entry = None
    if entry is not None and entry.any_settings:
      return entry
    if entry is not None:
      raise MissingReferenceError(
          f"The normalisation entry of {name!r} holds for its default "
          f"settings only, not for {env!r}. " + _how_to_supply(env)
      )
  raise MissingReferenceError(
      f"No normalisation entry for environment {env!r} (the table covers "
      f"{len(REFERENCE_TABLE)} environments and catch/<rows>x<columns>: "
      "docs/reference/environments.md). " + _how_to_supply(env)
  )


def anchors(
    env: str, overrides: Mapping[str, ReferenceEntry] | None = None
) -> tuple[float, float]:
  """``(random, reference - random)`` of ``env``: the offset and scale of its
  normalised scores.

  Raises:
    MissingReferenceError: without an entry or a reference return.
    ValueError: if the reference equals the random return.
  """
  entry = get_entry(env, overrides)
  if entry.reference_return is None:
    raise MissingReferenceError(
        f"Environment {env!r} has no trustworthy reference return"
        + (f" ({entry.notes})" if entry.notes else "")
        + ". "
        + _how_to_supply(env)
    )
  span = float(entry.reference_return) - float(entry.random_return)
  if span == 0.0 or not np.isfinite(span):
    raise ValueError(
        f"Cannot normalise {env!r}: its reference return "
        f"{entry.reference_return} and random return {entry.random_return} "
        "must be finite and differ."
    )
  return float(entry.random_return), span


def normalize(
    scores: np.ndarray | float,
    env: str,
    overrides: Mapping[str, ReferenceEntry] | None = None,
) -> np.ndarray:
  """``(scores - random) / (reference - random)`` for one environment.

  Args:
    scores: raw returns on ``env``, any shape.
    env: a table key (or an alias such as ``"catch"``).
    overrides: ``{env: ReferenceEntry}`` taking precedence over the table.

  Returns:
    float64 array of the shape of ``scores``.

  Raises:
    MissingReferenceError: without an entry or a reference return.
    ValueError: if the reference equals the random return.
  """
  random, span = anchors(env, overrides)
  return (np.asarray(scores, np.float64) - random) / span
