"""Meta-training: population sharding, mixed groups, lifetimes, checkpoints,
export and the ``disco-meta-train`` launcher (tiny settings throughout).

The expensive pieces are shared: one in-process launcher run (4 meta-steps,
checkpoints at 2 and 4) serves the output, checkpoint, export and resume
tests; one subprocess with two forced host devices checks the sharded
population, a mixed population and agent lifetimes together.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from absl import flags
import jax
import numpy as np
import pytest

from disco import weights as weights_lib
from disco.launch import common
from disco.launch import meta_train as mt
from disco.meta import checkpoints as ckpt_lib
from disco.meta import history as history_lib

REPO_DIR = Path(__file__).resolve().parents[1]

TINY = dict(
    batch_size=2, rollout_len=3, inner_steps=1,
    agent=dict(network=dict(dense=(16,), model_lstm_size=8,
                            model_head_hiddens=(8,))),
    value_fn=dict(dense=(8, 8)))
TINY_FLAGS = [
    "--config.batch_size=2", "--config.rollout_len=3",
    "--config.inner_steps=1", "--config.agent.network.dense=(16,)",
    "--config.agent.network.model_lstm_size=8",
    "--config.agent.network.model_head_hiddens=(8,)",
    "--config.value_fn.dense=(8,8)"]


def tiny_config(**overrides):
  config = mt.default_config()
  config.batch_size = TINY["batch_size"]
  config.rollout_len = TINY["rollout_len"]
  config.inner_steps = TINY["inner_steps"]
  config.agent.network.update(TINY["agent"]["network"])
  config.value_fn.dense = TINY["value_fn"]["dense"]
  config.update(overrides)
  return config


def subprocess_env(**extra) -> dict[str, str]:
  env = dict(os.environ)
  env.setdefault("JAX_COMPILATION_CACHE_DIR",
                 str(jax.config.jax_compilation_cache_dir
                     or REPO_DIR / ".jax_cache"))
  env["JAX_PLATFORMS"] = "cpu"
  env.update(extra)
  return env


def run_launcher(args, cwd, timeout=600):
  return subprocess.run(
      [sys.executable, "-m", "disco.launch.meta_train", *args],
      cwd=cwd, env=subprocess_env(), capture_output=True, text=True,
      timeout=timeout)


def tree_equal(a, b) -> bool:
  la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
  return (jax.tree.structure(a) == jax.tree.structure(b) and
          all(np.array_equal(np.asarray(x), np.asarray(y))
              for x, y in zip(la, lb)))


# ------------------------------------------------ the shared tiny run ----


@pytest.fixture(scope="module")
def straight_run(tmp_path_factory):
  """An uninterrupted 4-step run with checkpoints at steps 2 and 4."""
  out = tmp_path_factory.mktemp("meta") / "straight"
  config = tiny_config(num_meta_steps=4, checkpoint_every=2,
                       keep_checkpoints=3, output_dir=str(out))
  lines = []
  summary = mt.train(config, log=lines.append, progress=False)
  return dict(out=out, config=config, summary=summary, lines=lines)


def test_launcher_writes_outputs(straight_run):
  out = straight_run["out"]
  for name in (mt.CONFIG_FILE, mt.METRICS_FILE, mt.REWARDS_PLOT,
               mt.LOSS_PLOT, mt.META_PARAMS_FILE, mt.SUMMARY_FILE):
    assert (out / name).is_file(), name
  for name in (mt.REWARDS_PLOT, mt.LOSS_PLOT):
    assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  history = history_lib.MetricsHistory.read_csv(out / mt.METRICS_FILE)
  assert list(history.steps) == [1, 2, 3, 4]
  for column in ("meta_loss", "pg_loss", "reg_loss", "meta_grad_norm",
                 "meta_update_norm", "rewards", "pos_reward_frac",
                 "neg_reward_frac", "catch-5x5/rewards",
                 "catch-5x5/pos_reward_frac", "catch-5x5/inner/total_loss"):
    assert column in history.columns, column
    assert np.all(np.isfinite(history.column(column))), column
  frac = history.column("pos_reward_frac") + history.column("neg_reward_frac")
  assert np.all((frac >= 0) & (frac <= 1))
  # Reward per step = (positive - negative) fraction for Catch (+-1 rewards).
  np.testing.assert_allclose(
      history.column("rewards"),
      history.column("pos_reward_frac") - history.column("neg_reward_frac"),
      atol=1e-6)
  assert ckpt_lib.CheckpointManager(out / mt.CHECKPOINT_DIR).all_steps() == [
      2, 4]
  summary = json.loads((out / mt.SUMMARY_FILE).read_text())
  assert summary["meta_steps"] == 4 and summary["final"]["meta_step"] == 4
  assert any("disco-eval --config.rule=" in line
             for line in straight_run["lines"])


def test_export_round_trip(straight_run, tmp_path):
  """The exported file resolves like ``disco-eval --config.rule=PATH`` does
  and matches the structure of the rule's ``init_params``."""
  path = straight_run["out"] / mt.META_PARAMS_FILE
  metadata = weights_lib.load_metadata(path)
  assert metadata["rule"] == "disco" and metadata["meta_step"] == 4
  assert metadata["rule_kwargs"] == dict(
      value_discount=0.997, max_abs_value=300.0, num_bins=601)
  settings, params = common.resolve_rule(str(path))
  assert settings.rule == "disco"
  plan = mt.build(tiny_config(output_dir=str(tmp_path / "x")))
  expected = jax.eval_shape(plan.rule.init_params, jax.random.PRNGKey(0))
  weights_lib.check_params_match(params, expected)
  # Export -> load is exact.
  again = mt.export_meta_params(tmp_path / "again.npz", params, settings,
                                meta_step=7, note="x")
  loaded = weights_lib.load_meta_params(again, expected)
  assert tree_equal(loaded, params)
  assert weights_lib.load_metadata(again)["meta_step"] == 7
  # ... and fits the launcher's own init_meta_params path.
  reloaded = mt.load_initial_meta_params(str(again), plan.rule, 1)
  assert tree_equal(reloaded, params)


