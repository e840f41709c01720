"""Presets: settings per rule and environment, applied to the keys a run
leaves unset (disco/update_rules/presets.py)."""

from __future__ import annotations

import json
import subprocess
import sys

from absl import flags
import pytest

from disco import checks
from disco import comparison
from disco import evaluation
from disco.comparison import settings as compare_settings
from disco.launch import common
from disco.launch import evaluate
from disco.update_rules import presets
from disco.update_rules import registry

import conftest
from meta_settings import subprocess_env

PENDULUM = "gymnax/Pendulum-v1"


def _parse(argv):
  fv = flags.FlagValues()
  common.parse_config_flags(
      ["disco-eval", *argv],
      checks.config_path(evaluation.CONFIG_NAME),
      "help",
      flag_values=fv,
      prepare=evaluate.prepare_config,
  )
  return fv.config


def _plan(argv, tmp_path):
  return evaluation.build(
      _parse([*argv, f"--config.output_dir={tmp_path / 'run'}"]),
      log=lambda _: None,
  )


def test_every_packaged_preset_loads_and_fits_its_rule():
  assert presets.check_all() >= 10
  for rule in ("ppo", "actor_critic", "mpo", "spo", "disco103"):
    assert presets.presets(rule), rule
    for preset in presets.presets(rule):
      assert preset.source.strip() and preset.envs


def test_find_picks_the_first_match_a_name_or_none():
  assert presets.find("ppo", PENDULUM).name == "pendulum"
  assert presets.find("ppo", "brax/hopper").name == "brax"
  assert presets.find("ppo", "catch") is None
  assert presets.find("ppo", PENDULUM, "none") is None
  assert presets.find("ppo", PENDULUM, "pendulum").name == "pendulum"
  assert presets.find("/some/rule.npz", PENDULUM) is None
  with pytest.raises(
      presets.PresetError, match="its presets: atari, lpg-dense"
  ):
    presets.find("ppo", PENDULUM, "pendulun")
  with pytest.raises(presets.PresetError, match="not 'catch'"):
    presets.find("ppo", "catch", "pendulum")


def test_a_preset_fills_unset_keys_and_flags_win(tmp_path):
  plan = _plan(["--config.rule=ppo", f"--config.env={PENDULUM}"], tmp_path)
  assert plan.preset.name == "pendulum"
  hyper = plan.rule.settings.hyper_params
  assert (hyper["discount_factor"], hyper["entropy_cost"]) == (0.9, 0.0)
  assert plan.loop_config.normalize_rewards
  assert plan.rule.settings.learning_rate == 1e-3
  assert (plan.loop_config.num_envs, plan.loop_config.rollout_len) == (16, 256)
  # A flag wins, even one that gives the registered default (0.99).
  plan = _plan(
      [
          "--config.rule=ppo",
          f"--config.env={PENDULUM}",
          "--config.hyper_params.discount_factor=0.99",
          "--config.num_envs=8",
          "--config.batch_size=8",
          "--config.learning_rate=0.002",
      ],
      tmp_path,
  )
  hyper = plan.rule.settings.hyper_params
  assert (hyper["discount_factor"], hyper["entropy_cost"]) == (0.99, 0.0)
  assert plan.rule.settings.learning_rate == 0.002
  assert (plan.loop_config.num_envs, plan.loop_config.rollout_len) == (8, 256)


def test_preset_none_keeps_the_registered_settings(tmp_path):
  plan = _plan(
      ["--config.rule=ppo", f"--config.env={PENDULUM}", "--config.preset=none"],
      tmp_path,
  )
  assert plan.preset is None
  assert plan.rule.settings == registry.default_settings("ppo")
  assert plan.loop_config.num_envs == registry.get_entry("ppo").loop["num_envs"]


