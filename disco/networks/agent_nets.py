"""Agent networks (haiku): an MLP torso with flat heads and an optional
action-conditional model for per-action outputs.

Parameter names follow the published DiscoRL agent network, so published
parameters load as they are:
  ``<name>/~_embedding_pass/torso/~/linear_i``  torso MLP (with
  ``separate_torsos``: ``torso_<output>``, one per flat output);
  ``<name>/~_head_pass/torso_head[_k]/~/linear_0``  one linear head per flat
  output, in sorted key order;
  ``<name>/linear``, ``<name>/action_cond/linear``, ``<name>/mlp[_k]/~/linear_i``
  the action-conditional model (see ``action_models``).

``NetConfig.compute_dtype`` sets a mixed-precision policy (``jmp``) for the
network: ``"bfloat16"`` keeps the parameters in float32, casts them and the
observations to bfloat16 for the forward (and so backward) pass, and returns
float32 outputs, so whatever reads the outputs (losses, targets, the
meta-network) stays in float32. The default ``"float32"`` builds the network
as without a policy.

``NetConfig.obs_embedding="one_hot"`` takes state-index observations (one
integer in ``[0, N)``, e.g. the ``lpg/*`` grid worlds with
``observation="index"``) and computes the network's first linear layer as a
row gather, ``one_hot(i) @ w + b == w[i] + b``: the same function, with the
same parameters (names, shapes and initial values), as the network on the
one-hot vectors, without building them (``IndexLinear``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import dataclasses
from typing import Any

from dm_env import specs
import haiku as hk
import jax
import jax.numpy as jnp
import jmp
import numpy as np

from disco import policies
from disco import types
from disco.networks import action_models

ACTIVATIONS = {"relu": jax.nn.relu, "tanh": jnp.tanh}
# Compute dtypes of the agent network; the first is the default.
COMPUTE_DTYPES = ("float32", "bfloat16")
# Observation embeddings (``NetConfig.obs_embedding``); the first is the
# default (none: observations go to the torso as they are).
OBS_EMBEDDINGS = ("none", "minigrid", "one_hot")
# Id ranges of MiniGrid/XLand observations [H, W, 2] (tile id, colour id):
# xminigrid.core.constants.NUM_TILES and NUM_COLORS of xminigrid 0.9.
MINIGRID_NUM_TILES = 13
MINIGRID_NUM_COLORS = 12
# The convolutional encoder after the id embedding (xland-minigrid's PPO
# baseline): 2x2 kernels, VALID padding, ReLU after each.
MINIGRID_CONV_CHANNELS = (16, 32, 64)
Outputs = dict[str, jax.Array]


@dataclasses.dataclass(frozen=True)
class NetConfig:
  """Settings of the agent network (the ``network`` entry of agent settings).

  Attributes:
    dense: torso layer sizes (``activation`` between layers, and after the
      last with ``activate_final``).
    head_w_init_std: stddev of the truncated-normal init of the flat heads
      (``None``: haiku's default).
    model_lstm_size: LSTM size of the action-conditional model.
    model_head_hiddens: hidden sizes of the per-action head MLPs.
    conv_channels: channels of a convolutional torso (3x3 kernels, stride
      1, ``SAME`` padding, ReLU after each) in front of the dense torso, for
      image-like observations ``[H, W, C]`` such as MinAtar's and
      MiniGrid's; empty (the default): observations are flattened into the
      dense torso, whatever their shape.
    activation: of the dense torso, a name in ``ACTIVATIONS``.
    activate_final: apply ``activation`` after the torso's last layer too
      (the published network does not: its heads read the last layer's
      linear output).
    separate_torsos: give every flat output its own torso (e.g. separate
      actor and critic networks, as purejaxrl's PPO) instead of one shared
      torso; not with per-action outputs, which grow from the shared one.
    compute_dtype: the dtype the network computes in, a name in
      ``COMPUTE_DTYPES``: ``"float32"`` (the default), or ``"bfloat16"``
      (parameters stored in float32, outputs cast back to float32; see
      ``compute_policy``). Faster on accelerators with bfloat16 matrix
      units (GPUs, TPUs); usually no faster, or slower, on CPUs.
    obs_embedding: ``"none"`` (the default) or ``"minigrid"``: MiniGrid/XLand
      observations ``[H, W, 2]`` hold integer tile and colour ids; each id
      is embedded (``obs_embedding_dim`` features per channel, learnt
      tables), the two embeddings are concatenated (``[H, W, 2 * dim]``) and
      go through xland-minigrid's PPO encoder (``MINIGRID_CONV_CHANNELS``
      2x2 VALID convolutions, ReLU, orthogonal init) before the dense
      torso. Not with ``conv_channels``.
      ``"one_hot"``: state-index observations (one integer in
      ``[0, num_states)``, shape ``[]`` or ``[1]``; e.g. ``lpg/*`` with
      ``observation="index"``) are read as their one-hot vectors, with the
      first linear layer (the torso's first layer, or with ``dense=()`` each
      flat head) computed as a row gather from its ``[num_states, out]``
      weights (``IndexLinear``): the same function and parameters as the
      network on one-hot observations. Other (non-integer) observations go
      to the torso as they are, as with ``"none"`` (a one-hot vector is its
      own embedding), so held-out environments of any kind take the same
      settings.
    obs_embedding_dim: features of each id embedding (xland-minigrid: 16).
    num_states: the number of states of index observations (their spec's
      maximum + 1), with ``obs_embedding="one_hot"``; not a network setting:
      ``with_observation`` sets it from the environment's observation spec
      (None: the observations are not state indices).
  """

  dense: Sequence[int] = (512, 512)
  head_w_init_std: float | None = 1e-2
  model_lstm_size: int = 128
  model_head_hiddens: Sequence[int] = (128,)
  conv_channels: Sequence[int] = ()
  activation: str = "relu"
  activate_final: bool = False
  separate_torsos: bool = False
  compute_dtype: str = COMPUTE_DTYPES[0]
  obs_embedding: str = OBS_EMBEDDINGS[0]
  obs_embedding_dim: int = 16
  num_states: int | None = None

  def __post_init__(self):
    if self.obs_embedding not in OBS_EMBEDDINGS:
      raise ValueError(
          f"Unknown network obs_embedding {self.obs_embedding!r}; use one of "
          f"{', '.join(OBS_EMBEDDINGS)}."
      )
    if self.obs_embedding != "none" and self.conv_channels:
      raise ValueError(
          f"network.obs_embedding={self.obs_embedding!r} brings its own "
          "convolutional encoder: set network.conv_channels=()."
      )
    if self.num_states is not None and (
        self.obs_embedding != "one_hot" or int(self.num_states) < 1
    ):
      raise ValueError(
          f"network num_states={self.num_states} is for state-index "
          "observations (obs_embedding='one_hot', num_states >= 1)."
      )
    if int(self.obs_embedding_dim) < 1:
      raise ValueError(
          f"network.obs_embedding_dim={self.obs_embedding_dim} must be >= 1."
      )
    if self.activation not in ACTIVATIONS:
      raise ValueError(
          f"Unknown network activation {self.activation!r}; use one of "
          f"{', '.join(ACTIVATIONS)}."
      )
    if self.compute_dtype not in COMPUTE_DTYPES:
      raise ValueError(
          f"Unknown network compute_dtype {self.compute_dtype!r}; use one of "
          f"{', '.join(COMPUTE_DTYPES)}."
      )

  def check_observation(
      self,
      observation: specs.Array | Sequence[int],
      where: str = "network",
  ) -> None:
    """Raises ``ValueError`` if this network cannot take the observations of
    the spec ``observation`` (one unbatched observation; a bare shape stands
    for float observations of that shape). ``where`` names these settings in
    the messages."""
    if isinstance(observation, specs.Array):
      spec = observation
    else:
      spec = specs.Array(tuple(observation), np.float32)
    shape = spec.shape
    num_states = index_observation_size(spec)
    if num_states is not None and self.obs_embedding != "one_hot":
      raise ValueError(
          "This environment's observations are state indices (integers in "
          f"[0, {num_states})), which {where}.obs_embedding="
          f"{self.obs_embedding!r} would read as numbers: set "
          f"{where}.obs_embedding='one_hot' (or give the environment one-hot "
          "observations, e.g. env_settings observation='tabular')."
      )
    if (
        self.obs_embedding == "one_hot"
        and num_states is None
        and np.issubdtype(spec.dtype, np.integer)
    ):
      raise ValueError(
          f"{where}.obs_embedding='one_hot' reads integer observations as one "
          "state index (a scalar integer spec bounded in [0, N - 1], e.g. "
          "lpg/* with env_settings observation='index'); this environment's "
          f"are {np.dtype(spec.dtype).name} {list(shape)}: set "
          f"{where}.obs_embedding='none'."
      )
    if self.conv_channels and len(shape) != 3:
      raise ValueError(
          f"The convolutional torso ({where}.conv_channels="
          f"{tuple(self.conv_channels)}) takes image-like observations "
          f"[H, W, C]; this environment's are {list(shape)}: set "
          f"{where}.conv_channels=() to flatten them into the dense torso."
      )
    if self.obs_embedding == "minigrid" and (
        len(shape) != 3 or shape[-1] != 2 or min(shape[:2]) < 4
    ):
      raise ValueError(
          f"{where}.obs_embedding='minigrid' takes MiniGrid/XLand "
          "observations [H, W, 2] (tile and colour ids, H and W >= 4); this "
          f"environment's are {list(shape)}: set {where}.obs_embedding="
          "'none'."
      )

  def with_observation(
      self, observation: specs.Array, where: str = "network"
  ) -> NetConfig:
    """This config for the observations of spec ``observation``: checked
    (``check_observation``) and, with ``obs_embedding="one_hot"``, with the
    ``num_states`` of index observations (None for other observations).

    Raises:
      ValueError: if the network cannot take these observations.
    """
    self.check_observation(observation, where)
    if self.obs_embedding != "one_hot":
      return self
    return dataclasses.replace(
        self, num_states=index_observation_size(observation)
    )


def index_observation_size(spec: specs.Array) -> int | None:
  """The number of states ``N`` of a state-index observation spec, else None.

  A state index is one integer in ``[0, N)``: a ``BoundedArray`` of an
  integer dtype, shape ``[]`` or ``[1]``, minimum 0 and maximum ``N - 1``
  (``lpg/*`` grid worlds with ``observation="index"``).
  """
  if not isinstance(spec, specs.BoundedArray):
    return None
  if not np.issubdtype(spec.dtype, np.integer):
    return None
  if tuple(spec.shape) not in ((), (1,)):
    return None
  low, high = np.asarray(spec.minimum), np.asarray(spec.maximum)
  if low.size != 1 or high.size != 1 or int(low.reshape(())) != 0:
    return None
  return int(high.reshape(())) + 1


class IndexLinear(hk.Module):
  """``hk.Linear`` on one-hot vectors, given their indices: a row gather.

  ``IndexLinear(n, out)(i) == hk.Linear(out)(jax.nn.one_hot(i, n))`` for
  every integer ``i`` (``[B]``), with the same parameters: ``w`` ``[n, out]``
  (initialised as ``hk.Linear``'s on ``n`` inputs: ``w_init``, by default a
  truncated normal of stddev ``1 / sqrt(n)``) and ``b`` ``[out]`` (zeros).
  An index outside ``[0, n)`` reads a zero row, as its (all-zero) one-hot
  vector does.
  """

  def __init__(
      self,
      num_states: int,
      output_size: int,
      w_init: hk.initializers.Initializer | None = None,
      name: str | None = None,
  ):
    super().__init__(name=name)
    self.num_states = int(num_states)
    self.output_size = int(output_size)
    self.w_init = w_init

  def __call__(self, index: jax.Array) -> jax.Array:
    """``[B]`` integer indices -> ``[B, output_size]``."""
    w_init = self.w_init
    if w_init is None:
      w_init = hk.initializers.TruncatedNormal(1.0 / np.sqrt(self.num_states))
    w = hk.get_parameter(
        "w", [self.num_states, self.output_size], jnp.float32, init=w_init
    )
    b = hk.get_parameter("b", [self.output_size], jnp.float32, init=jnp.zeros)
    # Negative indices would wrap around: send them out of range, where the
    # gather fills a zero row.
    index = jnp.where(index < 0, self.num_states, index)
    return jnp.take(w, index, axis=0, mode="fill", fill_value=0) + b


class IndexMLP(hk.Module):
  """``hk.nets.MLP`` on one-hot vectors, given their indices.

  The same layers, names and parameters as ``hk.nets.MLP(output_sizes, ...,
  name=name)`` applied to ``jax.nn.one_hot(index, num_states)``; the first
  layer is an ``IndexLinear`` (a gather), the others are ``hk.Linear``.
  """

  def __init__(
      self,
      num_states: int,
      output_sizes: Sequence[int],
      w_init: hk.initializers.Initializer | None = None,
      activation=jax.nn.relu,
      activate_final: bool = False,
      name: str | None = None,
  ):
    super().__init__(name=name)
    if not output_sizes:
      raise ValueError("IndexMLP needs at least one layer.")
    self.activation = activation
    self.activate_final = activate_final
    self.layers = (
        IndexLinear(num_states, output_sizes[0], w_init, name="linear_0"),
        *(
            hk.Linear(size, w_init=w_init, name=f"linear_{i}")
            for i, size in enumerate(output_sizes[1:], start=1)
        ),
    )

  def __call__(self, index: jax.Array) -> jax.Array:
    """``[B]`` integer indices -> ``[B, output_sizes[-1]]``."""
    out = index
    for i, layer in enumerate(self.layers):
      out = layer(out)
      if i < len(self.layers) - 1 or self.activate_final:
        out = self.activation(out)
    return out


def state_indices(observations: types.ArrayTree, num_states: int) -> jax.Array:
  """The ``[B]`` state indices of index observations ``[B]`` or ``[B, 1]``.

  Raises:
    ValueError: for observations that are not one integer per example.
  """
  leaves = jax.tree.leaves(observations)
  index = leaves[0] if len(leaves) == 1 else None
  if (
      index is None
      or not jnp.issubdtype(index.dtype, jnp.integer)
      or not (index.ndim == 1 or (index.ndim == 2 and index.shape[1] == 1))
  ):
    got = [(str(x.dtype), list(x.shape)) for x in leaves]
    raise ValueError(
        "network.obs_embedding='one_hot' with num_states="
        f"{num_states} takes integer state indices [B] or [B, 1]; got "
        f"{got}."
    )
  return index.reshape(index.shape[:1])


class AgentNet(hk.Module):
  """Observation ``[B, ...]`` -> dict of outputs described by the specs.

  Flat outputs are ``[B, *spec.shape]``; per-action outputs are
  ``[B, A, *spec.shape]`` (continuous policies: see ``__call__``).
  """

  def __init__(
      self,
      config: NetConfig,
      num_actions: int,
      flat_spec: Mapping[str, types.ArraySpec],
      model_spec: Mapping[str, types.ArraySpec] | None = None,
      name: str = "mlp",
      policy: policies.Policy | None = None,
  ):
    super().__init__(name=name)
    self._config = config
    self._policy = policy
    self._num_actions = num_actions
    self._flat_spec = dict(flat_spec)
    self._model_spec = dict(model_spec or {})
    overlap = set(self._flat_spec) & set(self._model_spec)
    if overlap:
      raise ValueError(
          f"Output names {sorted(overlap)} are declared both as flat and as "
          "per-action outputs; give them distinct names."
      )
    if config.separate_torsos and self._model_spec:
      raise ValueError(
          "network.separate_torsos gives each flat output its own torso, but "
          f"this rule also needs per-action outputs {sorted(self._model_spec)}"
          ", which grow from one shared torso: set separate_torsos=False."
      )

  def __call__(
      self,
      observations: types.ArrayTree,
      grad_actions: jax.Array | None = None,
      with_every: bool = False,
  ) -> Outputs | tuple[Outputs, Outputs]:
    """Outputs for ``[B, ...]`` observations.

    ``grad_actions`` (``[B]`` int, optional): per-action outputs then carry
    gradients only at these actions (values are unchanged); see
    ``action_models.per_action_outputs``. With ``with_every`` (and
    ``grad_actions``) the per-action outputs with gradients at every action
    come too, as a second dict (see
    ``action_models.per_action_outputs_and_taken``). With a continuous
    policy, they are action-input heads' outputs at ``grad_actions``
    (``action_models.action_input_outputs``).
    """
    if self._config.separate_torsos:  # no per-action outputs (checked)
      outputs = self._head_pass(
          {
              key: self._embedding_pass(observations, f"torso_{key}")
              for key in sorted(self._flat_spec)
          }
      )
      return (outputs, {}) if with_every else outputs
    embedding = self._embedding_pass(observations)
    outputs = self._head_pass({key: embedding for key in self._flat_spec})
    every = {}
    if self._model_spec:
      c = self._config
      if c.num_states is not None and not c.dense:
        # The embedding is the state index: the model reads its one-hot.
        embedding = jax.nn.one_hot(
            embedding, c.num_states, dtype=jnp.dtype(c.compute_dtype)
        )
      if self._policy is not None and self._policy.is_continuous:
        spec, hiddens = self._model_spec, c.model_head_hiddens
        outs = action_models.action_input_outputs(
            spec, hiddens, self._policy, embedding, grad_actions
        )
      else:
        root = action_models.root_state(embedding, c.model_lstm_size)
        model = action_models.make_action_model(
            self._model_spec,
            c.model_lstm_size,
            c.model_head_hiddens,
            self._num_actions,
        )
        if with_every:
          every, outs = action_models.per_action_outputs_and_taken(
              model, root, grad_actions
          )
        else:
          outs = action_models.per_action_outputs(model, root, grad_actions)
      outputs.update(outs)
    return (outputs, every) if with_every else outputs

  def _embedding_pass(
      self, observations: types.ArrayTree, name: str = "torso"
  ) -> jax.Array:
    """The torso's output ``[B, ...]``; for index observations without a
    torso (``dense=()``), the ``[B]`` state indices (the heads gather)."""
    leaves = jax.tree.leaves(observations)
    prefix = "" if name == "torso" else f"{name}_"
    c = self._config
    if c.num_states is not None:
      index = state_indices(observations, c.num_states)
      if not c.dense:
        return index
      return IndexMLP(
          c.num_states,
          tuple(c.dense),
          activation=ACTIVATIONS[c.activation],
          activate_final=c.activate_final,
          name=name,
      )(index)
    if c.obs_embedding == "one_hot" and any(
        jnp.issubdtype(x.dtype, jnp.integer) for x in leaves
    ):
      raise ValueError(
          "network.obs_embedding='one_hot' got integer observations but no "
          "num_states: build the network with NetConfig.with_observation("
          "the environment's observation spec)."
      )
    if self._config.obs_embedding == "minigrid":
      (ids,) = leaves  # [B, H, W, 2]; see NetConfig.check_observation
      leaves = [minigrid_encoder(ids, self._config.obs_embedding_dim, prefix)]
    elif self._config.conv_channels:
      (images,) = leaves  # [B, H, W, C]; see NetConfig.check_observation
      x = images
      for i, channels in enumerate(self._config.conv_channels):
        x = jax.nn.relu(
            hk.Conv2D(channels, kernel_shape=3, name=f"{prefix}conv_{i}")(x)
        )
      leaves = [x]
    flat = [hk.Flatten()(x) for x in leaves]
    return hk.nets.MLP(
        tuple(self._config.dense),
        activation=ACTIVATIONS[self._config.activation],
        activate_final=self._config.activate_final,
        name=name,
    )(jnp.concatenate(flat, axis=-1))

  def _head_pass(
      self, embeddings: Mapping[str, jax.Array]
  ) -> dict[str, jax.Array]:
    """One linear head per flat output, on that output's embedding (a gather
    for state indices, see ``_embedding_pass``)."""
    c = self._config
    w_init = None
    if c.head_w_init_std:
      w_init = hk.initializers.TruncatedNormal(c.head_w_init_std)
    outputs = {}
    for key in sorted(self._flat_spec):
      shape = tuple(self._flat_spec[key].shape)
      size = int(np.prod(shape))
      gaussian = key == "logits" and isinstance(self._policy, policies.Gaussian)
      if gaussian and self._policy.log_std == "state_independent":
        size = self._policy.action_size  # the mean; the log-std is below
      if c.num_states is not None and not c.dense:
        embedding = embeddings[key]  # [B] state indices
        out = IndexMLP(c.num_states, (size,), w_init, name="torso_head")(
            embedding
        )
      else:
        embedding = hk.Flatten()(embeddings[key])
        out = hk.nets.MLP((size,), w_init=w_init, name="torso_head")(embedding)
      if gaussian:
        out = self._gaussian_params(out)
      outputs[key] = out.reshape((embedding.shape[0],) + shape)
    return outputs

  def _gaussian_params(self, head: jax.Array) -> jax.Array:
    """``[B, 2 D]`` mean and log-std of a Gaussian policy from its head:
    the head's ``[B, D]`` mean and a learnt ``[D]`` log-std (state
    independent), or the head's ``[B, 2 D]`` with the log-std shifted by
    ``init_log_std``."""
    policy = self._policy
    if policy.log_std == "state_independent":
      log_std = hk.get_parameter(
          "policy_log_std",
          [policy.action_size],
          init=hk.initializers.Constant(policy.init_log_std),
      )
      return jnp.concatenate(
          [head, jnp.broadcast_to(log_std.astype(head.dtype), head.shape)],
          axis=-1,
      )
    mean, log_std = jnp.split(head, 2, axis=-1)
    return jnp.concatenate([mean, log_std + policy.init_log_std], axis=-1)


def minigrid_encoder(ids: jax.Array, dim: int, prefix: str = "") -> jax.Array:
  """Features of MiniGrid/XLand observations (called in a haiku transform).

  Args:
    ids: ``[B, H, W, 2]`` tile and colour ids (any numeric dtype; rounded
      and clipped into their ranges).
    dim: features of each id's embedding.
    prefix: of the module names (one encoder per torso).

  Returns:
    ``[B, H - 3, W - 3, 64]``: the concatenated ``[B, H, W, 2 * dim]``
    embeddings through ``MINIGRID_CONV_CHANNELS`` 2x2 VALID convolutions,
    each followed by a ReLU.
  """
  ids = jnp.round(ids.astype(jnp.float32)).astype(jnp.int32)
  tiles = jnp.clip(ids[..., 0], 0, MINIGRID_NUM_TILES - 1)
  colours = jnp.clip(ids[..., 1], 0, MINIGRID_NUM_COLORS - 1)
  x = jnp.concatenate(
      [
          hk.Embed(MINIGRID_NUM_TILES, dim, name=f"{prefix}tile_embed")(tiles),
          hk.Embed(MINIGRID_NUM_COLORS, dim, name=f"{prefix}colour_embed")(
              colours
          ),
      ],
      axis=-1,
  )
  w_init = hk.initializers.Orthogonal(np.sqrt(2.0))
  for i, channels in enumerate(MINIGRID_CONV_CHANNELS):
    x = jax.nn.relu(
        hk.Conv2D(
            channels,
            kernel_shape=2,
            padding="VALID",
            w_init=w_init,
            name=f"{prefix}minigrid_conv_{i}",
        )(x)
    )
  return x


def network_settings(
    dense: Sequence[int],
    model_lstm_size: int = 128,
    model_head_hiddens: Sequence[int] = (128,),
    head_w_init_std: float | None = 1e-2,
    conv_channels: Sequence[int] = (),
    activation: str = "relu",
    activate_final: bool = False,
    separate_torsos: bool = False,
    compute_dtype: str = COMPUTE_DTYPES[0],
) -> dict[str, Any]:
  """The ``network`` entry of agent settings (a plain dict of ``NetConfig``
  fields)."""
  return dict(
      dense=tuple(dense),
      head_w_init_std=head_w_init_std,
      model_lstm_size=model_lstm_size,
      model_head_hiddens=tuple(model_head_hiddens),
      conv_channels=tuple(conv_channels),
      activation=activation,
      activate_final=activate_final,
      separate_torsos=separate_torsos,
      compute_dtype=compute_dtype,
  )


def make_net_config(settings: Mapping[str, Any]) -> NetConfig:
  """``NetConfig`` from the ``network`` entry of agent settings.

  Raises:
    ValueError: for unknown or missing keys, naming the valid ones.
  """
  settings = dict(settings)
  # num_states comes from the environment (NetConfig.with_observation).
  valid = [
      f.name for f in dataclasses.fields(NetConfig) if f.name != "num_states"
  ]
  unknown = sorted(set(settings) - set(valid))
  if unknown:
    raise ValueError(
        f"Unknown network setting(s) {unknown}; valid: " f"{', '.join(valid)}."
    )
  for key in ("dense", "model_head_hiddens", "conv_channels"):
    if key in settings:
      settings[key] = tuple(settings[key])
  return NetConfig(**settings)


def make_network(
    config: NetConfig,
    num_actions: int,
    flat_spec: Mapping[str, types.ArraySpec],
    model_spec: Mapping[str, types.ArraySpec] | None = None,
    name: str = "mlp",
    policy: policies.Policy | None = None,
) -> hk.Transformed:
  """A pure ``(init, apply)`` pair over ``[B, ...]`` observations, computing
  in ``config.compute_dtype`` (see ``compute_policy``). With a Gaussian
  ``policy``, the ``logits`` output holds its mean and log-std
  (``AgentNet._gaussian_params``)."""

  def forward(observations, grad_actions=None, with_every=False):
    net = AgentNet(config, num_actions, flat_spec, model_spec, name, policy)
    if config.compute_dtype == COMPUTE_DTYPES[0]:
      return net(observations, grad_actions, with_every)
    return with_policy(compute_policy(config.compute_dtype), net)(
        observations, grad_actions, with_every
    )

  return hk.without_apply_rng(hk.transform(forward))


def compute_policy(compute_dtype: str) -> jmp.Policy:
  """The ``jmp`` policy of a network computing in ``compute_dtype``:
  float32 parameters and outputs."""
  return jmp.get_policy(
      f"params=float32,compute={compute_dtype},output=float32"
  )


def with_policy(policy: jmp.Policy, fn):
  """``fn`` (called inside a haiku transform) under ``policy``.

  Its parameters are created in ``policy.param_dtype`` and read in the
  compute dtype, its floating-point arguments are cast to the compute dtype
  and its outputs to the output dtype. The policy applies to this call only
  (haiku's ``mixed_precision.set_policy`` would set it for every instance
  of a module class, other agents' included).
  """

  def creator(next_creator, shape, dtype, init, context):
    del dtype, context
    return next_creator(shape, policy.param_dtype, init)

  def getter(next_getter, value, context):
    del context
    return next_getter(policy.cast_to_compute(value))

  def wrapped(*args):
    with hk.custom_creator(creator), hk.custom_getter(getter):
      out = fn(*policy.cast_to_compute(args))
    return policy.cast_to_output(out)

  return wrapped


def unroll(
    apply_fn,
    params,
    observations: types.ArrayTree,
    grad_actions: jax.Array | None = None,
    with_every: bool = False,
):
  """Applies a ``[B, ...]`` network to ``[T, B, ...]`` observations (and
  optional ``[T, B]`` ``grad_actions``, with ``with_every``, see
  ``AgentNet.__call__``)."""
  leaf = jax.tree.leaves(observations)[0]
  t, b = leaf.shape[:2]
  flatten = lambda x: x.reshape((t * b,) + x.shape[2:])
  flat_obs = jax.tree.map(flatten, observations)
  if grad_actions is None:
    out = apply_fn(params, flat_obs)
  else:
    out = apply_fn(params, flat_obs, flatten(grad_actions), with_every)
  return jax.tree.map(lambda x: x.reshape((t, b) + x.shape[1:]), out)
