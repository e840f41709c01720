"""Tests for rule settings from flags (disco.update_rules.settings) in
disco-eval and disco-meta-train, and their listing."""

from __future__ import annotations

import subprocess
import sys

from absl import flags
import pytest

from disco import checks
from disco import errors
from disco import weights as weights_lib
from disco.launch import common
from disco.launch import evaluate
from disco.launch import meta_train
from disco.update_rules import actor_critic
from disco.update_rules import registry
from disco.update_rules import resolve
from disco.update_rules import settings as rule_settings
from disco.update_rules.settings import KEYS

import meta_settings
import test_evaluate_launcher


def _one_line(message: str) -> None:
  assert message and "\n" not in message and "Traceback" not in message


def _parse(module, argv, config_name=None):
  fv = flags.FlagValues()
  common.parse_config_flags(
      ["prog", *argv],
      checks.config_path(config_name or module.CONFIG_NAME),
      "help",
      flag_values=fv,
      prepare=module.prepare_config,
  )
  return fv.config


# ------------------------------------------------------------ listing ----


class _Documented(actor_critic.ActorCritic):
  """Actor-critic with one more switch.

  Args:
    hyper_params: overrides.
    extra_switch: a switch only this
      test's rule has.
    **kwargs: ActorCritic's.
  """

  default_hyper_params = dict(
      actor_critic.ACTOR_CRITIC_HYPER_PARAMS, test_cost=0.25
  )

  def __init__(self, hyper_params=None, extra_switch: int = 7, **kwargs):
    super().__init__(hyper_params, **kwargs)
    self.extra_switch = extra_switch


@pytest.fixture
def documented_rule():
  registry.register_rule(
      "test_documented",
      _Documented,
      dict(learning_rate=0.125, network=registry.SMALL_NETWORK),
  )
  yield "test_documented"
  registry.unregister_rule("test_documented")


def test_listing_comes_from_the_registry_and_the_factories(documented_rule):
  rows = {s: (d, m) for s, d, m in rule_settings.rows(documented_rule)}
  assert rows["hyper_params.test_cost"] == (
      "0.25",
      "a coefficient of the rule's loss",
  )
  assert rows["hyper_params.entropy_cost"] == (
      "0.2",
      "weight of the policy-entropy bonus",
  )
  assert rows["rule_kwargs.extra_switch"] == (
      "7",
      "a switch only this test's rule has",
  )
  assert rows["learning_rate"][0] == "0.125"
  table = rule_settings.describe()
  header = table.splitlines()[0].split()
  assert header == ["rule", "setting", "default", "meaning"]
  for name in registry.rule_names():  # every rule, every hyper-parameter
    for key in registry.default_settings(name).hyper_params:
      assert any(
          line.split()[:2] == [name, f"hyper_params.{key}"]
          for line in table.splitlines()
      ), (name, key)
  ppo = {s: d for s, d, _ in rule_settings.rows("ppo")}
  assert ppo["hyper_params.entropy_cost"] == "0.01"
  assert ppo["rule_kwargs.clip_value"] == "True"
  lpg = {s: d for s, d, _ in rule_settings.rows("lpg")}
  assert lpg["rule_kwargs.net.hidden_size"] == "256"


def test_listing_flags_print_and_exit_0():
  for module, args in (
      ("disco.launch.evaluate", ["--describe_rule=ppo,actor_critic"]),
      ("disco.launch.meta_train", ["--list_rules"]),
  ):
    result = subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["rule", "setting", "default", "meaning"]
    assert any(
        ln.split()[:3] == ["ppo", "hyper_params.entropy_cost", "0.01"]
        for ln in lines
    )
    assert any(
        ln.split()[:3] == ["actor_critic", "hyper_params.entropy_cost", "0.2"]
        for ln in lines
    )
    listed = {ln.split()[0] for ln in lines[1:] if ln.strip()}
    if "--list_rules" in args:
      assert set(registry.rule_names()) <= listed
    else:
      assert {"ppo", "actor_critic"} <= listed and "disco103" not in listed
  result = subprocess.run(
      [sys.executable, "-m", "disco.launch.evaluate", "--describe_rule=ppp"],
      capture_output=True,
      text=True,
      timeout=300,
  )
  assert result.returncode == 2
  _one_line(result.stderr.strip())
  assert "Did you mean ppo?" in result.stderr


# ---------------------------------------------------------- disco-eval ----


def test_disco_eval_rule_kwargs_from_flags(tmp_path):
  config = _parse(
      evaluate,
      ["--config.rule=ppo", "--config.rule_kwargs.clip_value=False"],
  )
  assert config.rule_kwargs.clip_value is False
  assert config.rule_kwargs.normalize_advantages is True  # the default
  with pytest.raises(
      errors.UsageError,
      match="Valid keys of config.rule_kwargs: clip_value, normalize_adv",
  ) as info:
    _parse(evaluate, ["--config.rule=ppo", "--config.rule_kwargs.clip=1"])
  _one_line(str(info.value))

  config = test_evaluate_launcher.tiny_config(
      tmp_path, rule="ppo", rule_kwargs=dict(clip_value=False)
  )
  plan = evaluate.build(config)
  assert plan.rule.rule._clip_value is False
  assert plan.rule.settings.rule_kwargs.clip_value is False
  config = test_evaluate_launcher.tiny_config(
      tmp_path, rule_kwargs=dict(clip=1.0)
  )
  with pytest.raises(
      errors.UsageError,
      match=r"Unknown rule_kwargs \['clip'\] for rule 'actor_critic': valid "
      "keys are categorical_value, num_bins",
  ) as info:
    evaluate.build(config)
  _one_line(str(info.value))


