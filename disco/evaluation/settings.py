"""The settings of a meta-evaluation: ``EvalSettings.from_config`` checks a
``disco-eval`` config in one pass (every bad value in one ``UsageError``);
``make_config(rule="ppo", env_settings={"rows": 5})`` is ``--config.rule=ppo
--config.env_settings.rows=5``."""

from __future__ import annotations

from collections.abc import Mapping
import dataclasses
from typing import Any

from ml_collections import config_dict

from disco import checks
from disco import distributed
from disco import errors
from disco.environments import registry as env_registry
from disco.update_rules import migrations
from disco.update_rules import overrides as overrides_lib
from disco.update_rules import presets as presets_lib
from disco.update_rules import registry as rule_registry
from disco.update_rules import resolve

PROGRAM = "disco-eval"
CONFIG_NAME = "evaluate"
# The optimiser settings that clip (0: no clip).
CLIP_KEYS = ("max_abs_update", "max_grad_norm")
# The loop's normalisation switches (None: off).
NORMALIZE_KEYS = ("normalize_observations", "normalize_rewards")
# The discount of the reward normalisation's return (None: the loop's).
NORMALIZE_DISCOUNT_KEY = "normalize_rewards_discount"
# The learner's reward clip (None or 0: none).
REWARD_CLIP_KEY = "reward_clip"


def default_config() -> config_dict.ConfigDict:
  """The config of ``configs/evaluate.py``."""
  return checks.load_config(CONFIG_NAME)


@dataclasses.dataclass(frozen=True)
class EvalSettings:
  """The checked settings of a meta-evaluation: the keys of
  ``configs/evaluate.py`` (explained there), the dicts read-only.

  None for a loop setting (``rule_registry.LOOP_KEYS``) or an optimiser setting
  (``learning_rate``, ``max_abs_update``, ``max_grad_norm``, ``adam_eps``,
  ``anneal_learning_rate``, ``loss_mask``) means the rule's own; a clip of 0
  means no clip.
  ``distributed`` is the checked processes' settings (None: one process),
  ``distributed_config`` the block as given.
  """

  rule: str
  weights: str | None
  imports: str
  env: str
  env_settings: dict[str, Any]
  preset: str
  total_env_steps: int
  num_seeds: int
  seed: int
  num_envs: int | None
  rollout_len: int | None
  batch_size: int | None
  replay_capacity: int | None
  min_replay_size: int | None
  update_epochs: int | None
  num_minibatches: int | None
  normalize_observations: bool | None
  normalize_rewards: bool | None
  normalize_rewards_discount: float | None
  reward_clip: float | None
  learning_rate: float | None
  hyper_params: dict[str, Any]
  rule_kwargs: dict[str, Any]
  max_abs_update: float | None
  max_grad_norm: float | None
  adam_eps: float | None
  anneal_learning_rate: bool | None
  loss_mask: str | None
  network: dict[str, Any]
  policy: dict[str, Any]
  iterations_per_call: int
  last_episodes: int
  output_dir: str
  tracking: Any
  overwrite: bool
  compilation_cache: str
  distributed: distributed.DistributedSettings | None
  distributed_config: dict[str, Any]

  @property
  def seeds(self) -> list[int]:
    return list(range(self.seed, self.seed + self.num_seeds))

  @property
  def loop(self) -> dict[str, int | None]:
    """The loop settings given (``rule_registry.LOOP_KEYS``; None: the
    rule's)."""
    return {k: getattr(self, k) for k in rule_registry.LOOP_KEYS}

  @property
  def normalization(self) -> dict[str, bool | float]:
    """The reward and observation transforms given (``NORMALIZE_KEYS``, the
    discount and the reward clip; those left None are left out)."""
    keys = (*NORMALIZE_KEYS, NORMALIZE_DISCOUNT_KEY, REWARD_CLIP_KEY)
    return {k: getattr(self, k) for k in keys if getattr(self, k) is not None}

  @property
  def step_timeout(self) -> int:
    """Seconds a process waits for the others' training call (0: never)."""
    return self.distributed.step_timeout if self.distributed else 0

  @classmethod
  def from_config(cls, config: Any) -> EvalSettings:
    """Checks every value of a ``disco-eval`` config (a ``ConfigDict`` or a
    dict) at once.

    Raises:
      UsageError: one line naming every bad setting.
    """
    problems = checks.Problems()
    settings = cls.collect(config, problems)
    problems.raise_if_any()
    return settings

  @classmethod
  def collect(cls, config: Any, problems: checks.Problems) -> EvalSettings:
    """``from_config`` recording its problems in ``problems`` (bad values
    replaced by defaults)."""
    values, defaults = _values(config), default_config().to_dict()
    problems.get(checks.check_config_keys, values, defaults, CONFIG_NAME)

    def get(key: str) -> Any:
      return values.get(key, defaults[key])

    def number(
        key: str, minimum: int, maximum: int | None = None, why: str = ""
    ) -> int:
      return problems.get(
          checks.check_int,
          get(key),
          key,
          minimum,
          maximum,
          why,
          default=defaults[key],
      )

    total_env_steps = number(
        "total_env_steps",
        1,
        checks.MAX_ENV_STEPS,
        "the training loop counts env steps in int32",
    )
    num_seeds = number("num_seeds", 1, checks.MAX_SEED + 1, "seeds are 32-bit")
    seed = problems.get(
        checks.check_seed, get("seed"), "seed", num_seeds, default=0
    )
    block = problems.get(checks.as_dict, get("distributed"), "distributed")
    return cls(
        rule=get("rule"),
        weights=get("weights"),
        imports=get("imports"),
        env=get("env"),
        env_settings=problems.get(
            checks.as_dict,
            get("env_settings") or {},
            "env_settings",
            default={},
        ),
        preset=problems.get(_preset, get("preset"), default=presets_lib.AUTO),
        total_env_steps=total_env_steps,
        num_seeds=num_seeds,
        seed=seed,
        **_loop(get, problems),
        **_normalization(get, problems),
        **_optimizer(get, problems),
        hyper_params=problems.get(
            _hyper_params, get("hyper_params"), default={}
        ),
        rule_kwargs=problems.get(
            checks.as_dict,
            get("rule_kwargs") or {},
            "rule_kwargs",
            default={},
        ),
        loss_mask=get("loss_mask"),
        network=problems.get(
            checks.as_dict, get("network"), "network", default={}
        ),
        policy=problems.get(checks.check_policy, get("policy"), default={}),
        iterations_per_call=number("iterations_per_call", 1),
        last_episodes=number("last_episodes", 1),
        output_dir=get("output_dir"),
        tracking=_tracking(get("tracking"), problems),
        overwrite=problems.get(
            checks.check_bool, get("overwrite"), "overwrite", default=False
        ),
        compilation_cache=get("compilation_cache"),
        distributed=(
            None if block is None else problems.get(distributed.settings, block)
        ),
        distributed_config=block or {},
    )

  def to_config(self) -> dict[str, Any]:
    """The settings as a config (keys sorted): what ``config.json`` records
    before the run's resolved values."""
    values = {
        f.name: getattr(self, f.name)
        for f in dataclasses.fields(self)
        if f.name not in ("distributed", "distributed_config")
    }
    values["distributed"] = dict(self.distributed_config)
    return dict(sorted(values.items()))


