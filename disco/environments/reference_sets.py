"""Named sets of reference scores that replace entries of
``reference_scores.REFERENCE_TABLE`` for a comparison
(``config.reference_set``): ``"default"`` (none) and ``"discogen"`` (DiscoGen's
PPO baselines for MinAtar, Brax and Craftax, at DiscoGen's budgets)."""

from __future__ import annotations

from collections.abc import Mapping
import dataclasses
import types

from disco.environments import reference_scores

_DISCOGEN = (
    "DiscoGen (github.com/AlexGoldie/discobench, since renamed discogen; "
    "commit c24e6508, "
    "discogen/domains/OnPolicyRL/utils/baseline_scores.yaml, return_mean of "
    "the default template): purejaxrl-style PPO, best of a learning-rate "
    "sweep, mean evaluation return of 16 episodes on each of 8 seeds"
)
# DiscoGen's task -> (our environment, its PPO return, its env steps).
_DISCOGEN_PPO = {
    "MinAtar/Asterix": ("gymnax/Asterix-MinAtar", 15.96875, 10_000_000),
    "MinAtar/Breakout": ("gymnax/Breakout-MinAtar", 61.078125, 10_000_000),
    "MinAtar/Freeway": ("gymnax/Freeway-MinAtar", 62.171875, 10_000_000),
    "MinAtar/SpaceInvaders": (
        "gymnax/SpaceInvaders-MinAtar",
        182.125,
        10_000_000,
    ),
    "Brax/Ant": ("brax/ant", 6957.005371, 50_000_000),
    "Brax/HalfCheetah": ("brax/halfcheetah", 5039.06543, 50_000_000),
    "Brax/Hopper": ("brax/hopper", 2398.254395, 50_000_000),
    "Brax/Humanoid": ("brax/humanoid", 6130.256836, 50_000_000),
    "Brax/Pusher": ("brax/pusher", -392.628418, 50_000_000),
    "Brax/Reacher": ("brax/reacher", -76.182564, 50_000_000),
    "Brax/Walker2D": ("brax/walker2d", 1043.490356, 50_000_000),
    "Craftax/Craftax-Classic": (
        "craftax/Craftax-Classic-Symbolic-v1",
        16.857029,
        100_000_000,
    ),
    "Craftax/Craftax": ("craftax/Craftax-Symbolic-v1", 23.217186, 100_000_000),
}


def _discogen_table() -> dict[str, reference_scores.ReferenceEntry]:
  out = {}
  for task, (env, ppo_return, steps) in _DISCOGEN_PPO.items():
    ours = reference_scores.REFERENCE_TABLE[env]
    out[env] = dataclasses.replace(
        ours,
        reference_return=ppo_return,
        reference_algorithm="PPO (DiscoGen baseline)",
        budget_env_steps=steps,
        source=(
            f"{_DISCOGEN}; task {task}, {steps:,} env steps "
            f"(datasets/{task}/config.py)"
        ),
        notes=(
            "DiscoGen's own settings per task (e.g. Brax: 2048 environments, "
            "positional backend, episode length 1000, as ours)"
        ),
    )
  return out


# Named sets of references besides the table (``reference_set``).
REFERENCE_SETS: Mapping[str, Mapping[str, reference_scores.ReferenceEntry]] = (
    types.MappingProxyType(
        {
            "default": types.MappingProxyType({}),
            "discogen": types.MappingProxyType(_discogen_table()),
        }
    )
)


def reference_set(name: str) -> Mapping[str, reference_scores.ReferenceEntry]:
  """The entries a named set puts over ``reference_scores.REFERENCE_TABLE`` (``"default"``:
  none; ``"discogen"``: DiscoGen's PPO baselines for MinAtar, Brax and
  Craftax), as ``overrides``.

  Raises:
    ValueError: an unknown name.
  """
  if name not in REFERENCE_SETS:
    raise ValueError(
        f"Unknown reference set {name!r}: use one of "
        f"{', '.join(REFERENCE_SETS)}."
    )
  return REFERENCE_SETS[name]
