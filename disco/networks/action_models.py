"""Action-conditional model: per-action predictions from one LSTM step.

From the torso embedding, a root state is built (``cell = Linear(embedding)``,
``hidden = tanh(cell)``); one LSTM step is taken for every action (the input is
the action's one-hot vector), and MLP heads read each resulting hidden state.
The outputs therefore carry an action axis: ``[B, A, *spec.shape]``.

The modules are created in the caller's haiku scope (this is not a module of
its own), so parameter names are ``<agent>/linear`` (root),
``<agent>/action_cond/linear`` (LSTM) and ``<agent>/mlp``, ``mlp_1``, ... for
the heads, in the order of the output spec.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np

from disco import types

# (state with [N, H] leaves, one-hot actions [N, A]) -> name -> [N, *shape].
ActionModel = Callable[[hk.LSTMState, jax.Array], dict[str, jax.Array]]


def root_state(embedding: jax.Array, lstm_size: int) -> hk.LSTMState:
  """``[B, ...]`` embedding -> LSTM state with ``[B, lstm_size]`` leaves."""
  cell = hk.Linear(lstm_size)(hk.Flatten()(embedding))
  return hk.LSTMState(hidden=jnp.tanh(cell), cell=cell)


def make_action_model(
    out_spec: Mapping[str, types.ArraySpec],
    lstm_size: int,
    head_hiddens: Sequence[int],
) -> ActionModel:
  """Creates the LSTM and the heads (once, so that every call of the returned
  function shares their parameters): ``(state, one-hot actions) -> outputs``.

  Args:
    out_spec: name -> spec of one action's prediction (heads are created in
      this mapping's order).
    lstm_size: ``H``.
    head_hiddens: hidden sizes of each head MLP.
  """
  lstm = hk.LSTM(lstm_size, name="action_cond")
  heads = {
      key: (
          hk.nets.MLP(tuple(head_hiddens) + (int(np.prod(s.shape)),)),
          tuple(s.shape),
      )
      for key, s in out_spec.items()
  }

  def model(state: hk.LSTMState, actions: jax.Array) -> dict[str, jax.Array]:
    hidden, _ = lstm(actions, state)  # [N, H]
    return {
        key: head(hidden).reshape((hidden.shape[0],) + shape)
        for key, (head, shape) in heads.items()
    }

  return model


def per_action_outputs(
    model: ActionModel, root: hk.LSTMState, num_actions: int
) -> dict[str, jax.Array]:
  """Steps the model once per action from ``root`` (``[B, H]`` leaves).

  Returns:
    name -> ``[B, A, *spec.shape]``.
  """
  batch = root.cell.shape[0]
  actions = jnp.tile(jnp.eye(num_actions, dtype=root.cell.dtype), [batch, 1])
  state = jax.tree.map(lambda x: jnp.repeat(x, num_actions, axis=0), root)
  return jax.tree.map(
      lambda x: x.reshape((batch, num_actions) + x.shape[1:]),
      model(state, actions),
  )


def _stop_gradient_getter(next_getter, value, context):
  del context
  return next_getter(jax.lax.stop_gradient(value))


@jax.custom_vjp
def _with_gradients_of_taken(
    every: jax.Array, taken: jax.Array, one_hot: jax.Array
) -> jax.Array:
  """Returns ``every`` ``[N, A, ...]``; its cotangent goes to ``taken``
  ``[N, ...]`` (read at the one-hot actions ``[N, A]``)."""
  del taken, one_hot
  return every


def _with_gradients_of_taken_fwd(every, taken, one_hot):
  del taken
  return every, one_hot


def _with_gradients_of_taken_bwd(one_hot, cotangent):
  mask = one_hot.reshape(one_hot.shape + (1,) * (cotangent.ndim - 2))
  taken_ct = jnp.sum(jnp.where(mask > 0, cotangent, 0.0), axis=1)
  return jnp.zeros_like(cotangent), taken_ct, jnp.zeros_like(one_hot)


_with_gradients_of_taken.defvjp(
    _with_gradients_of_taken_fwd, _with_gradients_of_taken_bwd
)


def per_action_outputs_grad_at(
    model: ActionModel, root: hk.LSTMState, num_actions: int, actions: jax.Array
) -> dict[str, jax.Array]:
  """``per_action_outputs`` whose gradients flow only through the entries of
  the given ``[B]`` actions.

  The values are exactly those of ``per_action_outputs``. The gradient is the
  same as well for any function that reads only the entries ``[b,
  actions[b]]``; it is computed by one extra model step on ``[B]`` rows
  instead of a backward pass over all ``[B * A]`` rows.
  """
  with hk.custom_getter(_stop_gradient_getter):
    every = per_action_outputs(model, jax.lax.stop_gradient(root), num_actions)
  one_hot = jax.nn.one_hot(actions, num_actions, dtype=root.cell.dtype)
  taken = model(root, one_hot)
  return jax.tree.map(
      lambda e, t: _with_gradients_of_taken(e, t, one_hot), every, taken
  )