def _values(config: Any) -> dict[str, Any]:
  if isinstance(config, config_dict.ConfigDict):
    return config.to_dict()
  if isinstance(config, Mapping):
    return dict(config)
  raise errors.UsageError(
      f"The settings must be a disco-eval config (a ConfigDict or a dict), "
      f"got {type(config).__name__}."
  )


def _loop(get, problems: checks.Problems) -> dict[str, int | None]:
  """The loop settings given (None: the rule's); the replay may be 0."""
  out = {}
  for key in rule_registry.LOOP_KEYS:
    low = 0 if key in ("replay_capacity", "min_replay_size") else 1
    value = get(key)
    if value is not None:
      value = problems.get(checks.check_int, value, key, low)
    out[key] = value
  return out


def _normalization(get, problems: checks.Problems) -> dict[str, Any]:
  """The normalisation switches (None or a bool) and the discount (None or
  a number in [0, 1])."""
  out = {}
  for key in NORMALIZE_KEYS:
    value = get(key)
    if value is not None:
      value = problems.get(checks.check_bool, value, key)
    out[key] = value
  out[NORMALIZE_DISCOUNT_KEY] = problems.get(
      _discount, get(NORMALIZE_DISCOUNT_KEY), NORMALIZE_DISCOUNT_KEY
  )
  clip = get(REWARD_CLIP_KEY)
  if clip is not None:
    clip = problems.get(checks.check_number, clip, REWARD_CLIP_KEY, 0.0)
  out[REWARD_CLIP_KEY] = clip
  return out


def _discount(value: Any, key: str) -> float | None:
  if value is None:
    return None
  value = checks.check_number(value, key)
  if not 0.0 <= value <= 1.0:
    raise errors.UsageError(f"config.{key} must be in [0, 1], got {value!r}.")
  return value


