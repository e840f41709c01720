"""``disco-distill``'s settings. The student is the teacher's rule with another
meta-network: ``student`` overrides ``MetaNetConfig`` fields (default: a 64-unit
LSTM reading its lifetime as two inputs); ``student_agent='flat'`` drops the
action-conditional model (``Disco(action_model=False)``: no ``z``, ``pi`` and
``y`` targets only)."""

from __future__ import annotations

from collections.abc import Mapping
import dataclasses
from typing import Any

from ml_collections import config_dict

from disco import checks
from disco import errors
from disco import specs as specs_lib
from disco.comparison import settings as compare_settings
from disco.environments import registry as env_registry
from disco.networks import meta_nets

PROGRAM = "disco-distill"
CONFIG_NAME = "distill"
# ``student_agent``: the teacher's agent, or one without the action-
# conditional model (``Disco(action_model=False)``).
STUDENT_AGENTS = ("teacher", "flat")

# The loop settings of the gathering runs that may be overridden (None: the
# teacher's defaults, as disco-eval would train it): those a comparison
# passes on to disco-eval, but for its score's window.
LOOP_KEYS = tuple(k for k in compare_settings.EVAL_KEYS if k != "last_episodes")


def default_config() -> config_dict.ConfigDict:
  """The settings of ``configs/distill.py``."""
  return checks.load_config(CONFIG_NAME)


def make_config(
    config: config_dict.ConfigDict | None = None, **overrides: Any
) -> config_dict.ConfigDict:
  """A copy of ``config`` (default: ``configs/distill.py``'s) with ``overrides``
  set as ``--config.KEY=VALUE`` flags would.

  Raises:
    UsageError: an unknown key or a value of the wrong type.
  """
  config = checks.config_or_default(config, CONFIG_NAME)
  checks.override(config, overrides)
  return config


@dataclasses.dataclass(frozen=True)
class GatherSettings:
  num_seeds: int
  seed: int
  total_env_steps: int
  samples_per_seed: int
  loop: Mapping[str, int]  # LOOP_KEYS that were given
  folder: str  # '' -> the run's dataset/


@dataclasses.dataclass(frozen=True)
class FitSettings:
  steps: int
  learning_rate: float
  max_grad_norm: float
  seed: int
  log_every: int
  pi_cost: float
  y_cost: float
  z_cost: float


