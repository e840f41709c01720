"""Agent settings as ``ml_collections.ConfigDict`` and the rule registry.

A settings dict has:
  ``rule``          name of the update rule (see ``RULE_NAMES``);
  ``rule_kwargs``   constructor arguments of the rule;
  ``hyper_params``  loss coefficients / discounts passed to the rule's losses;
  ``learning_rate``, ``max_abs_update``  the agent optimiser;
  ``network``       the agent network (``name``, ``dense``,
                    ``head_w_init_std``, ``model_lstm_size``,
                    ``model_head_hiddens``).
"""

from __future__ import annotations

from typing import Callable

from ml_collections import config_dict

from disco import agent as agent_lib
from disco.networks import agent_nets
from disco.networks import meta_nets
from disco.update_rules import actor_critic
from disco.update_rules import base
from disco.update_rules import disco
from disco.update_rules import mpo
from disco.update_rules import policy_gradient
from disco.update_rules import spo

NETWORK_NAMES = ("mlp",)


def _disco_rule(**kwargs) -> base.UpdateRule:
  net = dict(kwargs.pop("net", {}) or {})
  return disco.DiscoUpdateRule(net=meta_nets.MetaNetConfig(**net), **kwargs)


RULES: dict[str, Callable[..., base.UpdateRule]] = {
    "disco": _disco_rule,
    "actor_critic": actor_critic.ActorCritic,
    "policy_gradient": policy_gradient.PolicyGradient,
    "mpo": mpo.MPO,
    "spo": spo.SPO,
}
RULE_NAMES = tuple(RULES)


def register_rule(name: str, factory: Callable[..., base.UpdateRule]) -> None:
  """Makes a new rule available to ``make_rule`` and the launchers."""
  if name in RULES:
    raise ValueError(f"A rule named {name!r} is already registered.")
  RULES[name] = factory


def make_rule(name: str, **kwargs) -> base.UpdateRule:
  if name not in RULES:
    raise ValueError(
        f"Unknown update rule {name!r}; valid rules: {', '.join(RULES)}.")
  try:
    return RULES[name](**kwargs)
  except TypeError as e:
    raise ValueError(f"Bad settings for rule {name!r}: {e}.") from None


def _network(dense, lstm_size=128, head_hiddens=(128,)) -> dict:
  return dict(name="mlp", dense=dense, head_w_init_std=1e-2,
              model_lstm_size=lstm_size, model_head_hiddens=head_hiddens)


def get_settings_disco() -> config_dict.ConfigDict:
  """Disco103 with the evaluation notebook's network and learning rate."""
  return config_dict.ConfigDict(dict(
      rule="disco",
      rule_kwargs=dict(value_discount=0.997, max_abs_value=300.0,
                       num_bins=601),
      hyper_params=dict(disco.DISCO103_HYPER_PARAMS),
      learning_rate=1e-2,
      max_abs_update=1.0,
      network=_network((512, 512), 128, (128,)),
  ))


def get_settings_actor_critic() -> config_dict.ConfigDict:
  """The published actor-critic baseline (categorical, transformed value)."""
  return config_dict.ConfigDict(dict(
      rule="actor_critic",
      rule_kwargs=dict(categorical_value=True, num_bins=601,
                       max_abs_value=300.0, nonlinear_value_transform=True,
                       normalize_adv=False, normalize_td=False),
      hyper_params=dict(actor_critic.ACTOR_CRITIC_HYPER_PARAMS),
      learning_rate=5e-4,
      max_abs_update=1.0,
      network=_network((64, 32, 32), 64, (64,)),
  ))


def get_settings_policy_gradient() -> config_dict.ConfigDict:
  return config_dict.ConfigDict(dict(
      rule="policy_gradient",
      rule_kwargs=dict(entropy_cost=0.01, normalize_adv=True, pg_cost=1.0),
      hyper_params=dict(policy_gradient.POLICY_GRADIENT_HYPER_PARAMS),
      learning_rate=5e-4,
      max_abs_update=1.0,
      network=_network((64, 32, 32), 64, (64,)),
  ))