def test_the_python_api_applies_presets_as_the_launcher_does(tmp_path):
  config = evaluation.make_config(
      rule="ppo",
      env=PENDULUM,
      hyper_params={"discount_factor": 0.99},
      output_dir=str(tmp_path / "run"),
  )
  plan = evaluation.build(config, log=lambda _: None)
  hyper = plan.rule.settings.hyper_params
  assert (hyper["discount_factor"], hyper["entropy_cost"]) == (0.99, 0.0)
  config = evaluation.make_config(
      rule="ppo", env=PENDULUM, preset="none", output_dir=str(tmp_path / "run")
  )
  plan = evaluation.build(config, log=lambda _: None)
  assert plan.rule.settings == registry.default_settings("ppo")


def test_config_json_records_the_preset(tmp_path):
  plan = _plan(["--config.rule=ppo", f"--config.env={PENDULUM}"], tmp_path)
  evaluation.write_config(plan)
  saved = json.loads((plan.output_dir / "config.json").read_text())
  assert saved["preset"]["name"] == "pendulum"
  assert saved["preset"]["budget"] == 500_000
  assert saved["config"]["preset"] == "auto"
  assert saved["config"]["num_envs"] == 16
  plan = _plan(["--config.rule=ppo", "--config.env=catch"], tmp_path)
  evaluation.write_config(plan)
  saved = json.loads((plan.output_dir / "config.json").read_text())
  assert saved["preset"] is None


def test_a_registered_preset_comes_first_and_is_removed(tmp_path):
  preset = presets.Preset(
      name="mine",
      rule="ppo",
      envs=("catch",),
      settings={
          "hyper_params": {"entropy_cost": 0.3},
          "rollout_len": 16,
          "anneal_learning_rate": False,
      },
      source="a test",
  )
  presets.register_preset(preset)
  try:
    with pytest.raises(ValueError, match="already has a preset"):
      presets.register_preset(preset)
    plan = _plan(["--config.rule=ppo", "--config.env=catch"], tmp_path)
    assert plan.rule.settings.hyper_params["entropy_cost"] == 0.3
    assert plan.loop_config.rollout_len == 16
    assert not plan.rule.settings.anneal_learning_rate
    flag = "--config.anneal_learning_rate=True"
    plan = _plan(["--config.rule=ppo", "--config.env=catch", flag], tmp_path)
    assert plan.rule.settings.anneal_learning_rate
  finally:
    presets.unregister_preset("ppo", "mine")
  assert presets.find("ppo", "catch") is None


@pytest.mark.parametrize(
    "data, match",
    [
        ("[1, 2]", "a 'presets' list"),
        ("{not json", "must be JSON"),
        (
            '{"presets": [{"name": "x", "envs": ["catch"], "settings": {}}]}',
            "missing \\['source', 'budget'\\]",
        ),
        (
            '{"presets": [{"name": "x", "envs": ["catch"], "source": "s",'
            ' "budget": null, "settings": {"num_env": 4}}]}',
            "unknown setting\\(s\\) \\['num_env'\\]",
        ),
        (
            '{"presets": [{"name": "x", "envs": [], "source": "s",'
            ' "budget": null, "settings": {}}]}',
            "'envs' must be a non-empty list",
        ),
    ],
)
def test_a_malformed_preset_file_is_one_line(data, match, tmp_path):
  path = tmp_path / "ppo.json"
  path.write_text(data)
  with pytest.raises(presets.PresetError, match=match) as e:
    presets.load_file("ppo", path)
  assert str(path) in str(e.value) and "\n" not in str(e.value)


def test_a_preset_setting_its_rule_lacks_is_named():
  preset = presets.Preset(
      name="bad",
      rule="ppo",
      envs=("catch",),
      settings={"hyper_params": {"entropy": 0.3}},
      source="a test",
  )
  with pytest.raises(presets.PresetError, match="Preset 'bad' of rule 'ppo'"):
    presets.checked(preset)


