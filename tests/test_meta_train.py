"""The ``disco-meta-train`` launcher: outputs, checkpoints, export, resume
and bad input (tiny settings throughout; the population itself is tested in
``test_population.py``).

The expensive piece is shared: one in-process launcher run (4 meta-steps,
checkpoints at 2 and 4) serves the output, checkpoint, export and resume
tests.
"""

from __future__ import annotations

import json
import shutil

from absl import flags
import jax
import numpy as np
import pytest

from disco import checks
from disco import errors
from disco import files
from disco import weights as weights_lib
from disco.launch import common
from disco.meta import checkpoints as ckpt_lib
from disco.meta import history as history_lib
from disco.meta import plan as plan_lib
from disco.meta import rule_files
from disco.meta import run_folder
from disco.meta import settings as settings_lib
from disco.meta import trainer as mt
from disco.update_rules import resolve

from meta_settings import TINY
from meta_settings import TINY_FLAGS
from meta_settings import TINY_LPG
from meta_settings import run_launcher
from meta_settings import tiny_config


def tree_equal(a, b) -> bool:
  la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
  return jax.tree.structure(a) == jax.tree.structure(b) and all(
      np.array_equal(np.asarray(x), np.asarray(y))
      for x, y in zip(la, lb, strict=True)
  )


# ------------------------------------------------ the shared tiny run ----


@pytest.fixture(scope="module")
def straight_run(tmp_path_factory):
  """An uninterrupted 4-step run with checkpoints at steps 2 and 4."""
  out = tmp_path_factory.mktemp("meta") / "straight"
  config = tiny_config(
      num_meta_steps=4,
      checkpoint_every=2,
      keep_checkpoints=3,
      output_dir=str(out),
  )
  lines = []
  summary = mt.train(config, log=lines.append, progress=False)
  return dict(out=out, config=config, summary=summary, lines=lines)


def test_launcher_writes_outputs(straight_run):
  out = straight_run["out"]
  for name in (
      run_folder.CONFIG_FILE,
      run_folder.METRICS_FILE,
      mt.REWARDS_PLOT,
      mt.LOSS_PLOT,
      run_folder.META_PARAMS_FILE,
      run_folder.SUMMARY_FILE,
  ):
    assert (out / name).is_file(), name
  for name in (mt.REWARDS_PLOT, mt.LOSS_PLOT):
    assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  history = history_lib.MetricsHistory.read_csv(out / run_folder.METRICS_FILE)
  assert list(history.steps) == [1, 2, 3, 4]
  for column in (
      "meta_loss",
      "pg_loss",
      "reg_loss",
      "meta_grad_norm",
      "meta_update_norm",
      "rewards",
      "pos_reward_frac",
      "neg_reward_frac",
      "catch-5x5/rewards",
      "catch-5x5/pos_reward_frac",
      "catch-5x5/inner/total_loss",
  ):
    assert column in history.columns, column
    assert np.all(np.isfinite(history.column(column))), column
  frac = history.column("pos_reward_frac") + history.column("neg_reward_frac")
  assert np.all((frac >= 0) & (frac <= 1))
  # Reward per step = (positive - negative) fraction for Catch (+-1 rewards).
  np.testing.assert_allclose(
      history.column("rewards"),
      history.column("pos_reward_frac") - history.column("neg_reward_frac"),
      atol=1e-6,
  )
  assert ckpt_lib.CheckpointManager(
      out / run_folder.CHECKPOINT_DIR
  ).all_steps() == [
      2,
      4,
  ]
  summary = json.loads((out / run_folder.SUMMARY_FILE).read_text())
  assert summary["meta_steps"] == 4 and summary["final"]["meta_step"] == 4
  assert any(
      "disco-eval --config.rule=" in line for line in straight_run["lines"]
  )


