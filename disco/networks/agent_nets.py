"""Agent networks (haiku): an MLP torso with flat heads and an optional
action-conditional model for per-action outputs.

Parameter names follow the published DiscoRL agent network, so its
parameters load as they are:

* ``<name>/~_embedding_pass/torso/~/linear_i``: torso MLP (``torso_<output>``
  per flat output with ``separate_torsos``);
* ``<name>/~_head_pass/torso_head[_k]/~/linear_0``: one linear head per flat
  output, in sorted key order;
* ``<name>/linear``, ``<name>/action_cond/linear``, ``<name>/mlp[_k]/~/linear_i``:
  the action-conditional model (``action_models``).
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
from disco.networks import encoders

ACTIVATIONS = {"relu": jax.nn.relu, "tanh": jnp.tanh}
# Compute dtypes of the agent network; the first is the default.
COMPUTE_DTYPES = ("float32", "bfloat16")
# Observation embeddings (``NetConfig.obs_embedding``); the first is the
# default (none: observations go to the torso as they are).
OBS_EMBEDDINGS = ("none", "minigrid", "one_hot", "nature_cnn")
Outputs = dict[str, jax.Array]


@dataclasses.dataclass(frozen=True)
class NetConfig:
  """Settings of the agent network (the ``network`` entry of agent settings).

  Attributes:
    dense: torso layer sizes.
    head_w_init_std: stddev of the flat heads' truncated-normal init (None:
      haiku's default).
    model_lstm_size: LSTM size of the action-conditional model.
    model_head_hiddens: hidden sizes of the per-action head MLPs.
    conv_channels: a convolutional torso (3x3, ``SAME``, ReLU) before the
      dense one, for ``[H, W, C]`` observations; empty: flatten them.
    activation: of the dense torso, a name in ``ACTIVATIONS``.
    activate_final: also after the torso's last layer (the published network
      does not).
    separate_torsos: one torso per flat output (e.g. purejaxrl's separate
      actor and critic); not with per-action outputs.
    compute_dtype: ``"float32"`` or ``"bfloat16"`` (float32 parameters and
      outputs; ``compute_policy``).
    obs_embedding: ``"none"``; ``"minigrid"``: ``[H, W, 2]`` tile and colour
      ids through ``encoders.minigrid_encoder`` (not with ``conv_channels``);
      ``"one_hot"``: integer state indices read as one-hot vectors, the first
      layer a row gather (``encoders.IndexLinear``), other observations as they are;
      ``"nature_cnn"``: ``[H, W, C]`` images (bytes scaled to [0, 1])
      through ``encoders.nature_encoder`` (Atari; not with ``conv_channels``).
    obs_embedding_dim: features per id embedding (xland-minigrid: 16).
    num_states: the number of index-observation states, set by
      ``with_observation``, not by the user.
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
    """Raises ``ValueError`` if the network cannot take observations of spec
    ``observation`` (unbatched; a bare shape means float32). ``where`` names
    these settings in the messages."""
    if isinstance(observation, specs.Array):
      spec = observation
    else:
      spec = specs.Array(tuple(observation), np.float32)
    shape = spec.shape
    num_states = encoders.index_observation_size(spec)
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
    if self.obs_embedding == "nature_cnn" and (
        len(shape) != 3 or min(shape[:2]) < encoders.NATURE_CNN_MIN_SIDE
    ):
      raise ValueError(
          f"{where}.obs_embedding='nature_cnn' takes images [H, W, C] with H "
          f"and W >= {encoders.NATURE_CNN_MIN_SIDE} (Atari's [84, 84, 4]); this "
          f"environment's are {list(shape)}: set {where}.obs_embedding="
          "'none'."
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
    """This config checked against ``observation`` (``check_observation``),
    with ``num_states`` set for ``obs_embedding="one_hot"``.

    Raises:
      ValueError: if the network cannot take these observations.
    """
    self.check_observation(observation, where)
    if self.obs_embedding != "one_hot":
      return self
    return dataclasses.replace(
        self, num_states=encoders.index_observation_size(observation)
    )


class AgentNet(hk.Module):
  """Observations ``[B, ...]`` -> dict of outputs described by the specs.

  Flat outputs are ``[B, *spec.shape]``, per-action outputs ``[B, A,
  *spec.shape]``.

  Raises:
    ValueError: if a name is both flat and per-action, or for
      ``separate_torsos`` with per-action outputs.
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

    With ``grad_actions`` (``[B]`` int) per-action outputs carry gradients only
    there (``action_models.per_action_outputs``); ``with_every`` also returns
    the per-action outputs with every gradient, as a second dict. A continuous
    policy's per-action outputs are taken at ``grad_actions``.
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
    """The torso's output ``[B, ...]``; the ``[B]`` state indices for index
    observations without a torso (``dense=()``)."""
    leaves = jax.tree.leaves(observations)
    prefix = "" if name == "torso" else f"{name}_"
    c = self._config
    if c.num_states is not None:
      index = encoders.state_indices(observations, c.num_states)
      if not c.dense:
        return index
      return encoders.IndexMLP(
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
      leaves = [
          encoders.minigrid_encoder(ids, self._config.obs_embedding_dim, prefix)
      ]
    elif self._config.obs_embedding == "nature_cnn":
      (images,) = leaves  # [B, H, W, C]; see NetConfig.check_observation
      leaves = [encoders.nature_encoder(images, prefix)]
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
    """One linear head per flat output, on that output's embedding."""
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
        out = encoders.IndexMLP(
            c.num_states, (size,), w_init, name="torso_head"
        )(embedding)
      else:
        embedding = hk.Flatten()(embeddings[key])
        out = hk.nets.MLP((size,), w_init=w_init, name="torso_head")(embedding)
      if gaussian:
        out = self._gaussian_params(out)
      outputs[key] = out.reshape((embedding.shape[0],) + shape)
    return outputs

  def _gaussian_params(self, head: jax.Array) -> jax.Array:
    """``[B, 2 D]`` Gaussian mean and log-std: the head's ``[B, D]`` mean with a
    learnt ``[D]`` log-std (state independent), or the head's ``[B, 2 D]`` with
    the log-std shifted by ``init_log_std``."""
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
  """The ``network`` entry of agent settings, a dict of ``NetConfig`` fields."""
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
    ValueError: for unknown keys, naming the valid ones.
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
  """A pure ``(init, apply)`` pair over ``[B, ...]`` observations in
  ``config.compute_dtype``. With a Gaussian ``policy`` the ``logits`` output
  holds its mean and log-std."""

  def forward(observations, grad_actions=None, with_every=False):
    net = AgentNet(config, num_actions, flat_spec, model_spec, name, policy)
    if config.compute_dtype == COMPUTE_DTYPES[0]:
      return net(observations, grad_actions, with_every)
    return with_policy(compute_policy(config.compute_dtype), net)(
        observations, grad_actions, with_every
    )

  return hk.without_apply_rng(hk.transform(forward))


def compute_policy(compute_dtype: str) -> jmp.Policy:
  """The ``jmp`` policy: float32 parameters and outputs, ``compute_dtype``
  compute."""
  return jmp.get_policy(
      f"params=float32,compute={compute_dtype},output=float32"
  )


def with_policy(policy: jmp.Policy, fn):
  """``fn`` (inside a haiku transform) under the ``jmp`` ``policy``:
  parameters created in ``param_dtype``, arguments and parameters read in the
  compute dtype, outputs cast to the output dtype. Unlike
  ``hk.mixed_precision.set_policy``, it applies to this call only."""

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
  ``[T, B]`` ``grad_actions``, see ``AgentNet.__call__``)."""
  leaf = jax.tree.leaves(observations)[0]
  t, b = leaf.shape[:2]
  flatten = lambda x: x.reshape((t * b,) + x.shape[2:])
  flat_obs = jax.tree.map(flatten, observations)
  if grad_actions is None:
    out = apply_fn(params, flat_obs)
  else:
    out = apply_fn(params, flat_obs, flatten(grad_actions), with_every)
  return jax.tree.map(lambda x: x.reshape((t, b) + x.shape[1:]), out)
