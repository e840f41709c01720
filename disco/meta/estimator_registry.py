"""Meta-gradient estimators by name: ``--config.estimator=NAME``.

One entry per estimator: the factory of its meta-step program, its own
settings (the config group ``config.<name>``) and what else of a run it
works with. ``register_estimator`` adds one; ``disco-meta-train`` and
``disco.meta.trainer`` then accept its name (a module named in
``--config.imports`` may register it)::

  estimator_registry.register_estimator(
      "my_estimator", MyPopulation, settings=MySettings)

The factory is called as ``make(groups, population, settings,
meta_optimizer, devices, normalizers)``:

  groups          the run's agent groups (``meta_step.AgentGroup``);
  population      the population settings (``meta_step.PopulationConfig``);
  settings        the estimator's own settings (None without a settings
                  type);
  meta_optimizer  the optax transformation of the meta-parameters;
  devices         the devices to shard over;
  normalizers     ``{group name: (random return, reference - random)}`` for
                  the groups whose environment has reference scores
                  (``disco.environments.reference_scores``);

and returns a ``meta_step.MetaStepProgram`` (raising ``ValueError`` for a
population it cannot run, e.g. members that do not split over the devices).

An estimator's settings type has a classmethod ``from_config(values,
agent)`` that returns its settings from ``values``, the dict of
``config.<name>`` (empty when the config has no such group; keys it lacks
take their defaults), and ``agent``, the run's agent settings (None when
they are bad, reported on their own); it raises ``ValueError`` or
``TypeError`` for bad values. ``configs/meta_train.py`` holds the groups of
the estimators registered here (``config.es``, ``config.pes``); a config of
your own may hold the group of the estimator it names.

Registered here: ``backprop`` (``disco.meta.population``), ``es``
(``disco.meta.es``) and ``pes`` (``disco.meta.pes``).
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
import operator
from typing import Any

from disco.meta import es
from disco.meta import meta_step
from disco.meta import pes
from disco.meta import population

MakeProgram = Callable[..., meta_step.MetaStepProgram]


@dataclasses.dataclass(frozen=True)
class EstimatorEntry:
  """A registered estimator.

  Attributes:
    name: the registry name (``config.estimator``; its settings group is
      ``config.<name>``).
    make: ``(groups, population, settings, meta_optimizer, devices,
      normalizers) -> MetaStepProgram`` (see the module docstring).
    settings: the type of its settings (with ``from_config(values,
      agent)``); None: it has none (``make`` gets None).
    shards_agents: every group's ``num_agents`` splits over the devices
      (False: the estimator shards members of its own, e.g. ES's).
    replay: works with the agents' replay (``config.replay_capacity``).
    level_samplers: works with level samplers (``config.level_sampler``).
    agent_updates: the learner updates of an agent's whole lifetime given
      the settings, where the estimator fixes it (agents that anneal their
      learning rate anneal over it); None: it does not.
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
  """Registers an estimator under ``name`` (the fields of
  ``EstimatorEntry``).

  Raises:
    ValueError: the name is taken or is not an identifier (it names the
      config group ``config.<name>``), or ``settings`` has no
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
  """The registered estimators whose entry's boolean ``feature``
  (``replay``, ``level_samplers``, ``shards_agents``) holds."""
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