def test_an_unknown_preset_exits_2_with_one_line(tmp_path):
  result = subprocess.run(
      [
          sys.executable,
          "-m",
          "disco.launch.evaluate",
          "--config.rule=ppo",
          f"--config.env={PENDULUM}",
          "--config.preset=fast",
          f"--config.output_dir={tmp_path / 'run'}",
      ],
      capture_output=True,
      text=True,
      env=subprocess_env(),
      cwd=conftest.REPO_DIR,
      timeout=600,
  )
  assert result.returncode == 2, result.stderr
  lines = [line for line in result.stderr.splitlines() if line.strip()]
  assert len(lines) == 1 and "Unknown preset 'fast'" in lines[0], lines
  assert not (tmp_path / "run").exists()


def test_compare_runs_get_their_environments_presets(tmp_path):
  config = compare_settings.make_config(
      rules=("ppo", "actor_critic"),
      envs=(PENDULUM, "catch"),
      hyper_params={"ppo": {"entropy_cost": 0.02}},
      output_dir=str(tmp_path),
  )
  assert config.hyper_params.ppo.discount_factor is None  # unset
  plan = comparison.build(config)
  built = {
      c.env: evaluation.build(c.eval_config(plan.settings), log=lambda _: None)
      for c in plan.cells
      if c.rule == "ppo"
  }
  pendulum, catch = built[PENDULUM], built["catch"]
  assert pendulum.preset.name == "pendulum"
  assert pendulum.rule.settings.hyper_params["discount_factor"] == 0.9
  assert pendulum.rule.settings.hyper_params["entropy_cost"] == 0.02
  assert catch.preset is None
  assert catch.rule.settings.hyper_params["entropy_cost"] == 0.02


def test_a_self_tuning_rule_gets_its_base_rules_presets(tmp_path):
  stac = presets.presets("stac")
  assert [p.name for p in stac] == [
      p.name for p in presets.presets("actor_critic")
  ]
  assert {p.rule for p in stac} == {"stac"}
  assert presets.find("self_tuning_ppo", PENDULUM).name == "pendulum"
  path = tmp_path / "mine.json"
  path.write_text('{"same_as": "no_such_rule"}')
  with pytest.raises(presets.PresetError, match="'same_as' must name"):
    presets.load_file("mine", path)


def test_a_preset_may_turn_normalisation_on_and_a_flag_off(tmp_path):
  assert presets.NORMALIZATION_KEYS == (
      *evaluation.settings.NORMALIZE_KEYS,
      evaluation.settings.NORMALIZE_DISCOUNT_KEY,
      evaluation.settings.REWARD_CLIP_KEY,
  )
  preset = presets.Preset(
      name="normalised",
      rule="ppo",
      envs=("catch",),
      settings={"normalize_rewards": True, "normalize_rewards_discount": 0.9},
      source="a test",
  )
  presets.register_preset(preset)
  try:
    loop = _plan(["--config.rule=ppo", "--config.env=catch"], tmp_path).loop
    assert loop.config.normalize_rewards
    assert loop.config.normalize_rewards_discount == 0.9
    assert not loop.config.normalize_observations
    loop = _plan(
        [
            "--config.rule=ppo",
            "--config.env=catch",
            "--config.normalize_rewards=False",
        ],
        tmp_path,
    ).loop
    assert not loop.config.normalize_rewards
  finally:
    presets.unregister_preset("ppo", "normalised")


def test_a_network_key_given_keeps_the_presets_network_out(tmp_path):
  minigrid = ["--config.rule=ppo", "--config.env=xminigrid/MiniGrid-Empty-8x8"]
  plan = _plan(minigrid, tmp_path)
  assert plan.rule.settings.network["conv_channels"] == (16,)
  # The embedding brings its own encoder: the preset's torso stays out.
  plan = _plan([*minigrid, "--config.network.obs_embedding=minigrid"], tmp_path)
  assert plan.rule.settings.network["obs_embedding"] == "minigrid"
  assert plan.rule.settings.network["conv_channels"] == ()