def test_export_round_trip(straight_run, tmp_path):
  """The exported file resolves like ``disco-eval --config.rule=PATH`` does
  and matches the structure of the rule's ``init_params``."""
  path = straight_run["out"] / run_folder.META_PARAMS_FILE
  metadata = weights_lib.load_metadata(path)
  assert metadata["rule"] == "disco" and metadata["meta_step"] == 4
  assert metadata["rule_kwargs"] == dict(
      max_abs_value=300.0,
      num_bins=601,
      moving_average_decay=0.99,
      moving_average_eps=1e-6,
      default_lifetime=250,
      action_model=True,
  )
  resolved = resolve.resolve_rule(str(path))
  settings, params = resolved.settings, resolved.meta_params
  assert settings.rule == "disco" and resolved.source == "file"
  plan = plan_lib.build(tiny_config(output_dir=str(tmp_path / "x")))
  expected = jax.eval_shape(plan.rule.init_meta_params, jax.random.PRNGKey(0))
  weights_lib.check_params_match(params, expected)
  # Export -> load is exact.
  again = rule_files.export_meta_params(
      tmp_path / "again.npz", params, settings, meta_step=7, note="x"
  )
  loaded = weights_lib.load_meta_params(again, expected)
  assert tree_equal(loaded, params)
  assert weights_lib.load_metadata(again)["meta_step"] == 7
  # ... and fits the launcher's own init_meta_params path.
  reloaded = rule_files.load_initial_meta_params(str(again), plan.rule, 1)
  assert tree_equal(reloaded, params)


def test_fine_tuning_starts_from_exactly_disco103(
    disco103_path, tmp_path, monkeypatch
):
  """``init_meta_params='disco103'``: the first meta-step's meta-parameters
  (and the meta-optimiser's view of them) are the published weights, bit for
  bit; with the agents' replay (how Disco103's agents learn), every agent
  starts with an empty one (the replay's mechanics: test_population.py)."""
  monkeypatch.setenv("DISCO_WEIGHTS", str(disco103_path))
  plan = plan_lib.build(
      tiny_config(
          init_meta_params="disco103",
          replay_capacity=8,
          replay_batch_size=4,
          output_dir=str(tmp_path / "o"),
      )
  )
  published = weights_lib.load_disco103(disco103_path)
  assert tree_equal(plan.meta_params, published)
  state = plan_lib.initial_state(plan)
  assert int(state.step) == 0
  assert tree_equal(jax.device_get(state.meta_params), published)
  (agents,) = state.agents
  assert [int(x) for x in agents.replay.size] == [0, 0]
  assert agents.replay.items.observations.shape[:2] == (2, 8)  # [agents, 8]


def test_checkpoint_restores_onto_shardings(straight_run, tmp_path):
  out = straight_run["out"]
  plan = plan_lib.build(tiny_config(output_dir=str(tmp_path / "x")))
  template = plan_lib.abstract_state(plan.population, plan.rule)
  restored = ckpt_lib.restore_latest(out / run_folder.CHECKPOINT_DIR, template)
  assert restored.step == 4 and int(restored.state.step) == 4
  assert [r["meta_step"] for r in restored.history] == [1, 2, 3, 4]
  assert restored.config["num_meta_steps"] == 4
  for leaf, ref in zip(
      jax.tree.leaves(restored.state), jax.tree.leaves(template), strict=True
  ):
    assert leaf.sharding == ref.sharding
  exported = weights_lib.load_meta_params(out / run_folder.META_PARAMS_FILE)
  assert tree_equal(jax.device_get(restored.state.meta_params), exported)
  # Saving and restoring again is exact, RNG keys and env states included.
  path = ckpt_lib.save_checkpoint(
      tmp_path / "ckpt", restored.state, history=restored.history
  )
  assert path.name == "4"
  again = ckpt_lib.restore_latest(tmp_path / "ckpt", template)
  assert tree_equal(again.state, restored.state)
  assert again.history == restored.history


