"""``disco.ops``: the finiteness check and the tree-wide select that gate the
meta-update and agent restarts."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from disco import ops

NUM_LEAVES = 150


def _tree() -> dict[str, jax.Array]:
  return {
      f"w{i:03d}": jnp.full((2, 3), float(i), jnp.float32)
      for i in range(NUM_LEAVES)
  }


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("leaf", [0, NUM_LEAVES // 2, NUM_LEAVES - 1])
def test_all_finite_finds_one_bad_entry_among_many_leaves(bad, leaf):
  tree = _tree()
  check = jax.jit(ops.all_finite)
  assert bool(check(tree))
  name = f"w{leaf:03d}"
  broken = dict(tree, **{name: tree[name].at[1, 2].set(bad)})
  assert not bool(check(broken))
  assert tree[name][1, 2] == leaf  # the input is not changed


def test_all_finite_skips_integer_leaves_and_is_true_when_empty():
  ints = {
      "count": jnp.array([2**31 - 1], jnp.int32),
      "key": jax.random.key_data(jax.random.PRNGKey(0)),
  }
  assert bool(ops.all_finite(ints))
  assert bool(ops.all_finite({"count": jnp.array(3)}))
  assert bool(ops.all_finite({}))
  assert not bool(ops.all_finite((jnp.array(1), jnp.array(np.nan))))


def test_all_finite_per_row_under_vmap():
  rows = {"a": jnp.ones((4, 3)), "b": jnp.ones((4,))}
  rows["a"] = rows["a"].at[1, 0].set(np.nan)
  rows["b"] = rows["b"].at[3].set(np.inf)
  np.testing.assert_array_equal(
      jax.vmap(ops.all_finite)(rows), [True, False, True, False]
  )


def test_tree_where_scalar_and_row_predicates():
  on = {"x": jnp.arange(6.0).reshape(3, 2), "n": jnp.arange(3)}
  off = jax.tree.map(lambda a: -a - 1, on)
  both = jax.tree.map(np.asarray, ops.tree_where(jnp.array(True), on, off))
  np.testing.assert_array_equal(both["x"], on["x"])
  rows = ops.tree_where(jnp.array([True, False, True]), on, off)
  np.testing.assert_array_equal(
      rows["x"], [[0.0, 1.0], [-3.0, -4.0], [4.0, 5.0]]
  )
  np.testing.assert_array_equal(rows["n"], [0, -2, 2])


def test_select_on_the_check_compiles_to_a_program_linear_in_leaves():
  """The check feeding a select of every leaf (the meta-update's skip, the
  agents' restarts) stays a small program. ``jnp.all`` over the stacked
  checks made XLA copy a chain of ``and``s into every select's fusion:
  instructions grew with leaves x leaves (about 300 per leaf here)."""

  def skip_if_not_finite(new, old):
    return ops.tree_where(ops.all_finite(new), new, old)

  tree = _tree()
  hlo = jax.jit(skip_if_not_finite).lower(tree, tree).compile().as_text()
  per_leaf = hlo.count("\n") / NUM_LEAVES
  assert per_leaf < 60, per_leaf


@pytest.mark.parametrize("name", ["signed_hyperbolic", "signed_logp1"])
def test_signed_transforms_match_rlax_bit_for_bit(name):
  import rlax  # pylint: disable=g-import-not-at-top

  x = jnp.asarray(
      np.concatenate(
          [
              np.random.default_rng(0).normal(scale=30.0, size=1000),
              [0.0, -0.0, 1e-8, -1e-8, 1e30, -1e30],
          ]
      ),
      jnp.float32,
  )
  np.testing.assert_array_equal(
      jax.jit(getattr(ops, name))(x), jax.jit(getattr(rlax, name))(x)
  )
