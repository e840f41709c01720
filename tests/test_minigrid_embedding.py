"""The MiniGrid/XLand observation embedding of the agent network
(``network.obs_embedding="minigrid"``): what it computes, its checks, and
that disco-eval's flag reaches the agent."""

from __future__ import annotations

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from disco import errors
from disco import evaluation
from disco import types
from disco.networks import agent_nets
from disco.networks import encoders

SPEC = {"logits": types.ArraySpec((3,), np.float32)}


def _ids(rng, shape=(4, 7, 7)):
  tiles = rng.integers(0, encoders.MINIGRID_NUM_TILES, shape)
  colours = rng.integers(0, encoders.MINIGRID_NUM_COLORS, shape)
  return np.stack([tiles, colours], -1).astype(np.float32)  # as the env's


def _conv_valid_2x2(x, w, b):
  """A 2x2 VALID convolution, by hand: ``[B, H, W, C]`` -> ``[B, H-1, W-1, O]``."""
  out = sum(
      jnp.einsum(
          "bhwc,co->bhwo",
          x[:, i : x.shape[1] - 1 + i, j : x.shape[2] - 1 + j],
          w[i, j],
      )
      for i in range(2)
      for j in range(2)
  )
  return out + b


def test_encoder_embeds_tile_and_colour_ids_then_convolves():
  ids = _ids(np.random.default_rng(0))
  fn = hk.without_apply_rng(
      hk.transform(lambda x: encoders.minigrid_encoder(x, 5))
  )
  params = fn.init(jax.random.PRNGKey(0), ids)
  got = fn.apply(params, ids)
  assert got.shape == (4, 4, 4, encoders.MINIGRID_CONV_CHANNELS[-1])
  tiles = params["tile_embed"]["embeddings"]
  colours = params["colour_embed"]["embeddings"]
  assert tiles.shape == (encoders.MINIGRID_NUM_TILES, 5)
  assert colours.shape == (encoders.MINIGRID_NUM_COLORS, 5)
  ints = ids.astype(int)
  x = jnp.concatenate([tiles[ints[..., 0]], colours[ints[..., 1]]], -1)
  for i in range(len(encoders.MINIGRID_CONV_CHANNELS)):
    conv = params[f"minigrid_conv_{i}"]
    x = jax.nn.relu(_conv_valid_2x2(x, conv["w"], conv["b"]))
  np.testing.assert_allclose(got, x, rtol=1e-5, atol=1e-5)


def test_agent_network_with_the_embedding():
  config = agent_nets.NetConfig(dense=(8,), obs_embedding="minigrid")
  config.check_observation((7, 7, 2))
  net = agent_nets.make_network(config, 3, SPEC)
  ids = _ids(np.random.default_rng(1))
  params = net.init(jax.random.PRNGKey(0), ids)
  names = set(params)
  assert any(n.endswith("tile_embed") for n in names), names
  out = net.apply(params, ids)["logits"]
  assert out.shape == (4, 3)
  # Ids are categories, not magnitudes: the network reads a tile id
  # through its own row of the table, so a change of that row changes the
  # output of the observations holding the id, and of no other.
  key = next(n for n in names if n.endswith("tile_embed"))
  tile = 11  # not in the first observation, in the second
  ids[0, ..., 0] = np.minimum(ids[0, ..., 0], 10)
  ids[1, 0, 0, 0] = tile
  changed = jax.tree.map(lambda x: x, params)
  changed[key] = dict(embeddings=params[key]["embeddings"].at[tile].add(1.0))
  before, after = (net.apply(p, ids)["logits"] for p in (params, changed))
  np.testing.assert_array_equal(before[0], after[0])
  assert np.abs(np.asarray(before[1] - after[1])).max() > 0


def test_bad_embedding_settings_and_observations():
  with pytest.raises(ValueError, match="obs_embedding"):
    agent_nets.NetConfig(obs_embedding="atari")
  with pytest.raises(ValueError, match="conv_channels"):
    agent_nets.NetConfig(obs_embedding="minigrid", conv_channels=(16,))
  config = agent_nets.NetConfig(obs_embedding="minigrid")
  for shape in ((8, 8), (7, 7, 3), (3, 3, 2)):
    with pytest.raises(ValueError, match="obs_embedding='minigrid'"):
      config.check_observation(shape)


def test_id_ranges_are_xminigrids():
  constants = pytest.importorskip("xminigrid.core.constants")
  assert encoders.MINIGRID_NUM_TILES == constants.NUM_TILES
  assert encoders.MINIGRID_NUM_COLORS == constants.NUM_COLORS


def test_disco_eval_flag_reaches_the_agent(tmp_path):
  config = evaluation.default_config()
  config.update(
      dict(
          rule="ppo",
          env="xminigrid/MiniGrid-Empty-8x8",
          output_dir=str(tmp_path / "run"),
      )
  )
  config.env_settings = {}
  config.network.obs_embedding = "minigrid"
  plan = evaluation.build(config, log=lambda _: None)
  assert plan.agent.net_config.obs_embedding == "minigrid"
  config.env = "catch"  # observations [8, 8]: no ids to embed
  config.env_settings = dict(rows=8, columns=8)
  with pytest.raises(errors.UsageError, match="obs_embedding") as e:
    evaluation.build(config, log=lambda _: None)
  assert "\n" not in str(e.value)
