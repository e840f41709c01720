"""Action-conditional model: per-action predictions from one LSTM step.

From the torso embedding, a root state is built (``cell = Linear(embedding)``,
``hidden = tanh(cell)``); one LSTM step is taken for every action (the input is
the action's one-hot vector), and MLP heads read each resulting hidden state.
The outputs therefore carry an action axis: ``[B, A, *spec.shape]``.

The LSTM step's gates are ``[one_hot(a), h] @ W + b`` (``W`` stacks ``W_a``
``[A, 4H]`` over ``W_h`` ``[H, 4H]``), computed as ``(h @ W_h + b) + W_a[a]``:
the hidden state's projection is computed once per state and shared by all
actions, and the action's part is a row of ``W_a``. This is the same function
(up to float rounding) with the parameters of ``hk.LSTM``, at about ``1/A`` of
the cost.

The modules are created in the caller's haiku scope (this is not a module of
its own), so parameter names are ``<agent>/linear`` (root),
``<agent>/action_cond/linear`` (LSTM) and ``<agent>/mlp``, ``mlp_1``, ... for
the heads, in the order of the output spec.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import NamedTuple

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np

from disco import types


def root_state(embedding: jax.Array, lstm_size: int) -> hk.LSTMState:
  """``[B, ...]`` embedding -> LSTM state with ``[B, lstm_size]`` leaves."""
  cell = hk.Linear(lstm_size)(hk.Flatten()(embedding))
  return hk.LSTMState(hidden=jnp.tanh(cell), cell=cell)


class SharedRoot(NamedTuple):
  """What every action's LSTM step shares: ``h @ W_h + b`` ``[B, 4H]`` and
  the root cell ``[B, H]``."""

  projection: jax.Array
  cell: jax.Array


class _GateParams(hk.Module):
  """The parameters of ``hk.LSTM(H, name="action_cond")``'s gate layer
  (same names, shapes and initialisation): ``w [A + H, 4H]``, action rows
  first, and ``b [4H]``."""

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
  """The action-conditional LSTM and its heads (haiku modules; build it
  inside a transformed function).

  Args:
    out_spec: name -> spec of one action's prediction (heads are created in
      this mapping's order).
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
    self.keys = tuple(out_spec)
    self._gate_params = _GateParams(lstm_size, num_actions)
    self._heads = {
        key: (
            hk.nets.MLP(tuple(head_hiddens) + (int(np.prod(s.shape)),)),
            tuple(s.shape),
        )
        for key, s in out_spec.items()
    }

  def share(self, root: hk.LSTMState) -> SharedRoot:
    """The per-state part of the LSTM step (once for all actions)."""
    w, b = self._gate_params(root.hidden.dtype)
    projection = jnp.dot(root.hidden, w[self.num_actions :]) + b
    return SharedRoot(projection=projection, cell=root.cell)

  def step(self, shared: SharedRoot) -> jax.Array:
    """The LSTM's hidden state after one step per action: ``[B, A, H]``."""
    w, _ = self._gate_params(shared.projection.dtype)
    gates = shared.projection[:, None] + w[None, : self.num_actions]
    i, g, f, o = jnp.split(gates, 4, axis=-1)
    cell = jax.nn.sigmoid(f + 1) * shared.cell[:, None] + jax.nn.sigmoid(
        i
    ) * jnp.tanh(g)
    return jax.nn.sigmoid(o) * jnp.tanh(cell)

  def heads(
      self, hidden: jax.Array, keys: Collection[str] | None = None
  ) -> dict[str, jax.Array]:
    """The heads named ``keys`` (default: all) on ``[B, K, H]`` hidden
    states: name -> ``[B, K, *spec.shape]``."""
    batch, k = hidden.shape[:2]
    rows = hidden.reshape((batch * k, -1))
    return {
        key: head(rows).reshape((batch, k) + shape)
        for key, (head, shape) in self._heads.items()
        if keys is None or key in keys
    }


def make_action_model(
    out_spec: Mapping[str, types.ArraySpec],
    lstm_size: int,
    head_hiddens: Sequence[int],
    num_actions: int,
) -> ActionModel:
  """Creates the LSTM and the heads (once, so that every call shares their
  parameters); see ``ActionModel``."""
  return ActionModel(out_spec, lstm_size, head_hiddens, num_actions)


def _stop_gradient_getter(next_getter, value, context):
  del context
  return next_getter(jax.lax.stop_gradient(value))


def per_action_outputs(
    model: ActionModel,
    root: hk.LSTMState,
    grad_actions: jax.Array | None = None,
    taken_only: Collection[str] | None = None,
) -> dict[str, jax.Array]:
  """Steps the model once per action from ``root`` (``[B, H]`` leaves).

  Args:
    model: the action model.
    root: the root state.
    grad_actions: ``[B]`` int, optional: the outputs named in ``taken_only``
      (default: all) then carry gradients only at these actions. Their
      values are unchanged, and so is the gradient of any function that reads
      them with gradients only at these actions; their heads' backward pass
      covers ``B`` rows instead of ``B * A``.
    taken_only: see ``grad_actions``.

  Returns:
    name -> ``[B, A, *spec.shape]``.
  """
  hidden = model.step(model.share(root))  # [B, A, H]
  if grad_actions is None:
    return model.heads(hidden)
  split = set(model.keys if taken_only is None else taken_only)
  outputs = model.heads(hidden, [k for k in model.keys if k not in split])
  if not split:
    return outputs
  # Column k holds action (grad_actions[b] + k) % A; column 0 the taken one.
  num_actions = model.num_actions
  offsets = jnp.arange(num_actions, dtype=grad_actions.dtype)
  order = (grad_actions[:, None] + offsets) % num_actions  # [B, A]
  gather = lambda x, i: jnp.take_along_axis(x, i[..., None], axis=1)
  taken = model.heads(gather(hidden, order[:, :1]), split)
  with hk.custom_getter(_stop_gradient_getter):
    others = model.heads(
        jax.lax.stop_gradient(gather(hidden, order[:, 1:])), split
    )
  # Back to action order: action j sits in column (j - grad_actions[b]) % A.
  columns = (offsets - grad_actions[:, None]) % num_actions  # [B, A]

  def reorder(t, o):
    stacked = jnp.concatenate([t, o], axis=1)
    index = columns.reshape(columns.shape + (1,) * (stacked.ndim - 2))
    return jnp.take_along_axis(stacked, index, axis=1)

  outputs.update(jax.tree.map(reorder, taken, others))
  return outputs