def test_incompatible_checkpoint_is_refused(straight_run, tmp_path):
  directory = straight_run["out"] / run_folder.CHECKPOINT_DIR
  for overrides, where in (
      (
          dict(
              population=(
                  dict(
                      env="catch",
                      env_settings=dict(rows=5, columns=5),
                      num_agents=4,
                  ),
              )
          ),
          "agents",
      ),
      (
          dict(
              agent=dict(
                  network=dict(
                      dense=(32,), model_lstm_size=8, model_head_hiddens=(8,)
                  )
              )
          ),
          "linear",
      ),
  ):
    config = tiny_config(output_dir=str(tmp_path / "x"))
    config.update(overrides)
    plan = plan_lib.build(config)
    template = plan_lib.abstract_state(plan.population, plan.rule)
    with pytest.raises(ckpt_lib.CheckpointError) as e:
      ckpt_lib.restore_latest(directory, template)
    message = str(e.value)
    assert "does not fit" in message and where in message
    assert "start a new output folder" in message
  # Nothing was changed or deleted.
  assert ckpt_lib.CheckpointManager(directory).all_steps() == [2, 4]


def test_corrupt_checkpoint_is_refused(straight_run, tmp_path):
  directory = tmp_path / "ckpt"
  shutil.copytree(straight_run["out"] / run_folder.CHECKPOINT_DIR, directory)
  for f in (directory / "4" / "state").rglob("*"):
    if f.is_file() and f.parent.name == "d":
      f.write_bytes(b"garbage")
  plan = plan_lib.build(tiny_config(output_dir=str(tmp_path / "x")))
  template = plan_lib.abstract_state(plan.population, plan.rule)
  with pytest.raises(ckpt_lib.CheckpointError, match="corrupt or unreadable"):
    ckpt_lib.restore_latest(directory, template)
  assert (directory / "4").is_dir()  # not deleted or overwritten


@pytest.mark.slow
def test_resume_is_bit_exact_in_a_fresh_process(straight_run, tmp_path):
  """Kill after step 2 (the step-4 checkpoint and outputs never written, but
  the CSV has rows 3 and 4), resume in a new process, run to step 4: same
  metrics and state as the uninterrupted run. (CI resumes in fresh processes
  in test_distributed.py, on the LPG rule, whose meta-step traces in a third
  of Disco's time.)"""
  src, out = straight_run["out"], tmp_path / "resumed"
  out.mkdir()
  shutil.copy(src / run_folder.CONFIG_FILE, out / run_folder.CONFIG_FILE)
  shutil.copy(src / run_folder.METRICS_FILE, out / run_folder.METRICS_FILE)
  (out / run_folder.CHECKPOINT_DIR).mkdir()
  shutil.copytree(
      src / run_folder.CHECKPOINT_DIR / "2",
      out / run_folder.CHECKPOINT_DIR / "2",
  )

  args = [
      *TINY_FLAGS,
      "--config.num_meta_steps=4",
      "--config.checkpoint_every=2",
      f"--config.output_dir={out}",
      "--config.resume=True",
  ]
  result = run_launcher(args, cwd=tmp_path)
  assert result.returncode == 0, result.stderr[-3000:]
  assert "Resuming from" in result.stdout

  assert (out / run_folder.METRICS_FILE).read_text() == (
      src / run_folder.METRICS_FILE
  ).read_text()
  assert tree_equal(
      weights_lib.load_meta_params(out / run_folder.META_PARAMS_FILE),
      weights_lib.load_meta_params(src / run_folder.META_PARAMS_FILE),
  )
  plan = plan_lib.build(tiny_config(output_dir=str(tmp_path / "x")))
  template = plan_lib.abstract_state(plan.population, plan.rule)
  a = ckpt_lib.restore_latest(out / run_folder.CHECKPOINT_DIR, template)
  b = ckpt_lib.restore_latest(src / run_folder.CHECKPOINT_DIR, template)
  assert a.step == b.step == 4
  assert tree_equal(a.state, b.state)  # agents, env states, RNG keys, ...
  assert a.history == b.history


