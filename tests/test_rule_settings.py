"""Tests for rule settings from flags (disco.update_rules.overrides) in
disco-eval and disco-meta-train, their listing, and settings written by
earlier versions (disco.update_rules.migrations)."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import warnings

from absl import flags
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from disco import checks
from disco import errors
from disco import evaluation
from disco import ops
from disco import types
from disco import weights as weights_lib
from disco.launch import common
from disco.launch import evaluate
from disco.launch import meta_train
from disco.meta import plan as plan_lib
from disco.meta import rule_files
from disco.meta import run_folder
from disco.meta import settings as meta_settings_lib
from disco.update_rules import actor_critic
from disco.update_rules import agent_settings
from disco.update_rules import migrations
from disco.update_rules import overrides
from disco.update_rules import policy_gradient
from disco.update_rules import registry
from disco.update_rules import resolve
from disco.update_rules.overrides import KEYS

import meta_settings
import test_evaluate_launcher


def _one_line(message: str) -> None:
  assert message and "\n" not in message and "Traceback" not in message


_CONFIG_NAMES = {
    evaluate: evaluation.CONFIG_NAME,
    meta_train: meta_settings_lib.CONFIG_NAME,
}


def _parse(module, argv, config_name=None):
  fv = flags.FlagValues()
  common.parse_config_flags(
      ["prog", *argv],
      checks.config_path(config_name or _CONFIG_NAMES[module]),
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
  rows = {s: (d, m) for s, d, m in overrides.rows(documented_rule)}
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
  table = overrides.describe()
  header = table.splitlines()[0].split()
  assert header == ["rule", "setting", "default", "meaning"]
  for name in registry.rule_names():  # every rule, every hyper-parameter
    for key in registry.default_settings(name).hyper_params:
      assert any(
          line.split()[:2] == [name, f"hyper_params.{key}"]
          for line in table.splitlines()
      ), (name, key)
  ppo = {s: d for s, d, _ in overrides.rows("ppo")}
  assert ppo["hyper_params.entropy_cost"] == "0.01"
  assert ppo["rule_kwargs.clip_value"] == "True"
  lpg = {s: d for s, d, _ in overrides.rows("lpg")}
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
  plan = evaluation.build(config)
  assert plan.rule.rule._clip_value is False
  assert plan.rule.settings.rule_kwargs["clip_value"] is False
  config = test_evaluate_launcher.tiny_config(
      tmp_path, rule_kwargs=dict(clip=1.0)
  )
  with pytest.raises(
      errors.UsageError,
      match=r"Unknown rule_kwargs \['clip'\] for rule 'actor_critic': valid "
      "keys are categorical_value, num_bins",
  ) as info:
    evaluation.build(config)
  _one_line(str(info.value))


def test_disco_eval_rule_kwargs_must_fit_given_meta_params(tmp_path):
  tiny_net = dict(hidden_size=8, embedding_sizes=(4, 1), prediction_size=4)
  config = test_evaluate_launcher.tiny_config(
      tmp_path, rule="lpg", rule_kwargs=dict(net=tiny_net)
  )
  plan = evaluation.build(config)  # random meta-parameters of the new size
  net = plan.rule.settings.rule_kwargs["net"]
  assert net["hidden_size"] == 8
  assert net["lifetime_conditioning"] is False
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
    evaluation.build(config)
  _one_line(str(info.value))


def test_missing_disco103_weights_are_named_not_blamed_on_its_preset(tmp_path):
  """The Catch preset's rule_kwargs keep Disco103's shapes, so weights that
  cannot be found are reported as such (kwargs that change the shapes are named
  as the reason: the test above)."""
  missing = str(tmp_path / "disco_103.npz")
  preset = dict(rule_kwargs=dict(num_bins=601, max_abs_value=300.0))
  with pytest.raises(errors.UsageError, match="Cannot load disco103") as info:
    resolve.resolve_rule("disco103", missing, preset)
  assert "no longer fit" not in str(info.value)
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
  assert set(config.hyper_params) == {
      "agent_target_coeff",  # the agent's loss and the meta-regularisers
      "policy_entropy_coeff",
      "target_entropy_coeff",
      "policy_l2_coeff",
      "target_l2_coeff",
  }
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
  plan = plan_lib.build(config)
  assert plan.settings.hyper_params["value_cost"] == 0.3
  assert plan.rule.hyper_params["value_cost"] == 0.3
  # The export carries them, so disco-eval evaluates the rule as trained.
  path = rule_files.export_meta_params(
      tmp_path / "rule.npz", plan.meta_params, plan.settings, meta_step=1
  )
  assert weights_lib.load_metadata(path)["settings"] == dict(
      hyper_params=dict(plan.settings.hyper_params)
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
      plan_lib.build(config)
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
  run_folder.check_same_config(saved, current, "x")
  current["hyper_params"]["value_cost"] = 0.3
  with pytest.raises(
      errors.UsageError, match=r"hyper_params\.value_cost: saved 0\.2, now 0\.3"
  ) as info:
    run_folder.check_same_config(saved, current, "x")
  _one_line(str(info.value))


@pytest.mark.parametrize(
    "rule, entropy_cost, old_tuned",
    [
        (
            "stac",
            0.01,
            ["discount_factor", "td_lambda", "entropy_cost", "value_cost"]
            + ["pg_cost"],
        ),
        # On a bound (PPO's Pendulum preset), "auto" left the entropy out.
        (
            "self_tuning_ppo",
            0.0,
            ["discount_factor", "gae_lambda", "value_cost"],
        ),
    ],
)
def test_a_self_tuning_run_of_0_2_tuned_auto_without_the_step_size(
    rule, entropy_cost, old_tuned
):
  """``tuned="auto"`` saved by 0.2.0 is read as the list it meant then, so
  that a comparison does not take such a run for today's default; today's
  "auto" (with the step size) stays "auto"."""
  saved = registry.default_settings(rule).to_dict()
  saved["hyper_params"] = dict(saved["hyper_params"], entropy_cost=entropy_cost)
  del saved["hyper_params"]["step_size"]  # 0.2.0 had no step size
  assert saved["rule_kwargs"]["tuned"] == "auto"
  old = migrations.upgraded_settings(saved, "x", "0.2.0")
  assert old["rule_kwargs"]["tuned"] == old_tuned
  assert old["hyper_params"]["step_size"] == 1.0
  assert saved["rule_kwargs"]["tuned"] == "auto"  # the input is not changed
  for version in ("0.3.0.dev0", None):
    today = migrations.upgraded_settings(saved, "x", version)
    assert today["rule_kwargs"]["tuned"] == "auto"
  rule_object = registry.get_entry(rule).make(
      hyper_params=old["hyper_params"], **old["rule_kwargs"]
  )
  assert list(rule_object.tuned) == old_tuned


# ------------------------------------------------------- old spellings ----

# Keyword arguments named like loss coefficients (which must be
# hyper-parameters).
COEFFICIENT = re.compile(r"(cost|coeff?|weight)s?$")


def _new_key(moved: migrations.Moved) -> str:
  """The hyper-parameter an old spelling moved to (``K`` of
  ``hyper_params.K``)."""
  assert moved.new.startswith("hyper_params."), moved
  return moved.new.removeprefix("hyper_params.")


def test_every_loss_coefficient_is_a_hyper_parameter():
  for name in registry.rule_names():
    entry = registry.get_entry(name)
    kwargs = overrides.factory_parameters(entry.make)
    assert not [k for k in kwargs if COEFFICIENT.search(k)], name
    # Every old spelling has its hyper-parameter, and is no keyword argument
    # today.
    hyper_params = registry.default_settings(name).hyper_params
    for moved in migrations.moved(name):
      assert _new_key(moved) in hyper_params, (name, moved)
      assert moved.old.split(".")[1] not in kwargs, (name, moved)
  # Every entry of the table is an old spelling of a rule registered today.
  for moved in migrations.MOVED:
    assert any(
        moved in migrations.moved(name) for name in registry.rule_names()
    ), moved
  pg = registry.default_settings("policy_gradient").hyper_params
  assert (pg["entropy_cost"], pg["pg_cost"]) == (0.01, 1.0)  # the old defaults
  assert (
      "entropy_cost"
      not in registry.default_settings("policy_gradient").rule_kwargs
  )
  rows = {s: d for s, d, _ in overrides.rows("policy_gradient")}
  assert rows["hyper_params.entropy_cost"] == "0.01"
  assert "rule_kwargs.entropy_cost" not in rows


def _pg_inputs(t=4, b=3, a=3):
  rng = np.random.default_rng(0)
  agent_out = dict(
      logits=jnp.asarray(rng.normal(size=(t + 1, b, a)), jnp.float32),
      v=jnp.asarray(rng.normal(size=(t + 1, b, 1)), jnp.float32),
  )
  return types.UpdateRuleInputs(
      observations=jnp.zeros((t + 1, b, 1)),
      actions=jnp.asarray(rng.integers(0, a, size=(t + 1, b)), jnp.int32),
      rewards=jnp.asarray(rng.normal(size=(t, b)), jnp.float32),
      is_terminal=jnp.zeros((t, b), bool),
      agent_out=agent_out,
      behaviour_agent_out=agent_out,
  )


def test_policy_gradient_loss_reads_its_coefficients_from_hyper_params():
  inputs = _pg_inputs()
  advs = jnp.asarray(np.random.default_rng(1).normal(size=(4, 3)), jnp.float32)
  meta_out = dict(pi=advs, raw_advs=advs)

  def loss(**hyper_params):
    rule = policy_gradient.PolicyGradient(hyper_params)
    return np.asarray(rule.agent_loss(inputs, meta_out, False)[0])

  logits = inputs.agent_out["logits"][:-1]
  entropy = np.asarray(ops.softmax_entropy(logits))
  pg = loss(entropy_cost=0.0)
  np.testing.assert_allclose(
      loss(entropy_cost=0.5, pg_cost=2.0), 2.0 * pg - 0.5 * entropy, rtol=1e-5
  )


def _old_settings(name, hyper_params, **rule_kwargs):
  """Rule ``name``'s default settings as an earlier version wrote them (their
  JSON form): ``hyper_params`` (without the keys moved since) and old
  ``rule_kwargs``."""
  settings = registry.default_settings(name).to_dict()
  settings["hyper_params"] = hyper_params
  settings["rule_kwargs"] = {**settings["rule_kwargs"], **rule_kwargs}
  return settings


@contextlib.contextmanager
def _no_old_setting_warning():
  """A context in which an ``OldSettingWarning`` is an error."""
  with warnings.catch_warnings():
    warnings.simplefilter("error", migrations.OldSettingWarning)
    yield


def _read_as(old: str, new: str, where: str = "") -> str:
  """The pattern of the warning that ``where`` gives the old key ``old``,
  read as ``new``."""
  return (
      f"{re.escape(where)}.*{re.escape(old)} is read as {re.escape(new)} "
      r"\(moved on .*\); write " + re.escape(new) + " instead"
  )


@pytest.mark.parametrize(
    "name, moved",
    [(n, m) for n in registry.rule_names() for m in migrations.moved(n)],
    ids=lambda x: x if isinstance(x, str) else x.old,
)
def test_each_old_spelling_is_read_as_its_new_key(name, moved):
  """Every entry of the table, for every rule it applies to: the old key is
  read as the new one, with a warning naming both, and builds the rule the
  new key does."""
  path = moved.old.split(".")[1:]  # [keyword] or [keyword, key]
  old = {path[0]: 0.125} if len(path) == 1 else {path[0]: {path[1]: 0.125}}
  with pytest.warns(
      migrations.OldSettingWarning,
      match=_read_as(moved.old, moved.new, "rule file x.npz"),
  ):
    upgraded = migrations.upgraded_settings(
        _old_settings(name, {}, **old), "rule file x.npz"
    )
  assert path[0] not in upgraded["rule_kwargs"]
  settings = agent_settings.AgentSettings.from_dict(upgraded)
  assert settings.hyper_params[_new_key(moved)] == 0.125
  expected = registry.default_settings(name)
  expected = expected.replace(
      hyper_params=dict(expected.hyper_params, **{_new_key(moved): 0.125})
  )
  assert settings == expected
  assert (
      registry.make_rule(settings).hyper_params
      == registry.make_rule(expected).hyper_params
  )
  # The flags' hint names the new key, for the old key and for its dict.
  assert moved.new in migrations.new_key(name, moved.old).split(", ")
  assert moved.new in migrations.new_key(name, f"rule_kwargs.{path[0]}")


def test_old_spellings_build_the_same_rule():
  for name, old, new in (
      (
          "policy_gradient",
          dict(entropy_cost=0.05, pg_cost=2),
          dict(entropy_cost=0.05, pg_cost=2.0),
      ),
      (
          "disco",
          dict(meta_regularizer_costs=dict(prediction_entropy=0.5)),
          dict(prediction_entropy_cost=0.5),
      ),
      (
          "ta_lpg",
          dict(meta_regularizer_costs=dict(policy_l2_coeff=0.02)),
          dict(policy_l2_coeff=0.02),
      ),
  ):
    with pytest.warns(migrations.OldSettingWarning) as record:
      upgraded = migrations.upgraded_settings(
          _old_settings(name, {}, **old), "saved"
      )
    messages = "\n".join(str(w.message) for w in record)
    for key in new:  # one warning per old key, naming the new one
      assert messages.count(f"is read as hyper_params.{key} ") == 1, messages
    rule = registry.make_rule(agent_settings.AgentSettings.from_dict(upgraded))
    expected = registry.default_settings(name)
    expected = expected.replace(hyper_params=dict(expected.hyper_params, **new))
    assert rule.hyper_params == registry.make_rule(expected).hyper_params
    for key, value in new.items():
      assert rule.hyper_params[key] == value, (name, key)
  with pytest.raises(ValueError, match="policy_entropy_coeff") as info:
    migrations.upgraded_settings(
        _old_settings("lpg", {}, meta_regularizer_costs=dict(beta_9=1.0)),
        "saved",
    )
  _one_line(str(info.value))
  assert "beta_9" in str(info.value)


def test_saved_settings_upgrade_to_todays():
  for name in ("policy_gradient", "disco103", "lpg"):
    today = registry.default_settings(name).to_dict()
    moved = [_new_key(m) for m in migrations.moved(name)]
    old = _old_settings(
        name,
        {  # written before the moved keys existed
            k: v for k, v in today["hyper_params"].items() if k not in moved
        },
    )
    if name == "policy_gradient":
      old["rule_kwargs"].update(entropy_cost=0.01, pg_cost=1.0)
      with pytest.warns(migrations.OldSettingWarning):
        upgraded = migrations.upgraded_settings(old, "saved")
    else:  # only keys added since, at their defaults: nothing to warn about
      with _no_old_setting_warning():
        upgraded = migrations.upgraded_settings(old, "saved")
    assert old != today
    assert upgraded == today, name
  unknown = dict(rule="no_such_rule", hyper_params={})
  assert migrations.upgraded_settings(unknown, "saved") == unknown
  with _no_old_setting_warning():  # today's settings are today's
    for name in registry.rule_names():
      today = registry.default_settings(name).to_dict()
      assert migrations.upgraded_settings(today, "saved") == today, name
  assert (
      migrations.new_key("policy_gradient", "rule_kwargs.entropy_cost")
      == "hyper_params.entropy_cost"
  )
  assert migrations.new_key(
      "lpg", "rule_kwargs.meta_regularizer_costs"
  ).startswith("hyper_params.policy_entropy_coeff, ")
  assert migrations.new_key("ppo", "rule_kwargs.entropy_cost") is None
  assert migrations.new_key("no_such_rule", "rule_kwargs.entropy_cost") is None


def test_rule_files_with_old_spellings_load_in_todays(tmp_path):
  tiny_net = dict(hidden_size=8, embedding_sizes=(4, 1), prediction_size=4)
  settings = registry.default_settings("lpg")
  settings = settings.replace(
      rule_kwargs=dict(
          settings.rule_kwargs,
          net=dict(settings.rule_kwargs["net"], **tiny_net),
      )
  )
  meta_params = registry.make_rule(settings).init_meta_params(
      jax.random.PRNGKey(0)
  )
  path = tmp_path / "old_lpg.npz"
  weights_lib.save_meta_params(  # as disco-meta-train exported them
      path,
      meta_params,
      metadata=dict(
          rule="lpg",
          rule_kwargs=dict(
              settings.to_dict()["rule_kwargs"],
              meta_regularizer_costs=dict(policy_l2_coeff=0.02),
          ),
          settings=dict(hyper_params=dict(agent_target_coeff=0.25)),
          meta_step=3,
      ),
  )
  with pytest.warns(
      migrations.OldSettingWarning,
      match=_read_as(
          "rule_kwargs.meta_regularizer_costs.policy_l2_coeff",
          "hyper_params.policy_l2_coeff",
          f"rule file {path}",
      ),
  ):
    resolved = resolve.resolve_rule(str(path))
  assert "meta_regularizer_costs" not in resolved.settings.rule_kwargs
  assert resolved.settings.hyper_params["policy_l2_coeff"] == 0.02
  assert resolved.settings.hyper_params["agent_target_coeff"] == 0.25
  assert resolved.rule.hyper_params["policy_l2_coeff"] == 0.02
  assert resolved.settings.rule_kwargs["net"]["hidden_size"] == 8


def test_configs_with_old_spellings_train_the_same_rule(tmp_path):
  config = test_evaluate_launcher.tiny_config(
      tmp_path, rule="policy_gradient", rule_kwargs=dict(entropy_cost=0.05)
  )
  read_as = _read_as(
      "rule_kwargs.entropy_cost", "hyper_params.entropy_cost", "config"
  )
  with pytest.warns(migrations.OldSettingWarning, match=read_as):
    plan = evaluation.build(config)
  assert plan.rule.rule.hyper_params["entropy_cost"] == 0.05
  assert plan.rule.settings.hyper_params["entropy_cost"] == 0.05
  assert "entropy_cost" not in plan.rule.settings.rule_kwargs
  # From the command line: the config holds every default, which the old
  # spelling replaces; so does it another value beside it (the config was
  # written when only the old key existed).
  config = _parse(evaluate, ["--config.rule=policy_gradient"])
  with config.unlocked():  # as a config file written before would
    config.rule_kwargs.entropy_cost = 0.05
  assert config.hyper_params.entropy_cost == 0.01
  config.update(test_evaluate_launcher.tiny_config(tmp_path).to_dict())
  config.rule = "policy_gradient"
  with pytest.warns(migrations.OldSettingWarning, match=read_as):
    plan = evaluation.build(config)
  assert plan.rule.rule.hyper_params["entropy_cost"] == 0.05
  config.hyper_params.entropy_cost = 0.1
  with pytest.warns(migrations.OldSettingWarning, match=read_as):
    plan = evaluation.build(config)
  assert plan.rule.rule.hyper_params["entropy_cost"] == 0.05
  assert plan.rule.settings.hyper_params["entropy_cost"] == 0.05
  # A meta-training config: Disco's old dict of meta-regulariser costs.
  config = meta_settings.tiny_config()
  config.rule_kwargs = dict(meta_regularizer_costs=dict(prediction_entropy=0.5))
  with pytest.warns(
      migrations.OldSettingWarning,
      match=_read_as(
          "rule_kwargs.meta_regularizer_costs.prediction_entropy",
          "hyper_params.prediction_entropy_cost",
          "config",
      ),
  ):
    agent = meta_settings_lib.as_settings(config).agent
  assert agent.hyper_params["prediction_entropy_cost"] == 0.5
  assert "meta_regularizer_costs" not in agent.rule_kwargs


def test_runs_saved_before_resume_with_the_moved_keys_at_their_defaults():
  """A meta-training run saved before the meta-regularisers were
  hyper-parameters (its config's hyper_params lack them) resumes; an LPG run
  that set them the old way resumes with the same config, or with today's
  spelling of it, but not with another value."""
  current = _parse(meta_train, []).to_dict()
  saved = dict(current, hyper_params=dict(current["hyper_params"]))
  for moved in migrations.moved("disco"):
    del saved["hyper_params"][_new_key(moved)]
  with _no_old_setting_warning():
    run_folder.check_same_config(saved, current, "x")
  current = _parse(meta_train, [], config_name="meta_train_lpg").to_dict()
  current["rule_kwargs"]["meta_regularizer_costs"] = dict(policy_l2_coeff=0.02)
  saved = dict(
      current,
      hyper_params=dict(agent_target_coeff=0.5),
      rule_kwargs=dict(current["rule_kwargs"]),
  )
  old, new = (
      "rule_kwargs.meta_regularizer_costs.policy_l2_coeff",
      "hyper_params.policy_l2_coeff",
  )
  with pytest.warns(
      migrations.OldSettingWarning, match=_read_as(old, new)
  ) as record:
    run_folder.check_same_config(saved, current, "x")
  # Both the saved config ("x") and the current one are read in today's form.
  assert {str(w.message).split(":")[0] for w in record} == {"x", "config"}
  read_as = _read_as(old, new, "x")
  # Today's spelling of the same config.
  del current["rule_kwargs"]["meta_regularizer_costs"]
  current["hyper_params"]["policy_l2_coeff"] = 0.02
  with pytest.warns(migrations.OldSettingWarning, match=read_as):
    run_folder.check_same_config(saved, current, "x")
  current["hyper_params"]["policy_l2_coeff"] = 0.03
  with (
      pytest.warns(migrations.OldSettingWarning, match=read_as),
      pytest.raises(
          errors.UsageError,
          match=r"hyper_params\.policy_l2_coeff: saved 0\.02, now 0\.03",
      ),
  ):
    run_folder.check_same_config(saved, current, "x")


def test_runs_saved_with_renamed_meta_train_keys_resume():
  """A run saved when the meta-loss's entropy bonus was ``entropy_cost`` (and
  with the removed ``debug``) resumes with today's config, warning once;
  another value refuses."""
  current = _parse(meta_train, []).to_dict()
  saved = {k: v for k, v in current.items() if k != "meta_entropy_cost"}
  saved.update(entropy_cost=current["meta_entropy_cost"], debug=False)
  with pytest.warns(
      migrations.OldSettingWarning,
      match=r"x: entropy_cost is read as meta_entropy_cost",
  ):
    run_folder.check_same_config(saved, current, "x")
  saved["entropy_cost"] = 0.5
  with (
      pytest.warns(migrations.OldSettingWarning),
      pytest.raises(errors.UsageError, match="meta_entropy_cost"),
  ):
    run_folder.check_same_config(saved, current, "x")


def test_an_old_spelling_on_the_command_line_names_the_new_key():
  with pytest.raises(errors.UsageError) as info:
    _parse(
        evaluate,
        ["--config.rule=policy_gradient", "--config.rule_kwargs.pg_cost=2"],
    )
  message = str(info.value)
  _one_line(message)
  assert "Did you mean 'config.hyper_params.pg_cost' (it moved there)?" in (
      message
  )
