"""Meta-gradient estimators by name: ``--config.estimator=NAME``.

``register_estimator(name, make, settings=...)`` adds one (a
``--config.imports`` module may). ``make(groups, population, settings,
meta_optimizer, devices, normalizers)`` gets the ``meta_step.AgentGroup``s, the
``meta_step.PopulationConfig``, its settings (None without a type), the optax
meta-optimiser, the devices, and ``{group: (random return, reference -
random)}`` of groups with reference scores; it returns a
``meta_step.MetaStepProgram`` (ValueError for a population it cannot run). A
settings type's classmethod ``from_config(values, agent)`` takes
``config.<name>`` as a dict (missing keys: defaults) and the agent settings
(None when bad), raising ValueError or TypeError for bad values.

Registered here: ``backprop``, ``es``, ``pes`` and ``bmg``.
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
import operator
from typing import Any

from disco.meta import bmg
from disco.meta import es
from disco.meta import meta_step
from disco.meta import pes
from disco.meta import population

MakeProgram = Callable[..., meta_step.MetaStepProgram]


@dataclasses.dataclass(frozen=True)
class EstimatorEntry:
  """A registered estimator.

  Attributes:
    name: the registry name (settings group ``config.<name>``).
    make: the program factory (see the module docstring).
    settings: its settings type (with ``from_config``), or None.
    shards_agents: every group's ``num_agents`` splits over the devices (False:
      it shards members of its own).
    replay: works with the agents' replay.
    level_samplers: works with level samplers.
    agent_updates: an agent's lifetime in learner updates given the settings,
      where the estimator fixes it; None: not fixed.
    description: one line for listings.
  """

  name: str
  make: MakeProgram
  settings: type | None = None
  shards_agents: bool = True
  replay: bool = False
  level_samplers: bool = False
  agent_updates: Callable[[Any], int] | None = None
  description: str = ""


_REGISTRY: dict[str, EstimatorEntry] = {}


def register_estimator(
    name: str,
    make: MakeProgram,
    *,
    settings: type | None = None,
    shards_agents: bool = True,
    replay: bool = False,
    level_samplers: bool = False,
    agent_updates: Callable[[Any], int] | None = None,
    description: str = "",
) -> EstimatorEntry:
  """Registers an estimator under ``name`` (the fields of ``EstimatorEntry``).

  Raises:
    ValueError: the name is taken or not an identifier, or ``settings`` has no
      ``from_config``.
  """
  if not name.isidentifier():
    raise ValueError(
        f"Bad estimator name {name!r}: use letters, digits and '_' (it "
        "names the config group config.<name>)."
    )
  if name in _REGISTRY:
    raise ValueError(f"An estimator named {name!r} is already registered.")
  if settings is not None and not callable(
      getattr(settings, "from_config", None)
  ):
    raise ValueError(
        f"The settings of estimator {name!r} need a classmethod "
        "from_config(values, agent)."
    )
  entry = EstimatorEntry(
      name=name,
      make=make,
      settings=settings,
      shards_agents=shards_agents,
      replay=replay,
      level_samplers=level_samplers,
      agent_updates=agent_updates,
      description=description,
  )
  _REGISTRY[name] = entry
  return entry


def unregister_estimator(name: str) -> None:
  """Removes a registered estimator (e.g. one a test registered)."""
  _REGISTRY.pop(name, None)


def estimator_names() -> tuple[str, ...]:
  """Every registered name, in registration order."""
  return tuple(_REGISTRY)


def names_with(feature: str) -> tuple[str, ...]:
  """The registered estimators whose boolean ``feature`` (``replay``,
  ``level_samplers``, ``shards_agents``) holds."""
  return tuple(n for n, e in _REGISTRY.items() if getattr(e, feature))


def get_entry(name: str) -> EstimatorEntry:
  """The entry of ``name``.

  Raises:
    ValueError: naming the registered estimators.
  """
  if name not in _REGISTRY:
    raise ValueError(
        f"Unknown estimator {name!r}; use one of {', '.join(_REGISTRY)}."
    )
  return _REGISTRY[name]


def _backprop(groups, config, settings, meta_optimizer, devices, normalizers):
  del settings, normalizers
  return population.BackpropPopulation(groups, config, meta_optimizer, devices)


def _pes(groups, config, settings, meta_optimizer, devices, normalizers):
  del normalizers
  return pes.PESPopulation(groups, config, settings, meta_optimizer, devices)


def _bmg(groups, config, settings, meta_optimizer, devices, normalizers):
  del normalizers
  return bmg.BMGPopulation(groups, config, settings, meta_optimizer, devices)


register_estimator(
    "backprop",
    _backprop,
    replay=True,
    level_samplers=True,
    description="backpropagation through inner_steps learner updates",
)
register_estimator(
    "es",
    es.ESPopulation,
    settings=es.ESConfig,
    shards_agents=False,
    agent_updates=operator.attrgetter("lifetime_updates"),
    description="evolution strategies over whole lifetimes (config.es)",
)
register_estimator(
    "pes",
    _pes,
    settings=pes.PESConfig,
    description="persistent ES over truncations of inner_steps updates "
    "(config.pes)",
)
register_estimator(
    "bmg",
    _bmg,
    settings=bmg.BMGConfig,
    description="bootstrapped meta-gradients: inner_steps updates matched to "
    "a target bmg.target_steps updates further (config.bmg)",
)
