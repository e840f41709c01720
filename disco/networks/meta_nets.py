"""The Disco meta-network: reads a rollout, outputs the agent's targets.

  1. Features: each input entry takes a quantity of the
     ``UpdateRuleInputs`` through named transforms to ``[T, B, k]``;
     action-conditional ones (``[T, B, A, k]``) and the taken action's
     one-hot go through a 1x1-conv net over actions, averaged over actions
     and read at the taken one.
  2. An LSTM runs backwards in time, reset at episode ends: ``[T, B, H]``.
  3. A per-lifetime meta-LSTM (haiku state ``meta_rnn_state``, one step per
     rollout) modulates it multiplicatively.
  4. Heads: ``y``, ``z`` ``[T, B, P]``, ``meta_input_emb`` ``[T, B, 1]`` and
     policy-target logits ``pi`` ``[T, B, A]``.

Haiku names reproduce the published network, so the Disco103 weights apply.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
import dataclasses
import functools
from typing import Any

import haiku as hk
import jax
import jax.numpy as jnp

from disco import ops
from disco import types
from disco.networks import input_transforms


@dataclasses.dataclass(frozen=True)
class InputSpec:
  """One meta-network input: a source path and its transforms.

  Attributes:
    source: ``/``-separated path into ``UpdateRuleInputs`` (attributes, then
      dict keys), e.g. ``"extra_from_rule/target_out/logits"``.
    transforms: names in ``input_transforms.TRANSFORMS`` or ``"y_net"`` /
      ``"z_net"``, applied left to right.
  """

  source: str
  transforms: tuple[str, ...]

  def __post_init__(self):
    known = set(input_transforms.TRANSFORMS) | set(input_transforms.EMBEDDINGS)
    unknown = [t for t in self.transforms if t not in known]
    if unknown:
      raise ValueError(
          f"Unknown transform(s) {unknown} for input {self.source!r}; valid "
          f"transforms: {sorted(known)}."
      )


@dataclasses.dataclass(frozen=True)
class MetaNetInputOption:
  """Declarative input set: per-transition and per-action inputs."""

  base: tuple[InputSpec, ...]
  action_conditional: tuple[InputSpec, ...] = ()


def _spec(source: str, *transforms: str) -> InputSpec:
  return InputSpec(source, tuple(transforms))


def disco103_input_option() -> MetaNetInputOption:
  """The input set of the published Disco103 meta-network."""
  select = ("drop_last", "softmax", "stop_grad", "select_a")
  probs = ("drop_last", "softmax", "stop_grad")
  base = (
      _spec("agent_out/logits", *select),
      _spec("behaviour_agent_out/logits", *select),
      _spec("rewards", "sign_log"),
      _spec("is_terminal", "masks_to_discounts"),
      _spec("extra_from_rule/v_scalar", "sign_log", "td_pair", "stop_grad"),
      _spec("extra_from_rule/adv", "sign_log", "stop_grad"),
      _spec("extra_from_rule/normalized_adv", "stop_grad"),
      _spec("extra_from_rule/target_out/logits", *select),
      _spec("agent_out/y", "softmax", "y_net", "td_pair"),
      _spec("extra_from_rule/target_out/y", "softmax", "y_net", "td_pair"),
  )
  # ``drop_last`` commutes with the row-wise softmax and embedding; applying
  # it after them lets XLA share one embedding of all steps between entries.
  for z in ("agent_out/z", "extra_from_rule/target_out/z"):
    base += (
        _spec(z, "softmax", "z_net", "drop_last", "select_a"),
        _spec(z, "softmax", "z_net", "pi_weighted_avg", "td_pair"),
        _spec(z, "softmax", "z_net", "max_a", "td_pair"),
    )
  action_conditional = (
      _spec("agent_out/logits", *probs),
      _spec("behaviour_agent_out/logits", *probs),
      _spec("extra_from_rule/target_out/logits", *probs),
      _spec("agent_out/z", "softmax", "z_net", "drop_last"),
      _spec("extra_from_rule/target_out/z", "softmax", "z_net", "drop_last"),
      _spec("extra_from_rule/q", "sign_log", "drop_last", "stop_grad"),
      _spec("extra_from_rule/qv_adv", "sign_log", "drop_last", "stop_grad"),
      _spec("extra_from_rule/normalized_qv_adv", "drop_last", "stop_grad"),
  )
  return MetaNetInputOption(base=base, action_conditional=action_conditional)


# The inputs only an agent with the action-conditional model gives: its
# per-action predictions ``z`` (online and target network).
Z_SOURCES = ("agent_out/z", "extra_from_rule/target_out/z")


def flat_input_option() -> MetaNetInputOption:
  """``disco103_input_option`` without ``Z_SOURCES``: the inputs of an agent
  without the action-conditional model."""
  full = disco103_input_option()

  def keep(specs):
    return tuple(s for s in specs if s.source not in Z_SOURCES)

  return MetaNetInputOption(
      base=keep(full.base), action_conditional=keep(full.action_conditional)
  )


# Input options by the name a rule file gives (``MetaNetConfig.input_option``).
INPUT_OPTIONS = dict(disco103=disco103_input_option, flat=flat_input_option)


def z_sources(option: MetaNetInputOption) -> list[str]:
  """The ``Z_SOURCES`` that ``option`` reads."""
  return sorted(
      {
          s.source
          for s in option.base + option.action_conditional
          if s.source in Z_SOURCES
      }
  )


# The ``extra_from_rule`` entry of the lifetime inputs
# (``MetaNetConfig.lifetime_conditioning``).
LIFETIME_KEY = "lifetime"


@dataclasses.dataclass(frozen=True)
class MetaNetConfig:
  """Sizes and initialisation of the Disco meta-network (Disco103 defaults)."""

  prediction_size: int = 600
  hidden_size: int = 256
  embedding_size: Sequence[int] = (16, 1)
  policy_channels: Sequence[int] = (16, 2)
  policy_target_channels: Sequence[int] = (16,)
  output_stddev: float | None = 0.3
  aux_stddev: float | None = 0.3
  policy_target_stddev: float | None = 0.3
  state_stddev: float | None = 1.0
  # 0: no per-lifetime LSTM (no modulation, empty ``meta_rnn_state``).
  meta_hidden_size: int = 128
  meta_policy_channels: Sequence[int] = (16, 2)
  meta_embedding_size: Sequence[int] = (16,)
  meta_pred_embedding_size: Sequence[int] = (16, 1)
  # A ``MetaNetInputOption``, or the name of one in ``INPUT_OPTIONS`` (how
  # rule files give it).
  input_option: MetaNetInputOption | str = "disco103"
  # Lifetime inputs as TA-LPG's (Jackson et al. 2024): progress n / N and
  # log N, N in agent updates (``extra_from_rule/lifetime``, ``[T, B, 2]``).
  # Disco103's weights do not take them.
  lifetime_conditioning: bool = False

  def __post_init__(self):
    if isinstance(self.input_option, str) and (
        self.input_option not in INPUT_OPTIONS
    ):
      raise ValueError(
          f"input_option={self.input_option!r} is not one of "
          f"{sorted(INPUT_OPTIONS)}."
      )

  def resolved_input_option(self) -> MetaNetInputOption:
    """``input_option`` (built from its name), with the lifetime inputs when
    conditioning."""
    option = self.input_option
    if isinstance(option, str):
      option = INPUT_OPTIONS[option]()
    if not self.lifetime_conditioning:
      return option
    return dataclasses.replace(
        option,
        base=option.base + (_spec(f"extra_from_rule/{LIFETIME_KEY}"),),
    )


def _truncated_normal(stddev: float | None):
  return None if stddev is None else hk.initializers.TruncatedNormal(stddev)


def _lookup(inputs: Any, path: str) -> Any:
  x = inputs
  for i, key in enumerate(path.split("/")):
    if x is None:
      raise ValueError(
          f"Meta-network input {path!r}: "
          f"{'/'.join(path.split('/')[:i]) or 'inputs'} is None."
      )
    if hasattr(x, key) and not isinstance(x, dict):
      x = getattr(x, key)
    elif isinstance(x, dict) and key in x:
      x = x[key]
    else:
      raise KeyError(f"Meta-network input {path!r}: no field {key!r}.")
  return x


def _is_scalar_extra(source: str) -> bool:
  """Rule-computed per-state scalars (not network outputs) get a feature axis."""
  return source.startswith("extra_from_rule/") and "target_out" not in source


class PointwiseConv1D(hk.Module):
  """A width-1 ``hk.Conv1D`` (same parameters, init and name) computed as a
  matrix product over the channel axis of ``[..., C]`` inputs."""

  def __init__(self, output_channels: int):
    super().__init__(name="conv1_d")
    self._output_channels = output_channels

  def __call__(self, x: jax.Array) -> jax.Array:
    channels = x.shape[-1]
    w = hk.get_parameter(
        "w",
        [1, channels, self._output_channels],
        x.dtype,
        init=hk.initializers.TruncatedNormal(stddev=1.0 / channels**0.5),
    )
    b = hk.get_parameter("b", [self._output_channels], x.dtype, init=jnp.zeros)
    return jnp.dot(x, w[0]) + b


def _action_conv_net(channels: Sequence[int]) -> hk.Sequential:
  """1x1 convolutions over the action axis of ``[T, B, A, C]`` inputs; each
  layer also sees the action-average of its input."""

  def block(x, n_out):
    mean = jnp.broadcast_to(jnp.mean(x, axis=2, keepdims=True), x.shape)
    x = jnp.concatenate([x, mean], axis=-1)
    return jax.nn.relu(PointwiseConv1D(n_out)(x))

  return hk.Sequential([functools.partial(block, n_out=c) for c in channels])


def build_features(
    inputs: types.UpdateRuleInputs,
    option: MetaNetInputOption,
    y_net: Callable[[jax.Array], jax.Array],
    z_net: Callable[[jax.Array], jax.Array],
    action_net: Callable[[jax.Array], jax.Array],
    axis_name: str | None,
) -> tuple[jax.Array, jax.Array | None]:
  """The meta-network's features of a rollout.

  Returns:
    ``features [T, B, F]`` and the per-action embedding ``[T, B, A, C]`` (None
    without action-conditional inputs).
  """
  t, b = inputs.is_terminal.shape
  actions = inputs.actions[:-1]
  policy = jax.lax.stop_gradient(jax.nn.softmax(inputs.agent_out["logits"]))
  num_actions = policy.shape[-1]
  embeddings = {"y_net": y_net, "z_net": z_net}

  def featurise(specs, lead_shape):
    out = []
    for spec in specs:
      x = _lookup(inputs, spec.source)
      if _is_scalar_extra(spec.source):
        x = x[..., None]
      for name in spec.transforms:
        if name in embeddings:
          x = embeddings[name](x)
        else:
          x = input_transforms.TRANSFORMS[name](x, actions, policy, axis_name)
      if x.shape[: len(lead_shape)] != lead_shape:
        raise ValueError(
            f"Meta-network input {spec.source!r} with {spec.transforms} has "
            f"shape {x.shape}; expected leading dims {lead_shape}."
        )
      out.append(x.reshape(lead_shape + (-1,)))
    return out

  features = featurise(option.base, (t, b))
  per_action = None
  if option.action_conditional:
    act_features = featurise(option.action_conditional, (t, b, num_actions))
    act_features.append(
        jax.nn.one_hot(actions, num_actions, dtype=jnp.float32)[..., None]
    )
    per_action = action_net(jnp.concatenate(act_features, axis=-1))
    features += [
        jnp.mean(per_action, axis=2),
        ops.at_actions(per_action, actions),
    ]
  return jnp.concatenate(features, axis=-1), per_action


def _mlp(sizes: Sequence[int]) -> hk.nets.MLP:
  return hk.nets.MLP(tuple(sizes))


class MetaLSTM(hk.Module):
  """The per-lifetime LSTM: one step per rollout on batch-time averages."""

  def __init__(self, config: MetaNetConfig):
    super().__init__(name="meta_lstm")
    self._config = config

  def initial_state(self) -> hk.LSTMState:
    size = self._config.meta_hidden_size
    return hk.LSTMState(hidden=jnp.zeros([size]), cell=jnp.zeros([size]))

  def unroll(
      self,
      inputs: types.UpdateRuleInputs,
      meta_out: dict[str, Any],
      state: hk.LSTMState,
      axis_name: str | None,
  ) -> hk.LSTMState:
    c = self._config
    y_net = _mlp(c.meta_pred_embedding_size)
    z_net = _mlp(c.meta_pred_embedding_size)
    features, _ = build_features(
        inputs,
        c.resolved_input_option(),
        y_net,
        z_net,
        _action_conv_net(c.meta_policy_channels),
        axis_name,
    )
    x = jnp.concatenate(
        [
            features,
            meta_out["meta_input_emb"],
            y_net(jax.nn.softmax(meta_out["y"])),
        ],
        axis=-1,
    )
    x = _mlp(c.meta_embedding_size)(x)  # [T, B, E]
    x = jnp.mean(x, axis=(0, 1))
    if axis_name is not None:
      x = jax.lax.pmean(x, axis_name)
    _, new_state = hk.LSTM(c.meta_hidden_size)(x, state)
    return new_state


class DiscoMetaNet(hk.Module):
  """Rollout -> ``{pi [T,B,A], y [T,B,P], z [T,B,P], meta_input_emb [T,B,1]}``;
  no ``z`` unless ``predicts_z``."""

  def __init__(self, config: MetaNetConfig, predicts_z: bool = True):
    super().__init__(name="lstm")
    self._config = config
    self._predicts_z = predicts_z
    self._meta_lstm = MetaLSTM(config)

  def __call__(
      self, inputs: types.UpdateRuleInputs, axis_name: str | None = None
  ) -> dict[str, jax.Array]:
    c = self._config
    stateful = c.meta_hidden_size > 0
    if stateful:
      init_state = self._meta_lstm.initial_state()
      meta_rnn_state = hk.get_state(
          "meta_rnn_state",
          shape=jax.tree.map(lambda x: x.shape, init_state),
          dtype=jax.tree.map(lambda x: x.dtype, init_state),
          init=lambda *_: init_state,
      )
    batch = inputs.is_terminal.shape[1]
    num_actions = inputs.agent_out["logits"].shape[-1]

    features, per_action = build_features(
        inputs,
        c.resolved_input_option(),
        _mlp(c.embedding_size),
        _mlp(c.embedding_size),
        _action_conv_net(c.policy_channels),
        axis_name,
    )

    core = hk.ResetCore(hk.LSTM(c.hidden_size))
    x, _ = hk.dynamic_unroll(
        core,
        (features, inputs.should_reset_bwd[:-1]),
        core.initial_state(batch_size=batch),
        reverse=True,
    )  # [T, B, H]

    if stateful:
      modulation = hk.Linear(
          x.shape[-1], w_init=_truncated_normal(c.state_stddev)
      )(meta_rnn_state.hidden)
      x = x * modulation

    meta_input_emb = hk.Linear(1, w_init=_truncated_normal(c.output_stddev))(x)
    aux_init = _truncated_normal(c.aux_stddev)
    y_hat = hk.Linear(c.prediction_size, w_init=aux_init)(x)
    targets = dict(y=y_hat)
    if self._predicts_z:
      targets["z"] = hk.Linear(c.prediction_size, w_init=aux_init)(x)

    w = jnp.broadcast_to(
        x[:, :, None], x.shape[:2] + (num_actions,) + x.shape[2:]
    )
    if per_action is not None:
      w = jnp.concatenate([w, per_action], axis=-1)
    w = _action_conv_net(c.policy_target_channels)(w)
    pi_hat = hk.Linear(1, w_init=_truncated_normal(c.policy_target_stddev))(w)[
        ..., 0
    ]

    meta_out = dict(pi=pi_hat, **targets, meta_input_emb=meta_input_emb)
    if stateful:
      hk.set_state(
          "meta_rnn_state",
          self._meta_lstm.unroll(inputs, meta_out, meta_rnn_state, axis_name),
      )
    return meta_out


def make_meta_net(
    config: MetaNetConfig, predicts_z: bool = True
) -> hk.TransformedWithState:
  """``init(rng, inputs, axis_name)`` / ``apply(params, state, rng, inputs,
  axis_name)``; the state holds ``{'lstm': {'meta_rnn_state': LSTMState}}``."""

  def forward(inputs, axis_name=None):
    return DiscoMetaNet(config, predicts_z)(inputs, axis_name)

  return hk.transform_with_state(forward)
