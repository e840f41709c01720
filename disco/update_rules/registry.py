"""Update rules by name: each entry a factory and default agent settings
(``agent_settings.AgentSettings``).

``make(hyper_params=..., **rule_kwargs)`` builds the rule; ``default_settings``
fills ``rule_kwargs`` with the factory's keyword defaults and ``hyper_params``
with ``default_hyper_params``, so an entry states only what differs, plus the
learning rate and network:

```python
registry.register_rule(
    "my_rule", MyRule,
    dict(learning_rate=1e-3, network=agent_nets.network_settings((64, 64))))
```

An entry may stand for trained meta-parameters (``disco103``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
import copy
import dataclasses
import difflib
import inspect
from typing import Any

from disco import types
from disco import weights
from disco.networks import agent_nets
from disco.networks import lpg_net
from disco.update_rules import actor_critic
from disco.update_rules import agent_settings as agent_settings_lib
from disco.update_rules import base
from disco.update_rules import disco
from disco.update_rules import lpg
from disco.update_rules import mirror_learning
from disco.update_rules import mpo
from disco.update_rules import policy_gradient
from disco.update_rules import ppo
from disco.update_rules import self_tuning
from disco.update_rules import spo

# The settings a rule's entry may give besides learning_rate and network.
OPTIONAL_KEYS = tuple(
    f.name
    for f in dataclasses.fields(agent_settings_lib.AgentSettings)
    if f.name not in ("rule", "learning_rate", "network")
)

# The fields of disco.training.loop.LoopConfig a rule may recommend.
LOOP_KEYS = (
    "num_envs",
    "rollout_len",
    "batch_size",
    "replay_capacity",
    "min_replay_size",
    "update_epochs",
    "num_minibatches",
)

# (path or None, expected meta-parameter shapes) -> checked meta-parameters.
PretrainedLoader = Callable[[Any, types.MetaParams], types.MetaParams]


@dataclasses.dataclass(frozen=True)
class RuleEntry:
  """A registered rule.

  Attributes:
    name: the registry name.
    make: ``(hyper_params=..., **rule_kwargs) -> UpdateRule``.
    settings: ``learning_rate``, ``network`` and optionally ``OPTIONAL_KEYS``
      (``rule_kwargs``, ``hyper_params``: overrides of the factory's defaults).
    pretrained: for trained meta-parameters, a loader ``(path or None, expected)
      -> meta_params``.
    description: one line for listings.
    loop: the ``LoopConfig`` fields the rule is meant for, where the user sets
      none (empty: the published notebook's loop).
  """

  name: str
  make: Callable[..., base.UpdateRule]
  settings: Mapping[str, Any]
  pretrained: PretrainedLoader | None = None
  description: str = ""
  loop: Mapping[str, int] = dataclasses.field(default_factory=dict)


_REGISTRY: dict[str, RuleEntry] = {}


def factory_defaults(make: Callable[..., Any]) -> dict[str, Any]:
  """The keyword defaults of ``make`` other than ``hyper_params`` and None."""
  return {
      name: p.default
      for name, p in inspect.signature(make).parameters.items()
      if name != "hyper_params"
      and p.default is not inspect.Parameter.empty
      and p.default is not None
  }


def register_rule(
    name: str,
    make: Callable[..., base.UpdateRule],
    settings: Mapping[str, Any],
    *,
    pretrained: PretrainedLoader | None = None,
    description: str = "",
    loop: Mapping[str, int] | None = None,
) -> RuleEntry:
  """Registers a rule under ``name`` and returns its entry.

  Args:
    name: a new name (letters, digits, ``_``, ``-``, ``.``).
    make: the rule's factory (usually its class).
    settings: see ``RuleEntry.settings``.
    pretrained: see ``RuleEntry.pretrained``.
    description: one line for listings.
    loop: see ``RuleEntry.loop``.

  Raises:
    ValueError: the name is taken or malformed, or the settings lack a key or
      have an unknown one.
  """
  if not name or not all(c.isalnum() or c in "_-." for c in name):
    raise ValueError(
        f"Bad rule name {name!r}: use letters, digits, '_', '-' and '.'."
    )
  if name in _REGISTRY:
    raise ValueError(f"A rule named {name!r} is already registered.")
  settings = dict(settings)
  missing = {"learning_rate", "network"} - set(settings)
  unknown = set(settings) - set(OPTIONAL_KEYS) - {"learning_rate", "network"}
  if missing or unknown:
    raise ValueError(
        f"The settings of rule {name!r} need learning_rate and network and "
        f"may have {', '.join(OPTIONAL_KEYS)}; got {sorted(settings)}."
    )
  loop = dict(loop or {})
  if set(loop) - set(LOOP_KEYS):
    raise ValueError(
        f"The loop of rule {name!r} may set {', '.join(LOOP_KEYS)}; got "
        f"{sorted(loop)}."
    )
  entry = RuleEntry(
      name=name,
      make=make,
      settings=copy.deepcopy(settings),
      pretrained=pretrained,
      description=description,
      loop=loop,
  )
  _REGISTRY[name] = entry
  return entry


def unregister_rule(name: str) -> None:
  """Removes a registered rule (e.g. one a test registered)."""
  _REGISTRY.pop(name, None)


def rule_names() -> tuple[str, ...]:
  """Every registered name, in registration order."""
  return tuple(_REGISTRY)


def continuous_rule_names() -> tuple[str, ...]:
  """The registered rules that work with continuous actions."""
  return tuple(
      name
      for name, entry in _REGISTRY.items()
      if getattr(entry.make, "supports_continuous_actions", False)
  )


def get_entry(name: str) -> RuleEntry:
  """The entry of ``name``.

  Raises:
    ValueError: naming the close matches and the valid names.
  """
  if name not in _REGISTRY:
    close = difflib.get_close_matches(str(name), _REGISTRY, n=3)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise ValueError(
        f"Unknown update rule {name!r}.{hint} Valid rules: "
        f"{', '.join(_REGISTRY)}."
    )
  return _REGISTRY[name]


def _build(
    entry: RuleEntry, rule_kwargs: dict[str, Any], hyper_params: dict[str, Any]
) -> base.UpdateRule:
  try:
    return entry.make(hyper_params=hyper_params, **rule_kwargs)
  except TypeError as e:
    raise ValueError(f"Bad rule_kwargs for rule {entry.name!r}: {e}.") from None


def default_settings(name: str) -> agent_settings_lib.AgentSettings:
  """The complete default agent settings of rule ``name``.

  Raises:
    ValueError: an unknown rule.
  """
  entry = get_entry(name)
  given = copy.deepcopy(dict(entry.settings))
  hyper_params = dict(given.pop("hyper_params", None) or {})
  rule_kwargs = {
      **factory_defaults(entry.make),
      **(given.pop("rule_kwargs", None) or {}),
  }
  if hasattr(entry.make, "default_hyper_params"):  # a rule class
    hyper_params = {**entry.make.default_hyper_params, **hyper_params}
  else:  # another factory: ask the rule it builds
    hyper_params = dict(_build(entry, rule_kwargs, hyper_params).hyper_params)
  return agent_settings_lib.AgentSettings(
      rule=name, rule_kwargs=rule_kwargs, hyper_params=hyper_params, **given
  )


def make_rule(settings: agent_settings_lib.AgentSettings) -> base.UpdateRule:
  """The rule that agent ``settings`` describe; every source of settings passes
  here, so their values are checked here (``AgentSettings.check``; the rule's
  own by its factory).

  Raises:
    ValueError: unknown rule, a setting out of range, or settings its factory
      rejects.
  """
  settings.check()
  entry = get_entry(settings.rule)
  return _build(
      entry,
      agent_settings_lib.thawed(settings.rule_kwargs),
      dict(settings.hyper_params),
  )


# The published actor-critic network; MPO, SPO and policy gradient use it too.
SMALL_NETWORK = agent_nets.network_settings((64, 32, 32), 64, (64,))
# The evaluation notebook's Disco agent and learning rate.
DISCO_SETTINGS = dict(
    learning_rate=1e-2,
    network=agent_nets.network_settings((512, 512), 128, (128,)),
)

# MPO and SPO: one network and one learner step per iteration (Stoix: two
# networks, 128 SGD steps per rollout), hence larger learning rates and tau.
ONE_STEP_DUAL_RULE = dict(
    learning_rate=3e-3,
    network=SMALL_NETWORK,
    hyper_params=dict(target_update_tau=0.05),
)
# purejaxrl's PPO on CartPole-v1: separate 64x64 tanh actor and critic,
# Adam(2.5e-4, eps 1e-5) annealed to 0, global-norm clip 0.5.
PPO_SETTINGS = dict(
    learning_rate=2.5e-4,
    network=agent_nets.network_settings(
        (64, 64), activation="tanh", activate_final=True, separate_torsos=True
    ),
    max_abs_update=None,
    max_grad_norm=0.5,
    adam_eps=1e-5,
    anneal_learning_rate=True,
)
# A loop without replay: each learner step trains on the fresh rollouts.
NO_REPLAY = dict(replay_capacity=0, min_replay_size=0)
# purejaxrl's CartPole loop: 4 envs x 128 steps, no replay, 4 epochs x 4
# minibatches per rollout.
PPO_LOOP = dict(
    NO_REPLAY,
    num_envs=4,
    rollout_len=128,
    batch_size=4,
    update_epochs=4,
    num_minibatches=4,
)
for _name, _make, _settings, _description in (
    ("disco", disco.Disco, DISCO_SETTINGS, "the Disco meta-network rule"),
    (
        "actor_critic",
        actor_critic.ActorCritic,
        dict(learning_rate=5e-4, network=SMALL_NETWORK),
        "V-trace actor-critic",
    ),
    (
        "policy_gradient",
        policy_gradient.PolicyGradient,
        dict(learning_rate=5e-4, network=SMALL_NETWORK),
        "REINFORCE with a learned baseline",
    ),
    (
        "mpo",
        mpo.MPO,
        ONE_STEP_DUAL_RULE,
        "MPO: exact E-step (discrete actions) or sampled (continuous)",
    ),
    (
        "spo",
        spo.SPO,
        dict(ONE_STEP_DUAL_RULE, rule_kwargs=dict(dual_lr=1e-2)),
        "SMC policy optimisation over env copies",
    ),
):
  register_rule(_name, _make, _settings, description=_description)
register_rule(
    "ppo",
    ppo.PPO,
    PPO_SETTINGS,
    description="PPO: clipped surrogate, GAE",
    loop=PPO_LOOP,
)
# Mirror-learning rules (Lu et al. 2022) on PPO's agent and loop: DPO's
# closed-form drift and LPO's learned one (meta-train it with the es
# estimator: configs/meta_train_lpo.py).
register_rule(
    "dpo",
    mirror_learning.DPO,
    PPO_SETTINGS,
    description="DPO: PPO with the discovered closed-form drift",
    loop=PPO_LOOP,
)
register_rule(
    "lpo",
    mirror_learning.LPO,
    PPO_SETTINGS,
    description="LPO: PPO with a meta-learned drift network",
    loop=PPO_LOOP,
)

# Self-tuning rules (disco.update_rules.self_tuning): their base rules' agents
# and loops, their hyper-parameters tuned online by meta-gradients.
register_rule(
    "stac",
    self_tuning.STAC,
    dict(learning_rate=5e-4, network=SMALL_NETWORK),
    description="self-tuning actor-critic (STAC): online meta-gradients",
)
register_rule(
    "self_tuning_ppo",
    self_tuning.SelfTuningPPO,
    PPO_SETTINGS,
    description="PPO tuning its hyper-parameters by online meta-gradients",
    loop=PPO_LOOP,
)

# LPG's agents: separate policy and prediction torsos, as GROOVE's actor and
# critic (32 hidden units as its non-tabular grid worlds; Adam there too).
LPG_SETTINGS = dict(
    learning_rate=1e-3,
    network=agent_nets.network_settings(
        (32,), activate_final=True, separate_torsos=True
    ),
    max_abs_update=None,
    max_grad_norm=0.5,
)
register_rule(
    "lpg",
    lpg.LPG,
    dict(
        LPG_SETTINGS,
        rule_kwargs=dict(net=dataclasses.asdict(lpg_net.LPGNetConfig())),
    ),
    description="Learned Policy Gradient (Oh et al. 2020)",
)
register_rule(
    "ta_lpg",
    lpg.LPG,
    dict(
        LPG_SETTINGS,
        rule_kwargs=dict(
            net=dataclasses.asdict(
                lpg_net.LPGNetConfig(lifetime_conditioning=True)
            )
        ),
    ),
    description="temporally-aware LPG: conditioned on the agent's lifetime",
)

register_rule(
    "disco103",
    disco.Disco,
    DISCO_SETTINGS,
    pretrained=lambda path, expected: weights.load_disco103(
        path, expected=expected
    ),
    description="the Disco rule with the published Disco103 meta-parameters",
)