def test_resume_rules(straight_run, tmp_path):
  out = tmp_path / "run"
  shutil.copytree(straight_run["out"], out)
  # A finished run resumes to nothing more (no meta-step is compiled).
  summary = mt.train(
      tiny_config(
          num_meta_steps=4, output_dir=str(out), resume=True, checkpoint_every=2
      ),
      log=lambda _: None,
      progress=False,
  )
  assert summary["meta_steps"] == 4 and summary["steps_this_run"] == 0
  # Another config is refused, naming the difference.
  with pytest.raises(errors.UsageError, match=r"seed: saved 4, now 5"):
    mt.train(
        tiny_config(num_meta_steps=8, output_dir=str(out), resume=True, seed=5),
        log=lambda _: None,
        progress=False,
    )
  # Without resume, the folder is not overwritten.
  with pytest.raises(errors.UsageError, match="already holds"):
    mt.train(tiny_config(output_dir=str(out)), progress=False)
  # A checkpoint beyond the run's length.
  with pytest.raises(errors.UsageError, match="beyond num_meta_steps=3"):
    mt.train(
        tiny_config(
            num_meta_steps=3,
            output_dir=str(out),
            resume=True,
            checkpoint_every=2,
        ),
        log=lambda _: None,
        progress=False,
    )


def test_resume_reads_the_config_of_the_checkpoint_when_config_json_is_damaged(
    straight_run, tmp_path
):
  out = tmp_path / "run"
  shutil.copytree(straight_run["out"], out)
  config_file = out / run_folder.CONFIG_FILE
  config_file.write_bytes(config_file.read_bytes()[:100])  # a full disk's
  lines = []
  summary = mt.train(
      tiny_config(
          num_meta_steps=4, output_dir=str(out), resume=True, checkpoint_every=2
      ),
      log=lines.append,
      progress=False,
  )
  assert summary["meta_steps"] == 4
  said = [line for line in lines if "config saved in checkpoint" in line]
  assert len(said) == 1 and said[0].startswith(f"{config_file} is unreadable")
  assert json.loads(config_file.read_text())["config"]["num_meta_steps"] == 4
  # The checkpoint's config still guards the resume.
  config_file.write_text("{")
  with pytest.raises(errors.UsageError, match=r"seed: saved 4, now 5"):
    mt.train(
        tiny_config(num_meta_steps=8, output_dir=str(out), resume=True, seed=5),
        log=lambda _: None,
        progress=False,
    )


# -------------------------------------------------------- bad input ----


def _train_from_argv(args, tmp_path):
  fv = flags.FlagValues()
  common.parse_config_flags(
      ["disco-meta-train", *args],
      checks.config_path(settings_lib.CONFIG_NAME),
      "help",
      fv,
  )
  return mt.train(fv.config, log=lambda _: None, progress=False)


@pytest.mark.parametrize(
    "args, match",
    [
        (["--config.nope=1"], "Unknown config key 'config.nope'"),
        (["--config.agent.foo=1"], "Valid keys of config.agent"),
        (
            ["--config.population=({'env': 'pong', 'num_agents': 2},)"],
            "Unknown environment 'pong'",
        ),
        (
            ["--config.population=({'env': 'catch_dm_env', 'num_agents': 2},)"],
            "needs a jittable env",
        ),
        (["--config.num_devices=64"], "only"),
        (["--config.batch_size=0"], "batch_size must be >= 1"),
        (["--config.init_meta_params=missing.npz"], "does not exist"),
        (["--config.meta_optimizer=lamb"], "Unknown meta_optimizer"),
        (
            ["--config.agent.network.compute_dtype=float16"],
            "Bad agent settings: .*compute_dtype 'float16'",
        ),
        (
            ["--config.key_scheme=numpy"],
            "config.key_scheme: Unknown key_scheme",
        ),
        (
            ["--config.output_dir=", "--config.resume=True"],
            "needs the output_dir",
        ),
    ],
)
def test_bad_input_in_process(args, match, tmp_path):
  with pytest.raises(errors.UsageError, match=match):
    _train_from_argv(
        [*TINY_FLAGS, f"--config.output_dir={tmp_path / 'o'}", *args], tmp_path
    )
  assert not (tmp_path / "o").exists()