@dataclasses.dataclass(frozen=True)
class DistillSettings:
  """Checked settings of one distillation."""

  teacher: str
  student: Mapping[str, Any]  # MetaNetConfig overrides
  student_agent: str  # one of STUDENT_AGENTS
  student_torso: tuple[int, ...] | None  # dense sizes; None: the teacher's
  envs: tuple[tuple[str, dict[str, Any]], ...]
  held_out_envs: tuple[tuple[str, dict[str, Any]], ...]
  dataset: GatherSettings
  fit: FitSettings
  output_dir: str
  overwrite: bool
  compilation_cache: str

  @classmethod
  def from_config(cls, config: config_dict.ConfigDict) -> DistillSettings:
    """Checks ``config`` in one pass.

    Raises:
      UsageError: the first problem, in one line with its fix.
    """
    defaults = default_config()
    checks.check_config_keys(config, defaults, CONFIG_NAME)
    for group in ("student", "dataset", "fit"):
      checks.check_config_keys(config[group], defaults[group], CONFIG_NAME)
    teacher = str(config.teacher).strip()
    if not teacher:
      raise errors.UsageError(
          "config.teacher is empty: give 'disco103' or the path of a rule file."
      )
    data, fit = config.dataset, config.fit
    loop = {}
    for key in LOOP_KEYS:
      if data[key] is not None:
        minimum = 0 if key == "replay_capacity" else 1
        loop[key] = checks.check_int(data[key], f"dataset.{key}", minimum)
    costs = {
        k: checks.check_number(fit[k], f"fit.{k}")
        for k in ("pi_cost", "y_cost", "z_cost")
    }
    if min(costs.values()) < 0 or not any(costs.values()):
      raise errors.UsageError(
          f"config.fit costs {costs} must be >= 0, not all 0."
      )
    student_agent = str(config.student_agent)
    if student_agent not in STUDENT_AGENTS:
      raise errors.UsageError(
          f"config.student_agent={student_agent!r}: give one of "
          f"{', '.join(STUDENT_AGENTS)}."
      )
    return cls(
        teacher=teacher,
        student=_student(config.student, student_agent),
        student_agent=student_agent,
        student_torso=_torso(config.student_torso),
        envs=_envs(config.envs, "envs"),
        held_out_envs=_envs(config.held_out_envs, "held_out_envs"),
        dataset=GatherSettings(
            num_seeds=checks.check_int(data.num_seeds, "dataset.num_seeds", 1),
            seed=checks.check_seed(data.seed, "dataset.seed"),
            total_env_steps=checks.check_int(
                data.total_env_steps, "dataset.total_env_steps", 1
            ),
            samples_per_seed=checks.check_int(
                data.samples_per_seed, "dataset.samples_per_seed", 1
            ),
            loop=loop,
            folder=str(data.folder or ""),
        ),
        fit=FitSettings(
            steps=checks.check_int(fit.steps, "fit.steps", 1),
            learning_rate=checks.check_number(
                fit.learning_rate, "fit.learning_rate", positive=True
            ),
            max_grad_norm=checks.check_number(
                fit.max_grad_norm, "fit.max_grad_norm", positive=True
            ),
            seed=checks.check_seed(fit.seed, "fit.seed"),
            log_every=checks.check_int(fit.log_every, "fit.log_every", 1),
            **costs,
        ),
        output_dir=str(config.output_dir or ""),
        overwrite=checks.check_bool(config.overwrite, "overwrite"),
        compilation_cache=str(config.compilation_cache or ""),
    )


def _student(
    student: config_dict.ConfigDict, student_agent: str
) -> dict[str, Any]:
  """The student's ``MetaNetConfig`` overrides (None values dropped; a flat
  agent's student reads the flat inputs unless told otherwise)."""
  given = {k: v for k, v in student.to_dict().items() if v is not None}
  if student_agent == "flat":
    given.setdefault("input_option", "flat")
  try:
    meta_nets.MetaNetConfig(**given)
  except (TypeError, ValueError) as e:
    raise errors.UsageError(f"config.student: {errors.one_line(e)}") from None
  meta_hidden = given.get("meta_hidden_size", 128)
  if meta_hidden != 0:
    raise errors.UsageError(
        f"config.student.meta_hidden_size={meta_hidden}: a student with a "
        "per-lifetime LSTM cannot be fitted from independent samples; set it "
        "to 0 (with lifetime_conditioning=True the student reads its "
        "lifetime instead)."
    )
  return given


def _torso(sizes: Any) -> tuple[int, ...] | None:
  if sizes is None:
    return None
  if isinstance(sizes, int):
    sizes = (sizes,)
  try:
    torso = tuple(int(s) for s in sizes)
  except (TypeError, ValueError):
    torso = ()
  if not torso or min(torso) < 1 or list(torso) != list(sizes):
    raise errors.UsageError(
        f"config.student_torso={sizes!r}: give the sizes of the dense "
        "layers as positive integers, e.g. (256, 256)."
    )
  return torso


def _envs(specs: Any, key: str) -> tuple[tuple[str, dict[str, Any]], ...]:
  if isinstance(specs, str):
    specs = (specs,)
  specs = tuple(specs or ())
  if not specs:
    raise errors.UsageError(
        f"config.{key} is empty: name at least one environment."
    )
  parsed = []
  for spec in specs:
    name, env_settings = specs_lib.parse_spec(spec, "environment")
    try:
      env_registry.get_entry(name)
    except ValueError as e:
      raise errors.UsageError(f"config.{key}: {errors.one_line(e)}") from None
    parsed.append((name, env_settings))
  return tuple(parsed)