def _optimizer(get, problems: checks.Problems) -> dict[str, Any]:
  """The optimiser settings but the loss mask (None: the rule's)."""
  return dict(
      learning_rate=problems.get(_optional_number, get, "learning_rate"),
      **{k: problems.get(_clip, get, k) for k in CLIP_KEYS},
      adam_eps=problems.get(_optional_number, get, "adam_eps"),
      anneal_learning_rate=problems.get(
          _optional_bool, get, "anneal_learning_rate"
      ),
  )


def _optional_number(get, key: str) -> float | None:
  """``config.<key>``: None, or a number > 0."""
  value = get(key)
  if value is None:
    return None
  return checks.check_number(value, key, positive=True)


def _optional_bool(get, key: str) -> bool | None:
  """``config.<key>``: None (the rule's), or a bool."""
  value = get(key)
  if value is None:
    return None
  return checks.check_bool(value, key)


def _clip(get, key: str) -> float | None:
  """``config.<key>``: None (the rule's), or a number >= 0 (0: no clip)."""
  value = get(key)
  if value is None:
    return None
  value = checks.check_number(value, key)
  if value < 0:
    raise errors.UsageError(f"{key}={value} must be >= 0 (0: no clip).")
  return value


def _hyper_params(value: Any) -> dict[str, Any]:
  """``config.hyper_params``: a dict of finite numbers (their keys are the
  rule's: ``build`` checks them)."""
  given = checks.as_dict(value or {}, "hyper_params")
  for key, x in given.items():
    if (
        isinstance(x, bool)
        or not isinstance(x, (int, float))
        or x != x
        or abs(x) == float("inf")
    ):
      raise errors.UsageError(
          f"config.hyper_params.{key} must be a finite number, got {x!r}."
      )
  return given


def _preset(value: Any) -> str:
  """``config.preset``: 'auto', 'none' or a preset's name."""
  if not isinstance(value, str) or not value.strip():
    raise errors.UsageError(
        f"config.preset={value!r} must be {presets_lib.AUTO!r}, "
        f"{presets_lib.NONE!r} or a preset's name."
    )
  return value.strip()


def _tracking(spec: Any, problems: checks.Problems) -> Any:
  problems.get(checks.check_tracking, spec)
  return spec


# ----------------------------------------------------------- overrides ----


def prepare(
    config: config_dict.ConfigDict,
    env: str | None = None,
    rule: str | None = None,
    preset: str | None = None,
) -> None:
  """Gives ``config.env_settings``, ``config.hyper_params`` and
  ``config.rule_kwargs`` every setting of ``env`` and ``rule`` (defaults: the
  config's) with its default (the ``preset``'s where it sets one; default:
  the config's choice), so overrides may set those and no other; given
  settings stay unless ``env`` is another environment. Unknown names change
  nothing.

  Raises:
    UsageError: a preset that does not exist or is malformed.
  """
  env = env or config.env
  try:
    defaults = env_registry.get_entry(env).settings
  except (ValueError, ImportError):  # the plan reports it, in one line
    defaults = None
  if defaults is not None:
    given = {}
    if env == config.env:
      given = checks.as_dict(config.env_settings or {}, "env_settings")
    with config.unlocked():
      config.env_settings = {**defaults, **given}
  name = rule or config.rule
  try:
    if resolve.is_rule_path(name):
      settings = resolve.resolve_rule(name).settings
    else:
      settings = rule_registry.default_settings(name)
  except (ValueError, errors.UsageError):
    return
  found = presets_lib.find(name, env, preset or config.get("preset", "auto"))
  if found is not None:
    settings = overrides_lib.merged(settings, name, **found.agent)
  overrides_lib.prepare(config, settings)


def override(config: config_dict.ConfigDict, overrides: Mapping) -> None:
  """Sets ``config``'s values as ``--config.KEY=VALUE`` flags would, naming the
  new key of a rule setting that moved (``migrations.new_key``).

  Raises:
    UsageError: naming every unknown key (with close matches) or value of the
      wrong type.
  """
  rule = str(overrides.get("rule") or config.get("rule"))
  checks.override(
      config, overrides, lambda path: migrations.new_key(rule, path)
  )


def make_config(
    config: config_dict.ConfigDict | None = None, **overrides: Any
) -> config_dict.ConfigDict:
  """A copy of ``config`` (default: ``configs/evaluate.py``'s) prepared for its
  environment and rule, with ``overrides`` set: what
  ``disco-eval --config.KEY=VALUE ...`` runs.

  Raises:
    UsageError: an unknown key or a value of the wrong type.
  """
  config = checks.config_or_default(config, CONFIG_NAME)
  env, rule, preset = (overrides.get(k) for k in ("env", "rule", "preset"))
  prepare(
      config,
      env if isinstance(env, str) else None,
      rule if isinstance(rule, str) else None,
      preset if isinstance(preset, str) else None,
  )
  override(config, overrides)
  return config