def test_checkpoint_restores_onto_shardings(straight_run, tmp_path):
  out = straight_run["out"]
  plan = mt.build(tiny_config(output_dir=str(tmp_path / "x")))
  template = mt.abstract_state(plan.population, plan.rule)
  restored = ckpt_lib.restore_latest(out / mt.CHECKPOINT_DIR, template)
  assert restored.step == 4 and int(restored.state.step) == 4
  assert [r["meta_step"] for r in restored.history] == [1, 2, 3, 4]
  assert restored.config["num_meta_steps"] == 4
  for leaf, ref in zip(jax.tree.leaves(restored.state),
                       jax.tree.leaves(template)):
    assert leaf.sharding == ref.sharding
  exported = weights_lib.load_meta_params(out / mt.META_PARAMS_FILE)
  assert tree_equal(jax.device_get(restored.state.meta_params), exported)
  # Saving and restoring again is exact, RNG keys and env states included.
  path = ckpt_lib.save_checkpoint(tmp_path / "ckpt", restored.state,
                                  history=restored.history)
  assert path.name == "4"
  again = ckpt_lib.restore_latest(tmp_path / "ckpt", template)
  assert tree_equal(again.state, restored.state)
  assert again.history == restored.history


def test_incompatible_checkpoint_is_refused(straight_run, tmp_path):
  directory = straight_run["out"] / mt.CHECKPOINT_DIR
  for overrides, where in (
      (dict(population=(dict(env="catch", env_settings=dict(rows=5, columns=5),
                             num_agents=4),)), "agents"),
      (dict(agent=dict(network=dict(dense=(32,), model_lstm_size=8,
                                    model_head_hiddens=(8,)))), "linear")):
    config = tiny_config(output_dir=str(tmp_path / "x"))
    config.update(overrides)
    plan = mt.build(config)
    template = mt.abstract_state(plan.population, plan.rule)
    with pytest.raises(ckpt_lib.CheckpointError) as e:
      ckpt_lib.restore_latest(directory, template)
    message = str(e.value)
    assert "does not fit" in message and where in message
    assert "start a new output folder" in message
  # Nothing was changed or deleted.
  assert ckpt_lib.CheckpointManager(directory).all_steps() == [2, 4]


