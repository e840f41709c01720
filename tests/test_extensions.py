"""A module of one's own, named by ``--config.imports``, registers a new
estimator, update rule, environment and level sampler, and the launchers
run them from the command line without a change to ``disco/``."""

from __future__ import annotations

import json
import os
from pathlib import Path
import subprocess
import sys
import textwrap

import pytest

from disco.meta import estimator_registry
from disco.meta import level_sampler_registry
from disco.meta import level_samplers

from meta_settings import TINY_FLAGS
from meta_settings import TINY_LPG_FLAGS
from meta_settings import subprocess_env

# The module: each registration is a few lines over the package's own
# pieces (its classes and registries).
EXTENSION = """
import dataclasses

import jax
import jax.numpy as jnp

from disco.environments import catch
from disco.environments import registry as env_registry
from disco.meta import estimator_registry
from disco.meta import level_sampler_registry
from disco.meta import level_samplers
from disco.meta import population
from disco.networks import agent_nets
from disco.update_rules import base
from disco.update_rules import registry as rule_registry
from disco.value_fns import losses


@dataclasses.dataclass(frozen=True)
class ScaledSettings:
  scale: float = 1.0

  @classmethod
  def from_config(cls, values, agent):
    del agent
    return cls(**values)


class ScaledBackprop(population.BackpropPopulation):
  # Backprop's meta-gradient, scaled (and the scale logged).

  def __init__(self, groups, config, settings, optimizer, devices, normalizers):
    del normalizers
    self.scale = settings.scale
    super().__init__(groups, config, optimizer, devices)

  def _combine(self, ctx, groups):
    grads, logs = super()._combine(ctx, groups)
    logs["gradient_scale"] = jnp.float32(self.scale)
    return jax.tree.map(lambda g: g * self.scale, grads), logs


class FixedLevel(level_samplers.LevelSampler):
  # Every lifetime on the generator's level of key 0.

  def draw(self, state, rng):
    del rng
    return super().draw(state, jax.random.PRNGKey(0))

  def stats(self, state):
    return dict(super().stats(state), fixed=jnp.float32(1.0))


class ImmediateReward(base.UpdateRule):
  default_hyper_params = dict(scale=1.0)

  def flat_output_spec(self, num_actions):
    return dict(logits=base.logits_spec(num_actions))

  def unroll_meta_net(self, inputs, context):
    return dict(adv=inputs.rewards), context.rule_state

  def agent_loss(self, inputs, meta_out, backprop):
    loss = losses.policy_gradient_loss(
        inputs.agent_out["logits"][:-1], inputs.actions[:-1], meta_out["adv"])
    return self.hyper_params["scale"] * loss, {}


estimator_registry.register_estimator(
    "scaled_backprop", ScaledBackprop, settings=ScaledSettings, replay=True,
    level_samplers=True)
level_sampler_registry.register_level_sampler("fixed_level", FixedLevel)
rule_registry.register_rule(
    "immediate_reward", ImmediateReward,
    dict(learning_rate=1e-2, network=agent_nets.network_settings((16,))))
env_registry.register_env("small_catch", catch.Catch, dict(rows=4, columns=4))
"""

# A config file of one's own holding the estimator's settings group.
CONFIG_FILE = """
from disco import checks


def get_config():
  config = checks.load_config("meta_train")
  config.estimator = "scaled_backprop"
  config.scaled_backprop = dict(scale=1.0)
  return config
"""


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
  folder = tmp_path_factory.mktemp("extension")
  (folder / "my_extension.py").write_text(textwrap.dedent(EXTENSION))
  (folder / "my_meta_train.py").write_text(textwrap.dedent(CONFIG_FILE))
  return folder


def _launch(module: str, args, folder: Path, timeout: int = 900):
  """``python -m disco.launch.<module> ARGS`` with ``folder`` on
  PYTHONPATH."""
  path = os.pathsep.join(
      p for p in (str(folder), os.environ.get("PYTHONPATH", "")) if p
  )
  return subprocess.run(
      [sys.executable, "-m", f"disco.launch.{module}", *args],
      cwd=folder,
      env=subprocess_env(PYTHONPATH=path),
      capture_output=True,
      text=True,
      timeout=timeout,
  )


