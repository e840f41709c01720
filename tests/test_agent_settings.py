"""Typed agent settings: frozen, merged by a pure function, JSON round trip."""

import dataclasses

import pytest

from disco.update_rules import agent_settings
from disco.update_rules import overrides
from disco.update_rules import registry


@pytest.mark.parametrize("name", registry.rule_names())
def test_default_settings_round_trip_through_json(name):
  settings = registry.default_settings(name)
  assert isinstance(settings, agent_settings.AgentSettings)
  assert agent_settings.AgentSettings.from_dict(settings.to_dict()) == settings
  assert settings.rule == name
  settings.check()


def test_settings_and_their_mappings_are_read_only():
  settings = registry.default_settings("lpg")
  with pytest.raises(dataclasses.FrozenInstanceError):
    settings.learning_rate = 1.0
  with pytest.raises(TypeError):
    settings.hyper_params["entropy_cost"] = 1.0
  with pytest.raises(TypeError):
    settings.rule_kwargs["net"]["hidden_size"] = 3  # nested dicts too
  assert isinstance(settings.to_dict()["rule_kwargs"]["net"], dict)


def test_merged_is_pure_and_merges_one_level_deep():
  base = registry.default_settings("lpg")
  before = base.to_dict()
  merged = overrides.merged(
      base,
      "lpg",
      hyper_params={"agent_target_coeff": 1},
      rule_kwargs={"net": {"hidden_size": 8}},
      network={"dense": [4]},
      learning_rate=0.5,
  )
  assert base.to_dict() == before
  assert merged.hyper_params["agent_target_coeff"] == 1.0
  assert isinstance(merged.hyper_params["agent_target_coeff"], float)
  assert merged.rule_kwargs["net"]["hidden_size"] == 8
  # The other keys of the nested dict stay.
  assert set(merged.rule_kwargs["net"]) == set(base.rule_kwargs["net"])
  assert merged.network["dense"] == (4,)
  assert merged.learning_rate == 0.5
  assert merged.replace(learning_rate=base.learning_rate).network != (
      base.network
  )


@pytest.mark.parametrize(
    "given, message",
    [
        (dict(hyper_params={"nope": 1.0}), r"Unknown hyper_params \['nope'\]"),
        (dict(rule_kwargs={"nope": 1}), r"Unknown rule_kwargs \['nope'\]"),
        (dict(hyper_params={"value_cost": float("nan")}), "finite number"),
        (dict(optimizer="sgd"), r"Unknown agent setting\(s\) \['optimizer'\]"),
    ],
)
def test_merged_refuses_what_the_rule_lacks(given, message):
  with pytest.raises(overrides.SettingsError, match=message):
    overrides.merged(
        registry.default_settings("actor_critic"), "actor_critic", **given
    )


def test_from_dict_refuses_unknown_and_missing_keys():
  values = registry.default_settings("ppo").to_dict()
  with pytest.raises(ValueError, match=r"Unknown agent setting.*optimizer"):
    agent_settings.AgentSettings.from_dict(dict(values, optimizer="sgd"))
  del values["learning_rate"]
  with pytest.raises(ValueError, match="Incomplete agent settings"):
    agent_settings.AgentSettings.from_dict(values)


def test_check_names_every_value_out_of_range():
  settings = registry.default_settings("ppo").replace(
      learning_rate=-1.0,
      loss_mask="some",
      hyper_params={"gae_lambda": 1.5},
  )
  with pytest.raises(ValueError) as info:
    registry.make_rule(settings)
  message = str(info.value)
  for part in ("learning_rate=-1.0", "loss_mask='some'", "gae_lambda=1.5"):
    assert part in message