def test_disco_eval_rule_kwargs_must_fit_given_meta_params(tmp_path):
  tiny_net = dict(hidden_size=8, embedding_sizes=(4, 1), prediction_size=4)
  config = test_evaluate_launcher.tiny_config(
      tmp_path, rule="lpg", rule_kwargs=dict(net=tiny_net)
  )
  plan = evaluate.build(config)  # random meta-parameters of the new size
  assert plan.rule.settings.rule_kwargs.net.hidden_size == 8
  assert plan.rule.settings.rule_kwargs.net.lifetime_conditioning is False
  path = tmp_path / "lpg8.npz"
  weights_lib.save_meta_params(
      path,
      plan.rule.meta_params,
      metadata=dict(rule="lpg", rule_kwargs=dict(net=tiny_net)),
  )
  config = test_evaluate_launcher.tiny_config(
      tmp_path,
      rule=str(path),
      rule_kwargs=dict(net=dict(hidden_size=16)),
  )
  with pytest.raises(errors.UsageError, match="no longer fit") as info:
    evaluate.build(config)
  _one_line(str(info.value))


# ---------------------------------------------------- disco-meta-train ----


def test_disco_meta_train_rule_settings_from_flags():
  config = _parse(
      meta_train,
      [
          "--config.hyper_params.value_cost=0.3",
          "--config.rule_kwargs.num_bins=51",
      ],
  )
  assert config.hyper_params.value_cost == 0.3
  assert config.hyper_params.pi_cost == 1.0  # Disco's default
  assert config.rule_kwargs.num_bins == 51
  # The rule the command line names brings its settings.
  config = _parse(
      meta_train,
      ["--config.rule=lpg", "--config.rule_kwargs.net.hidden_size=8"],
  )
  assert config.rule_kwargs.net.hidden_size == 8
  assert config.rule_kwargs.net.prediction_size == 8  # LPG's default
  assert set(config.hyper_params) == {"agent_target_coeff"}
  # ... and so does the config file (LPG's, with its own net settings).
  config = _parse(
      meta_train,
      ["--config.rule_kwargs.net.prediction_size=4"],
      config_name="meta_train_lpg",
  )
  assert config.rule_kwargs.net.hidden_size == 256
  assert config.rule_kwargs.net.prediction_size == 4
  for argv, valid in (
      (["--config.hyper_params.entropy_cost=0.1"], "aux_policy_cost"),
      (["--config.rule_kwargs.bins=3"], "max_abs_value"),
  ):
    with pytest.raises(errors.UsageError, match=f"Valid keys.*{valid}") as info:
      _parse(meta_train, argv)
    _one_line(str(info.value))


def test_disco_meta_train_rule_settings_reach_the_agents(tmp_path):
  config = meta_settings.tiny_config(output_dir=str(tmp_path / "m"))
  config.hyper_params = dict(value_cost=0.3)
  plan = meta_train.build(config)
  assert plan.settings.hyper_params.value_cost == 0.3
  assert plan.rule.hyper_params["value_cost"] == 0.3
  # The export carries them, so disco-eval evaluates the rule as trained.
  path = meta_train.export_meta_params(
      tmp_path / "rule.npz", plan.meta_params, plan.settings, meta_step=1
  )
  assert weights_lib.load_metadata(path)["settings"] == dict(
      hyper_params=plan.settings.hyper_params.to_dict()
  )
  assert resolve.resolve_rule(str(path)).rule.hyper_params["value_cost"] == 0.3
  for key, value, match in (
      ("hyper_params", dict(entropy_cost=0.1), "Unknown hyper_params"),
      ("rule_kwargs", dict(bins=3), "Unknown rule_kwargs"),
      ("hyper_params", dict(value_cost="x"), "must be a finite number"),
  ):
    config = meta_settings.tiny_config(output_dir=str(tmp_path / "m"))
    config[key] = value
    with pytest.raises(errors.UsageError, match=match) as info:
      meta_train.build(config)
    _one_line(str(info.value))
    assert "for rule 'disco'" in str(info.value) or "value_cost" in str(
        info.value
    )


def test_resume_compares_rule_settings_with_their_defaults_filled_in():
  """A run configured in code (overrides only) and the same run from the
  command line (every default spelled out) resume each other; a changed
  setting does not."""
  saved = dict(meta_settings.tiny_config().to_dict())
  current = _parse(meta_train, ["--config.rule_kwargs.num_bins=601"]).to_dict()
  current.update({k: v for k, v in saved.items() if k not in KEYS})
  assert (
      current["hyper_params"]["value_cost"] == 0.2 and not saved["hyper_params"]
  )
  meta_train._check_same_config(saved, current, "x")
  current["hyper_params"]["value_cost"] = 0.3
  with pytest.raises(errors.UsageError, match="hyper_params: saved") as info:
    meta_train._check_same_config(saved, current, "x")
  _one_line(str(info.value))