def test_corrupt_checkpoint_is_refused(straight_run, tmp_path):
  directory = tmp_path / "ckpt"
  shutil.copytree(straight_run["out"] / mt.CHECKPOINT_DIR, directory)
  for f in (directory / "4" / "state").rglob("*"):
    if f.is_file() and f.parent.name == "d":
      f.write_bytes(b"garbage")
  plan = mt.build(tiny_config(output_dir=str(tmp_path / "x")))
  template = mt.abstract_state(plan.population, plan.rule)
  with pytest.raises(ckpt_lib.CheckpointError, match="corrupt or unreadable"):
    ckpt_lib.restore_latest(directory, template)
  assert (directory / "4").is_dir()  # not deleted or overwritten


def test_resume_is_bit_exact_in_a_fresh_process(straight_run, tmp_path):
  """Kill after step 2 (the step-4 checkpoint and outputs never written, but
  the CSV has rows 3 and 4), resume in a new process, run to step 4: same
  metrics and state as the uninterrupted run."""
  src, out = straight_run["out"], tmp_path / "resumed"
  out.mkdir()
  shutil.copy(src / mt.CONFIG_FILE, out / mt.CONFIG_FILE)
  shutil.copy(src / mt.METRICS_FILE, out / mt.METRICS_FILE)
  (out / mt.CHECKPOINT_DIR).mkdir()
  shutil.copytree(src / mt.CHECKPOINT_DIR / "2", out / mt.CHECKPOINT_DIR / "2")

  args = [*TINY_FLAGS, "--config.num_meta_steps=4",
          "--config.checkpoint_every=2", f"--config.output_dir={out}",
          "--config.resume=True"]
  result = run_launcher(args, cwd=tmp_path)
  assert result.returncode == 0, result.stderr[-3000:]
  assert "Resuming from" in result.stdout

  assert ((out / mt.METRICS_FILE).read_text()
          == (src / mt.METRICS_FILE).read_text())
  assert tree_equal(weights_lib.load_meta_params(out / mt.META_PARAMS_FILE),
                    weights_lib.load_meta_params(src / mt.META_PARAMS_FILE))
  plan = mt.build(tiny_config(output_dir=str(tmp_path / "x")))
  template = mt.abstract_state(plan.population, plan.rule)
  a = ckpt_lib.restore_latest(out / mt.CHECKPOINT_DIR, template)
  b = ckpt_lib.restore_latest(src / mt.CHECKPOINT_DIR, template)
  assert a.step == b.step == 4
  assert tree_equal(a.state, b.state)  # agents, env states, RNG keys, ...
  assert a.history == b.history


def test_resume_rules(straight_run, tmp_path):
  out = tmp_path / "run"
  shutil.copytree(straight_run["out"], out)
  # A finished run resumes to nothing more (no meta-step is compiled).
  summary = mt.train(tiny_config(num_meta_steps=4, output_dir=str(out),
                                 resume=True, checkpoint_every=2),
                     log=lambda _: None, progress=False)
  assert summary["meta_steps"] == 4 and summary["steps_this_run"] == 0
  # Another config is refused, naming the difference.
  with pytest.raises(common.UsageError, match=r"seed: saved 4, now 5"):
    mt.train(tiny_config(num_meta_steps=8, output_dir=str(out), resume=True,
                         seed=5), log=lambda _: None, progress=False)
  # Without resume, the folder is not overwritten.
  with pytest.raises(common.UsageError, match="already holds"):
    mt.train(tiny_config(output_dir=str(out)), progress=False)
  # A checkpoint beyond the run's length.
  with pytest.raises(common.UsageError, match="beyond num_meta_steps=3"):
    mt.train(tiny_config(num_meta_steps=3, output_dir=str(out), resume=True,
                         checkpoint_every=2), log=lambda _: None,
             progress=False)


# -------------------------------------------------------- bad input ----


def _train_from_argv(args, tmp_path):
  fv = flags.FlagValues()
  mt.parse_flags(["disco-meta-train", *args], fv)
  return mt.train(fv.config, log=lambda _: None, progress=False)


@pytest.mark.parametrize("args, match", [
    (["--config.nope=1"], "Unknown config key 'config.nope'"),
    (["--config.agent.foo=1"], "valid keys of config.agent"),
    (["--config.population=({'env': 'pong', 'num_agents': 2},)"],
     "Unknown env 'pong'"),
    (["--config.population=({'env': 'catch_dm_env', 'num_agents': 2},)"],
     "needs a jittable env"),
    (["--config.num_devices=64"], "only"),
    (["--config.batch_size=0"], "batch_size must be >= 1"),
    (["--config.init_meta_params=missing.npz"], "does not exist"),
    (["--config.meta_optimizer=lamb"], "Unknown meta_optimizer"),
    (["--config.output_dir=", "--config.resume=True"], "needs the output_dir"),
])
def test_bad_input_in_process(args, match, tmp_path):
  with pytest.raises(common.UsageError, match=match):
    _train_from_argv(
        [*TINY_FLAGS, f"--config.output_dir={tmp_path / 'o'}", *args],
        tmp_path)
  assert not (tmp_path / "o").exists()


