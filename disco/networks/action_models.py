"""Action-conditional model: per-action predictions from one LSTM step.

A root state (``cell = Linear(embedding)``, ``hidden = tanh(cell)``) takes
one LSTM step per action (input: its one-hot) and MLP heads read each
hidden state: outputs ``[B, A, *spec.shape]``. The gates are ``hk.LSTM``'s
with its parameters, computed as ``(h @ W_h + b) + W_a[a]``. Parameters, in
the caller's haiku scope: ``<agent>/linear`` (root),
``<agent>/action_cond/linear`` (LSTM), ``<agent>/mlp``, ``mlp_1``, ...
(heads, in output-spec order).

A continuous policy instead uses action-input heads
(``action_input_outputs``, parameters
``<agent>/action_input_<name>/~/linear_i``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np

from disco import policies
from disco import types


def root_state(embedding: jax.Array, lstm_size: int) -> hk.LSTMState:
  """``[B, ...]`` embedding -> LSTM state with ``[B, lstm_size]`` leaves."""
  cell = hk.Linear(lstm_size)(hk.Flatten()(embedding))
  return hk.LSTMState(hidden=jnp.tanh(cell), cell=cell)


class SharedRoot(NamedTuple):
  """Shared by every action's LSTM step: ``h @ W_h + b`` ``[B, 4H]`` and the
  root cell ``[B, H]``."""

  projection: jax.Array
  cell: jax.Array


class _GateParams(hk.Module):
  """``hk.LSTM(H, name="action_cond")``'s gate parameters (same names, shapes
  and init): ``w [A + H, 4H]``, action rows first, and ``b [4H]``."""

  def __init__(self, lstm_size: int, num_actions: int):
    super().__init__(name="action_cond")
    self._lstm_size = lstm_size
    self._num_actions = num_actions

  def __call__(self, dtype) -> tuple[jax.Array, jax.Array]:
    size = self._num_actions + self._lstm_size
    with hk.name_scope("linear"):
      w = hk.get_parameter(
          "w",
          [size, 4 * self._lstm_size],
          dtype,
          init=hk.initializers.TruncatedNormal(1.0 / np.sqrt(size)),
      )
      b = hk.get_parameter("b", [4 * self._lstm_size], dtype, init=jnp.zeros)
    return w, b


class ActionModel:
  """The action-conditional LSTM and its heads (build inside a haiku
  transform).

  Args:
    out_spec: name -> spec of one action's prediction (heads in this order).
    lstm_size: ``H``.
    head_hiddens: hidden sizes of each head MLP.
    num_actions: ``A``.
  """

  def __init__(
      self,
      out_spec: Mapping[str, types.ArraySpec],
      lstm_size: int,
      head_hiddens: Sequence[int],
      num_actions: int,
  ):
    self.num_actions = num_actions
    self._gate_params = _GateParams(lstm_size, num_actions)
    self._heads = {
        key: (
            hk.nets.MLP(tuple(head_hiddens) + (int(np.prod(s.shape)),)),
            tuple(s.shape),
        )
        for key, s in out_spec.items()
    }

  def share(self, root: hk.LSTMState) -> SharedRoot:
    """The per-state part of the LSTM step, shared by all actions."""
    w, b = self._gate_params(root.hidden.dtype)
    projection = jnp.dot(root.hidden, w[self.num_actions :]) + b
    return SharedRoot(projection=projection, cell=root.cell)

  def step(self, shared: SharedRoot) -> jax.Array:
    """Hidden states after one step per action: ``[B, A, H]``."""
    w, _ = self._gate_params(shared.projection.dtype)
    gates = shared.projection[:, None] + w[None, : self.num_actions]
    i, g, f, o = jnp.split(gates, 4, axis=-1)
    cell = jax.nn.sigmoid(f + 1) * shared.cell[:, None] + jax.nn.sigmoid(
        i
    ) * jnp.tanh(g)
    return jax.nn.sigmoid(o) * jnp.tanh(cell)

  def heads(self, hidden: jax.Array) -> dict[str, jax.Array]:
    """``[B, K, H]`` hidden states -> name -> ``[B, K, *spec.shape]``."""
    batch, k = hidden.shape[:2]
    rows = hidden.reshape((batch * k, -1))
    return {
        key: head(rows).reshape((batch, k) + shape)
        for key, (head, shape) in self._heads.items()
    }


def make_action_model(
    out_spec: Mapping[str, types.ArraySpec],
    lstm_size: int,
    head_hiddens: Sequence[int],
    num_actions: int,
) -> ActionModel:
  """An ``ActionModel``; create it once so every call shares its parameters."""
  return ActionModel(out_spec, lstm_size, head_hiddens, num_actions)


def _stop_gradient_getter(next_getter, value, context):
  del context
  return next_getter(jax.lax.stop_gradient(value))


def _taken_columns(actions: jax.Array, num_actions: int) -> jax.Array:
  """``[B, A]``: column ``k`` holds action ``(actions[b] + k) % A`` (column 0:
  the taken one)."""
  return (actions[:, None] + jnp.arange(num_actions, dtype=actions.dtype)) % (
      num_actions
  )


def _gather(x: jax.Array, columns: jax.Array) -> jax.Array:
  """``x[b, columns[b, k]]``: ``[B, A, ...]``, ``[B, K]`` -> ``[B, K, ...]``."""
  index = columns.reshape(columns.shape + (1,) * (x.ndim - 2))
  return jnp.take_along_axis(x, index, axis=1)


def per_action_outputs(
    model: ActionModel,
    root: hk.LSTMState,
    grad_actions: jax.Array | None = None,
) -> dict[str, jax.Array]:
  """Steps the model once per action from ``root`` (``[B, H]`` leaves).

  Args:
    model: the action model.
    root: the root state.
    grad_actions: ``[B]`` int, optional: outputs then carry gradients only at
      these actions (values unchanged).

  Returns:
    name -> ``[B, A, *spec.shape]``.
  """
  hidden = model.step(model.share(root))  # [B, A, H]
  if grad_actions is None:
    return model.heads(hidden)
  num_actions = model.num_actions
  order = _taken_columns(grad_actions, num_actions)
  taken = model.heads(_gather(hidden, order[:, :1]))
  with hk.custom_getter(_stop_gradient_getter):
    others = model.heads(jax.lax.stop_gradient(_gather(hidden, order[:, 1:])))
  # Back to action order: action j sits in column (j - grad_actions[b]) % A.
  back = (jnp.arange(num_actions) - grad_actions[:, None]) % num_actions
  return jax.tree.map(
      lambda t, o: _gather(jnp.concatenate([t, o], axis=1), back),
      taken,
      others,
  )


def per_action_outputs_and_taken(
    model: ActionModel, root: hk.LSTMState, actions: jax.Array
) -> tuple[dict[str, jax.Array], dict[str, jax.Array]]:
  """Every action's outputs twice: with gradients, and (as
  ``per_action_outputs(model, root, actions)``) with gradients only at the
  ``[B]`` ``actions``.

  Returns:
    ``(every, at_taken)``, both name -> ``[B, A, *spec.shape]``.
  """
  hidden = model.step(model.share(root))  # [B, A, H]
  every = model.heads(hidden)
  taken = model.heads(_gather(hidden, actions[:, None]))  # [B, 1, ...]
  is_taken = jax.nn.one_hot(actions, model.num_actions, dtype=bool)

  def at_taken(e, t):
    mask = is_taken.reshape(is_taken.shape + (1,) * (e.ndim - 2))
    return jnp.where(mask, t, jax.lax.stop_gradient(e))

  return every, jax.tree.map(at_taken, every, taken)


def scaled_actions(policy: policies.Gaussian, actions: jax.Array) -> jax.Array:
  """``[..., D]`` continuous actions as action-input heads read them: clipped
  to the policy's bounds and rescaled to ``[-1, 1]`` where both bounds are
  finite."""
  low = np.asarray(policy.minimum, np.float64)
  high = np.asarray(policy.maximum, np.float64)
  finite = np.isfinite(low) & np.isfinite(high) & (high > low)
  low, high = np.where(finite, low, -1.0), np.where(finite, high, 1.0)
  centre = ((high + low) / 2.0).astype(np.float32)
  half = ((high - low) / 2.0).astype(np.float32)
  actions = actions.astype(jnp.float32)
  scaled = jnp.clip((actions - centre) / half, -1.0, 1.0)
  return jnp.where(finite, scaled, actions)


def action_input_outputs(
    out_spec: Mapping[str, types.ArraySpec],
    head_hiddens: Sequence[int],
    policy: policies.Gaussian,
    embedding: jax.Array,
    actions: jax.Array | None,
) -> dict[str, jax.Array]:
  """Per-action outputs of a continuous policy at given actions (inside a
  haiku transform): an MLP per output on the flattened embedding and the
  ``scaled_actions``.

  Args:
    out_spec: name -> spec of one (state, action) prediction.
    head_hiddens: hidden sizes of each head.
    policy: the continuous policy.
    embedding: ``[B, ...]`` torso output.
    actions: ``[B, D]``, ``[B, K, D]``, or None (parameters only).

  Returns:
    name -> ``[B, *spec.shape]`` or ``[B, K, *spec.shape]``; ``{}`` without
    ``actions``.
  """
  embedding = hk.Flatten()(embedding)
  batch = embedding.shape[0]
  query = actions
  if query is None:  # build the heads on an empty batch of actions
    query = jnp.zeros((batch, 0, policy.action_size), embedding.dtype)
  one = query.ndim == 2
  if one:
    query = query[:, None]
  k = query.shape[1]
  x = jnp.concatenate(
      [
          jnp.broadcast_to(embedding[:, None], (batch, k, embedding.shape[1])),
          scaled_actions(policy, query).astype(embedding.dtype),
      ],
      axis=-1,
  ).reshape((batch * k, embedding.shape[1] + policy.action_size))
  outputs = {}
  for key, spec in out_spec.items():
    shape = tuple(spec.shape)
    head = hk.nets.MLP(
        tuple(head_hiddens) + (int(np.prod(shape)),),
        name=f"action_input_{key}",
    )
    out = head(x).reshape((batch, k) + shape)
    outputs[key] = out[:, 0] if one else out
  return {} if actions is None else outputs