def get_settings_mpo() -> config_dict.ConfigDict:
  """Discrete MPO with the published loss and dual settings.

  One network predicts the policy and Q (Stoix uses two, with learning rates
  1e-4 and 128 SGD steps per rollout); this harness takes one learner step
  per iteration, hence the larger learning rate. Learns Catch 5x5.
  """
  return config_dict.ConfigDict(dict(
      rule="mpo",
      rule_kwargs=dict(q_target="lambda", init_log_temperature=3.0,
                       init_log_alpha=3.0, dual_lr=1e-2,
                       dual_max_grad_norm=40.0),
      hyper_params=dict(mpo.MPO_HYPER_PARAMS),
      learning_rate=1e-3,
      max_abs_update=1.0,
      network=_network((64, 32, 32), 64, (64,)),
  ))


def get_settings_spo() -> config_dict.ConfigDict:
  """SPO with the ``ff_spo.yaml`` search, loss and dual settings.

  One network predicts the policy and the value (``ff_spo.yaml``: two, with
  learning rates 3e-4 and 128 SGD steps per rollout); one learner step per
  iteration here, hence the larger learning rate. Learns Catch 5x5.
  """
  return config_dict.ConfigDict(dict(
      rule="spo",
      rule_kwargs=dict(
          num_particles=16, search_depth=4, resampling_mode="period",
          resampling_period=4, ess_threshold=0.5, adaptive_temperature=True,
          fixed_temperature=0.5, search_gamma=1.0, search_gae_lambda=1.0,
          root_dirichlet_alpha=1.0, root_dirichlet_fraction=0.0,
          init_log_temperature=3.0, init_log_alpha=3.0, dual_lr=1e-3,
          dual_max_grad_norm=0.5),
      hyper_params=dict(spo.SPO_HYPER_PARAMS),
      learning_rate=1e-3,
      max_abs_update=1.0,
      network=_network((64, 32, 32), 64, (64,)),
  ))


SETTINGS: dict[str, Callable[[], config_dict.ConfigDict]] = {
    "disco": get_settings_disco,
    "actor_critic": get_settings_actor_critic,
    "policy_gradient": get_settings_policy_gradient,
    "mpo": get_settings_mpo,
    "spo": get_settings_spo,
}


def get_settings(rule: str) -> config_dict.ConfigDict:
  if rule not in SETTINGS:
    raise ValueError(
        f"No default settings for rule {rule!r}; valid rules: "
        f"{', '.join(SETTINGS)}.")
  return SETTINGS[rule]()


def make_net_config(network: config_dict.ConfigDict | dict
                    ) -> agent_nets.MLPNetConfig:
  network = dict(network)
  name = network.pop("name", "mlp")
  if name not in NETWORK_NAMES:
    raise ValueError(
        f"Unknown network {name!r}; valid networks: {', '.join(NETWORK_NAMES)}.")
  try:
    return agent_nets.MLPNetConfig(
        dense=tuple(network.pop("dense")),
        head_w_init_std=network.pop("head_w_init_std", 1e-2),
        model_lstm_size=network.pop("model_lstm_size", 128),
        model_head_hiddens=tuple(network.pop("model_head_hiddens", (128,))),
        **network)
  except (TypeError, KeyError) as e:
    raise ValueError(f"Bad network settings {e}; expected keys: name, dense, "
                     "head_w_init_std, model_lstm_size, model_head_hiddens."
                     ) from None


def make_agent(settings: config_dict.ConfigDict, num_actions: int,
               axis_name: str | None = None) -> agent_lib.Agent:
  """Builds the rule and the agent described by ``settings``."""
  rule = make_rule(settings.rule, **settings.rule_kwargs.to_dict())
  return agent_lib.Agent(
      rule=rule,
      num_actions=num_actions,
      net_config=make_net_config(settings.network.to_dict()),
      hyper_params=settings.hyper_params.to_dict(),
      learning_rate=settings.learning_rate,
      max_abs_update=settings.max_abs_update,
      axis_name=axis_name)