def test_meta_train_runs_a_registered_estimator_and_level_sampler(folder):
  out = folder / "meta"
  result = _launch(
      "meta_train",
      [
          f"--config={folder / 'my_meta_train.py'}",
          "--config.imports=my_extension",
          "--config.scaled_backprop.scale=0.25",
          "--config.level_sampler.kind=fixed_level",
          "--config.population=({'env': 'lpg/random', 'env_settings': "
          "{'mode': 'small'}, 'num_agents': 2},)",
          "--config.lifetime_meta_steps=1",
          "--config.num_meta_steps=2",
          "--config.checkpoint_every=0",
          f"--config.output_dir={out}",
          *TINY_FLAGS,
          *TINY_LPG_FLAGS,
      ],
      folder,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  rows = (out / "metrics.csv").read_text().splitlines()
  header = rows[0].split(",")
  last = dict(zip(header, rows[-1].split(","), strict=True))
  assert float(last["gradient_scale"]) == 0.25  # the estimator's settings
  assert float(last["lpg/random/levels/fixed"]) == 1.0  # the sampler's
  assert float(last["lpg/random/levels/lifetimes"]) == 4.0  # 2 x 2 ended
  saved = json.loads((out / "config.json").read_text())["config"]
  assert saved["estimator"] == "scaled_backprop"
  assert saved["scaled_backprop"] == {"scale": 0.25}


def test_unknown_estimator_lists_the_registered_ones(folder):
  result = _launch(
      "meta_train",
      ["--config.imports=my_extension", "--config.estimator=scaled"],
      folder,
  )
  assert result.returncode == 2, result.stderr[-3000:]
  assert result.stderr.strip().splitlines() == [
      "disco-meta-train: error: config.estimator: Unknown estimator "
      "'scaled'; use one of backprop, es, pes, bmg, scaled_backprop."
  ]


def test_eval_runs_a_registered_rule_on_a_registered_env(folder):
  out = folder / "eval"
  result = _launch(
      "evaluate",
      [
          "--config.imports=my_extension",
          "--config.rule=immediate_reward",
          "--config.env=small_catch",
          "--config.total_env_steps=50",
          "--config.rollout_len=5",
          "--config.batch_size=2",
          "--config.replay_capacity=0",
          "--config.min_replay_size=0",
          "--config.last_episodes=5",
          f"--config.output_dir={out}",
      ],
      folder,
  )
  assert result.returncode == 0, result.stderr[-3000:]
  summary = json.loads((out / "summary.json").read_text())
  assert summary["rule"] == "immediate_reward"
  saved = json.loads((out / "config.json").read_text())
  assert saved["config"]["env"] == "small_catch"


@pytest.mark.parametrize(
    "name, kwargs, match",
    [
        ("es", {}, "already registered"),
        ("my-estimator", {}, "Bad estimator name"),
        ("mine", dict(settings=dict), "from_config"),
    ],
)
def test_register_estimator_refuses(name, kwargs, match):
  with pytest.raises(ValueError, match=match):
    estimator_registry.register_estimator(name, lambda *a: None, **kwargs)
  assert estimator_registry.estimator_names() == (
      "backprop",
      "es",
      "pes",
      "bmg",
  )


@pytest.mark.parametrize(
    "name, cls, match",
    [
        ("plr", level_samplers.PLRSampler, "already registered"),
        ("none", level_samplers.LevelSampler, "already registered"),
        ("mine", level_samplers.SamplerConfig, "subclass of"),
    ],
)
def test_register_level_sampler_refuses(name, cls, match):
  with pytest.raises(ValueError, match=match):
    level_sampler_registry.register_level_sampler(name, cls)
  assert level_sampler_registry.level_sampler_names() == (
      "uniform",
      "plr",
      "groove",
  )
