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

from typing import Mapping, Sequence

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np

from disco import types


def root_state(embedding: jax.Array, lstm_size: int) -> hk.LSTMState:
  """``[B, ...]`` embedding -> LSTM state with ``[B, lstm_size]`` leaves."""
  cell = hk.Linear(lstm_size)(hk.Flatten()(embedding))
  return hk.LSTMState(hidden=jnp.tanh(cell), cell=cell)


def per_action_outputs(
    root: hk.LSTMState,
    num_actions: int,
    out_spec: Mapping[str, types.ArraySpec],
    lstm_size: int,
    head_hiddens: Sequence[int],
) -> dict[str, jax.Array]:
  """Steps the LSTM once per action from ``root`` and applies the heads.

  Args:
    root: state with ``[B, H]`` leaves.
    num_actions: ``A``.
    out_spec: name -> spec of one action's prediction (heads are created in
      this mapping's order).
    lstm_size: ``H``.
    head_hiddens: hidden sizes of each head MLP.

  Returns:
    name -> ``[B, A, *spec.shape]``.
  """
  batch = root.cell.shape[0]
  actions = jnp.tile(jnp.eye(num_actions, dtype=root.cell.dtype), [batch, 1])
  state = jax.tree.map(lambda x: jnp.repeat(x, num_actions, axis=0), root)
  hidden, _ = hk.LSTM(lstm_size, name="action_cond")(actions, state)  # [BA, H]
  outputs = {}
  for key, spec in out_spec.items():
    size = int(np.prod(spec.shape))
    out = hk.nets.MLP(tuple(head_hiddens) + (size,))(hidden)
    outputs[key] = out.reshape((batch, num_actions) + tuple(spec.shape))
  return outputs