def test_mismatched_weights_file(tmp_path):
  path = weights_lib.save_meta_params(
      tmp_path / "other.npz", {"lstm/linear": {"w": np.zeros((2, 2))}},
      metadata={"rule": "disco"})
  with pytest.raises(common.UsageError, match="missing key"):
    _train_from_argv([*TINY_FLAGS, f"--config.init_meta_params={path}",
                      f"--config.output_dir={tmp_path / 'o'}"], tmp_path)


def test_bad_input_exit_code_and_one_line(straight_run, tmp_path):
  for args, match in (
      (["--config.nope=1"], "Unknown config key"),
      ([f"--config.output_dir={straight_run['out']}"], "already holds")):
    result = run_launcher([*TINY_FLAGS, *args], cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, lines
    assert lines[0].startswith("disco-meta-train: error: ")
    assert match in lines[0]


# ----------------------------------- devices, mixed groups, lifetimes ----

_DEVICES_SCRIPT = textwrap.dedent("""
    import functools, json, sys
    import jax, jax.numpy as jnp, numpy as np, optax
    from disco.launch import common
    from disco.launch import meta_train as mt
    from disco.meta import population as pop_lib
    sys.path.insert(0, sys.argv[2])
    from test_meta_train import tiny_config

    assert len(jax.devices()) == 2, jax.devices()
    out = {}

    # Agents that do not split over the devices.
    try:
      mt.build(tiny_config(output_dir=sys.argv[1] + "/a", population=(
          dict(env="catch", env_settings=dict(rows=5, columns=5),
               num_agents=3),)))
    except common.UsageError as e:
      out["split_error"] = str(e)

    # A mixed population of 4 agents (2 x Catch 5x5, 2 x Catch 6x6) whose
    # agents start new lifetimes every 2 meta-steps.
    plan = mt.build(tiny_config(output_dir=sys.argv[1] + "/b",
        lifetime_meta_steps=2, population=(
            dict(env="catch", env_settings=dict(rows=5, columns=5),
                 num_agents=2),
            dict(env="catch", env_settings=dict(rows=6, columns=6),
                 num_agents=2))))

    def capture(lr):  # SGD that keeps the last meta-gradient as its state
      return optax.GradientTransformation(
          lambda p: jax.tree.map(jnp.zeros_like, p),
          lambda g, s, p=None: (jax.tree.map(lambda x: -lr * x, g), g))

    pops = {n: pop_lib.Population(plan.groups, plan.population.config,
                                  capture(1e-2), jax.devices()[:n])
            for n in (1, 2)}
    states = {2: pops[2].init(jax.random.PRNGKey(4), plan.meta_params)}
    states[1] = pops[1].place(states[2])
    first = states[1]

    # Every agent's own meta-gradient at the first step.
    @jax.jit
    def per_agent(meta_params, agents):
      return [jax.vmap(functools.partial(pops[1]._agent_meta_step, g,
                                         meta_params))(s)[0]
              for g, s in zip(pops[1].groups, agents)]
    grads = per_agent(plan.meta_params, first.agents)
    mean_grad = jax.tree.map(lambda *g: jnp.concatenate(g).mean(0), *grads)

    def max_rel(a, b):  # max |a - b| relative to max |b|, over the tree
      a, b = jax.tree.leaves(a), jax.tree.leaves(b)
      scale = max(float(np.abs(np.asarray(y)).max()) for y in b)
      return max(float(np.abs(np.asarray(x) - np.asarray(y)).max())
                 for x, y in zip(a, b)) / scale

    out["ages"], out["learner_counts"], out["value_counts"] = [
        [[int(x) for x in np.asarray(a.age)] for a in first.agents]], [], []
    out["grad_rel_err"] = []
    for step in range(2):
      logs = {}
      for n, p in pops.items():
        states[n], logs[n] = p.step(states[n])
      if step == 0:
        out["mean_of_agents_rel_err"] = max_rel(states[1].meta_opt_state,
                                                mean_grad)
        out["grad_norm"] = float(logs[1]["meta_grad_norm"])
      out["grad_rel_err"].append(max_rel(states[2].meta_opt_state,
                                         states[1].meta_opt_state))
      s = states[2]
      out["ages"].append([[int(x) for x in np.asarray(a.age)]
                          for a in s.agents])
      out["learner_counts"].append(
          [[int(x) for x in np.asarray(a.learner.opt_state[0].count)]
           for a in s.agents])
      out["value_counts"].append(
          [[int(x) for x in np.asarray(a.value.opt_state[0].count)]
           for a in s.agents])
    out["params_rel_err"] = max_rel(states[2].meta_params,
                                    states[1].meta_params)
    out["logs_1dev"] = {k: float(v) for k, v in logs[1].items()}
    out["logs_2dev"] = {k: float(v) for k, v in logs[2].items()}
    out["log_keys"] = sorted(logs[2])
    print("RESULT", json.dumps(out))
""")


@pytest.fixture(scope="module", autouse=True)
def _devices_process(request, tmp_path_factory):
  """Starts the two-device script when the module starts (if a selected test
  needs it), so that it runs alongside the in-process tests."""
  wanted = any("two_devices" in getattr(item, "fixturenames", ())
               for item in request.session.items
               if getattr(item, "module", None) is request.module)
  if not wanted:
    yield None
    return
  tmp = tmp_path_factory.mktemp("devices")
  script = tmp / "devices.py"
  script.write_text(_DEVICES_SCRIPT)
  proc = subprocess.Popen(
      [sys.executable, str(script), str(tmp), str(Path(__file__).parent)],
      cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
      env=subprocess_env(
          XLA_FLAGS="--xla_force_host_platform_device_count=2"))
  yield proc
  if proc.poll() is None:
    proc.kill()
    proc.communicate()


@pytest.fixture(scope="module")
def two_devices(_devices_process):
  stdout, stderr = _devices_process.communicate(timeout=900)
  assert _devices_process.returncode == 0, stderr[-4000:]
  line = [l for l in stdout.splitlines() if l.startswith("RESULT ")]
  return json.loads(line[-1][len("RESULT "):])


def test_two_devices_match_one_device(two_devices):
  # The first meta-gradient differs only by the order of the float sums; the
  # second also through the agents' (equally tiny) differences after step 1.
  first, second = two_devices["grad_rel_err"]
  assert first < 1e-5 and second < 1e-4, (first, second)
  assert two_devices["params_rel_err"] < 1e-6
  np.testing.assert_allclose(
      [two_devices["logs_2dev"][k] for k in two_devices["log_keys"]],
      [two_devices["logs_1dev"][k] for k in two_devices["log_keys"]],
      rtol=1e-4, atol=1e-5)


def test_mixed_population_meta_gradient_is_mean_over_agents(two_devices):
  assert two_devices["grad_norm"] > 0
  assert two_devices["mean_of_agents_rel_err"] < 1e-5
  keys = two_devices["log_keys"]
  for group in ("catch-5x5", "catch-6x6"):
    assert f"{group}/meta_loss" in keys and f"{group}/rewards" in keys


def test_lifetime_reset_at_configured_age(two_devices):
  # lifetime_meta_steps=2 with 2 agents per group: ages start staggered at
  # [0, 1]; an agent whose age reaches 2 starts a new lifetime (age 0, fresh
  # learner and value-function optimiser states).
  assert two_devices["ages"] == [[[0, 1], [0, 1]], [[1, 0], [1, 0]],
                                 [[0, 1], [0, 1]]]
  assert two_devices["learner_counts"] == [[[1, 0], [1, 0]],
                                           [[0, 1], [0, 1]]]
  assert two_devices["value_counts"] == [[[1, 0], [1, 0]], [[0, 1], [0, 1]]]


def test_agents_must_split_over_devices(two_devices):
  message = two_devices["split_error"]
  assert "split evenly over the 2 device(s)" in message
  assert "catch-5x5: 3" in message


def test_group_names_must_be_unique(tmp_path):
  plan = mt.build(tiny_config(output_dir=str(tmp_path / "x")))
  group = plan.groups[0]
  with pytest.raises(ValueError, match="names must be unique"):
    type(plan.population)([group, group], plan.population.config,
                          plan.population.meta_optimizer)