def test_every_bad_setting_is_reported_at_once(tmp_path):
  """One pass over the config names every problem in one line, in the
  config's order, before anything is built."""
  config = tiny_config(output_dir=str(tmp_path / "o"))
  config.update(
      batch_size=0,
      meta_optimizer="lamb",
      log_every=-1,
      key_scheme="numpy",
      tracking="nope",
  )
  with pytest.raises(errors.UsageError) as info:
    settings_lib.MetaTrainSettings.from_config(config)
  message = str(info.value)
  assert "\n" not in message
  assert message.startswith("5 problems: (1) config.log_every must be >= 1")
  for part in (
      "(2) config.batch_size must be >= 1",
      "(3) config.key_scheme: Unknown key_scheme",
      "(4) Unknown meta_optimizer 'lamb'",
      "(5) config.tracking:",
  ):
    assert part in message, message
  assert not (tmp_path / "o").exists()
  # Settings made once are what the builders take: nothing re-checks them.
  settings = settings_lib.MetaTrainSettings.from_config(tiny_config())
  assert settings.batch_size == TINY["batch_size"]
  assert settings.population.rollout_len == config.rollout_len


def test_mismatched_weights_file(tmp_path):
  path = weights_lib.save_meta_params(
      tmp_path / "other.npz",
      {"lstm/linear": {"w": np.zeros((2, 2))}},
      metadata={"rule": "disco"},
  )
  with pytest.raises(errors.UsageError, match="missing key"):
    _train_from_argv(
        [
            *TINY_FLAGS,
            f"--config.init_meta_params={path}",
            f"--config.output_dir={tmp_path / 'o'}",
        ],
        tmp_path,
    )


def test_config_json_records_the_initial_meta_parameters_by_digest(tmp_path):
  plan = plan_lib.build(tiny_config(output_dir=str(tmp_path / "a"), **TINY_LPG))
  path = weights_lib.save_meta_params(
      tmp_path / "init.npz",
      plan.meta_params,
      metadata=dict(rule="lpg", rule_kwargs=TINY_LPG["rule_kwargs"]),
  )
  plan = plan_lib.build(
      tiny_config(
          output_dir=str(tmp_path / "b"), init_meta_params=str(path), **TINY_LPG
      )
  )
  plan_lib.write_config(plan)
  record = json.loads((tmp_path / "b" / "config.json").read_text())["run"]
  assert record["input_files"] == {
      "init_meta_params": dict(path=str(path), sha256=files.file_digest(path))
  }


def test_bad_input_exit_code_and_one_line(straight_run, tmp_path):
  for args, match in (
      (["--config.nope=1"], "Unknown config key"),
      ([f"--config.output_dir={straight_run['out']}"], "already holds"),
  ):
    result = run_launcher([*TINY_FLAGS, *args], cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, lines
    assert lines[0].startswith("disco-meta-train: error: ")
    assert match in lines[0]


def test_group_names_must_be_unique(tmp_path):
  plan = plan_lib.build(tiny_config(output_dir=str(tmp_path / "x")))
  group = plan.groups[0]
  with pytest.raises(ValueError, match="names must be unique"):
    type(plan.population)(
        [group, group], plan.population.config, plan.population.meta_optimizer
    )


def test_plot_draws_every_group_including_names_with_slashes():
  rows = [
      {
          "meta_step": step,
          "rewards": 0.1,
          "pos_reward_frac": 0.2,
          "neg_reward_frac": 0.1,
          "meta_loss": 0.0,
          "pg_loss": 0.0,
          **{
              f"{g}/{k}": 0.0
              for g in ("catch-5x5", "gymnax/CartPole-v1")
              for k in ("rewards", "pos_reward_frac", "neg_reward_frac")
          },
          "catch-5x5/inner/rewards": 0.0,
      }
      for step in (1, 2)
  ]
  rewards_fig, _ = history_lib.MetricsHistory(rows).plot()
  labels = {line.get_label() for line in rewards_fig.axes[0].get_lines()}
  assert labels == {"population", "catch-5x5", "gymnax/CartPole-v1"}


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(replay_capacity=1), "cannot hold one meta-step's rollouts"),
        (dict(replay_batch_size=4), "without a replay"),
        (
            dict(replay_capacity=8, estimator="es"),
            "the agents' replay is the backprop estimator's",
        ),
        (dict(replay_capacity=-1), "replay_capacity must be >= 0"),
    ],
)
def test_bad_replay_settings_are_one_line(overrides, message, tmp_path):
  with pytest.raises(errors.UsageError, match=message) as e:
    plan_lib.build(tiny_config(output_dir=str(tmp_path / "x"), **overrides))
  assert "\n" not in str(e.value)
