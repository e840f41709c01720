"""Tiny meta-training settings shared by the meta-training test modules."""

from __future__ import annotations

from ml_collections import config_dict

from disco.launch import meta_train as mt

TINY = dict(
    batch_size=2,
    rollout_len=3,
    inner_steps=1,
    agent=dict(
        network=dict(dense=(16,), model_lstm_size=8, model_head_hiddens=(8,))
    ),
    value_fn=dict(dense=(8, 8)),
)
TINY_FLAGS = [
    "--config.batch_size=2",
    "--config.rollout_len=3",
    "--config.inner_steps=1",
    "--config.agent.network.dense=(16,)",
    "--config.agent.network.model_lstm_size=8",
    "--config.agent.network.model_head_hiddens=(8,)",
    "--config.value_fn.dense=(8,8)",
]


def tiny_config(**overrides) -> config_dict.ConfigDict:
  """The default meta-training config at ``TINY`` sizes, with overrides."""
  config = mt.default_config()
  config.batch_size = TINY["batch_size"]
  config.rollout_len = TINY["rollout_len"]
  config.inner_steps = TINY["inner_steps"]
  config.agent.network.update(TINY["agent"]["network"])
  config.value_fn.dense = TINY["value_fn"]["dense"]
  config.update(overrides)
  return config
