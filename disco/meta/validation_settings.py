"""The settings of meta-validation (``config.validation``), checked once:
the held-out environments, seeds, budget and loop (``parse_settings``)."""

from __future__ import annotations

import dataclasses
from typing import Any

from ml_collections import config_dict

from disco import checks
from disco import errors
from disco import run_folders
from disco.environments import reference_scores
from disco.environments import registry as env_registry
from disco.update_rules import registry as rule_registry

ENV_KEYS = ("env", "env_settings", "total_env_steps")


def default_config() -> dict[str, Any]:
  """The ``validation`` block of ``configs/meta_train.py`` (off)."""
  return dict(
      every=0,
      envs=(),
      num_seeds=2,
      seed=1000,
      total_env_steps=20_000,
      last_episodes=100,
      iterations_per_call=50,
      at_start=True,
      references=(),
      # The disco-eval loop settings a validation may set (None: the rule's
      # own loop, else the published notebook's; see configs/evaluate.py).
      **{k: config_dict.placeholder(int) for k in rule_registry.LOOP_KEYS},
  )


# ------------------------------------------------------------ settings ----


@dataclasses.dataclass(frozen=True)
class HeldOutEnv:
  """One held-out environment.

  Attributes:
    env: its registry name.
    env_settings: its settings (the registered defaults with the given ones).
    key: its normalisation key (``reference_scores.env_key``), the ``env``
      column of ``validation.csv``.
    total_env_steps: the agents' budget per seed.
  """

  env: str
  env_settings: dict[str, Any]
  key: str
  total_env_steps: int


@dataclasses.dataclass(frozen=True)
class ValidationSettings:
  """``config.validation``, checked (see ``default_config``)."""

  every: int
  envs: tuple[HeldOutEnv, ...]
  num_seeds: int
  seed: int
  last_episodes: int
  iterations_per_call: int
  at_start: bool
  loop: dict[str, int]
  references: tuple[str, ...]

  @property
  def in_process(self) -> bool:
    """Whether meta-training validates as it goes (``every > 0``)."""
    return self.every > 0

  @property
  def seeds(self) -> list[int]:
    return list(range(self.seed, self.seed + self.num_seeds))

  def record(self) -> dict[str, Any]:
    """What the rows depend on (all but ``every``, ``at_start`` and
    ``iterations_per_call``), as JSON."""
    return run_folders.to_jsonable(
        dict(
            envs=[
                dict(env=e.key, total_env_steps=e.total_env_steps)
                for e in self.envs
            ],
            num_seeds=self.num_seeds,
            seed=self.seed,
            last_episodes=self.last_episodes,
            loop=self.loop,
            references=list(self.references),
        )
    )

  def due(self, step: int, final_step: int) -> bool:
    """Whether meta-training validates the meta-parameters after ``step``
    meta-steps: every ``every``, at the end, and at 0 with ``at_start``."""
    if not self.in_process:
      return False
    if step == 0:
      return self.at_start
    return step % self.every == 0 or step == final_step


def _held_out_env(spec: Any, where: str, total_env_steps: int) -> HeldOutEnv:
  spec = checks.as_dict(spec, where)
  unknown = set(spec) - set(ENV_KEYS)
  if unknown or "env" not in spec:
    raise errors.UsageError(
        f"config.{where} must have keys env, env_settings (optional) and "
        f"total_env_steps (optional: this environment's budget); got "
        f"{sorted(spec)}."
    )
  name = str(spec["env"])
  try:
    entry = env_registry.get_entry(name)
  except ValueError as e:
    raise errors.UsageError(f"config.{where}: {errors.one_line(e)}") from None
  given = checks.as_dict(
      spec.get("env_settings") or {}, f"{where}.env_settings"
  )
  steps = spec.get("total_env_steps", total_env_steps)
  return HeldOutEnv(
      env=name,
      env_settings={**entry.settings, **given},
      key=reference_scores.env_key(name, {**entry.settings, **given}),
      total_env_steps=checks.check_int(steps, f"{where}.total_env_steps", 1),
  )


def parse_settings(block: Any, where: str = "validation") -> ValidationSettings:
  """``config.validation`` checked (environments by name and settings; the
  rest is checked by ``Validator``).

  Raises:
    UsageError: a bad value, naming the key and the fix.
  """
  if isinstance(block, dict):  # placeholders (None) as in a config file
    block = config_dict.ConfigDict(block)
  cfg = checks.as_dict(block, where)
  valid = set(default_config())
  if set(cfg) != valid:
    unknown, missing = sorted(set(cfg) - valid), sorted(valid - set(cfg))
    raise errors.UsageError(
        f"config.{where} has unknown key(s) {unknown} / lacks {missing}; "
        f"valid keys: {', '.join(sorted(valid))}."
    )
  every = checks.check_int(cfg["every"], f"{where}.every", 0)
  total = checks.check_int(
      cfg["total_env_steps"], f"{where}.total_env_steps", 1
  )
  envs = cfg["envs"]
  if isinstance(envs, (dict, config_dict.ConfigDict)):
    envs = (envs,)
  if not isinstance(envs, (list, tuple)):
    raise errors.UsageError(
        f"config.{where}.envs must be a tuple of held-out environments like "
        "{'env': 'delayed_chain'}, got " + repr(envs) + "."
    )
  held_out = tuple(
      _held_out_env(spec, f"{where}.envs[{i}]", total)
      for i, spec in enumerate(envs)
  )
  keys = [e.key for e in held_out]
  twice = sorted({k for k in keys if keys.count(k) > 1})
  if twice:
    raise errors.UsageError(
        f"config.{where}.envs lists {', '.join(twice)} more than once: list "
        "every held-out environment once."
    )
  if every and not held_out:
    raise errors.UsageError(
        f"config.{where}.every={every} but config.{where}.envs is empty: "
        "give held-out environments, e.g. --config.validation.envs="
        "\"({'env': 'delayed_chain'},)\", or set every=0."
    )
  loop = {}
  for key in rule_registry.LOOP_KEYS:
    if cfg[key] is not None:
      low = 0 if key in ("replay_capacity", "min_replay_size") else 1
      loop[key] = checks.check_int(cfg[key], f"{where}.{key}", low)
  references = cfg["references"]
  if isinstance(references, str):
    references = (references,)
  return ValidationSettings(
      every=every,
      envs=held_out,
      num_seeds=checks.check_int(cfg["num_seeds"], f"{where}.num_seeds", 1),
      seed=checks.check_seed(cfg["seed"], f"{where}.seed"),
      last_episodes=checks.check_int(
          cfg["last_episodes"], f"{where}.last_episodes", 1
      ),
      iterations_per_call=checks.check_int(
          cfg["iterations_per_call"], f"{where}.iterations_per_call", 1
      ),
      at_start=checks.check_bool(cfg["at_start"], f"{where}.at_start"),
      loop=loop,
      references=tuple(str(r) for r in references),
  )
