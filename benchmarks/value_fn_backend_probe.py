r"""Probes the meta-training value function's GPU difference on the CPU (issue 50).

  python benchmarks/value_fn_backend_probe.py [--probes order,tf32,tf32_all]

On an H200 the four-meta-step fixture (``tests/data/meta_train_steps_s0.npz``)
failed in the separately trained value function alone, from meta-step 0
(relative errors 1e-2 to 7e-2 on its parameters and Adam moments), while the
meta-gradients, agents and everything else matched. This script runs the same
fixture check on the CPU with one thing a GPU may do differently applied to
the value function's update only (``disco.meta.value_function
.ValueFunction.update``), and prints which comparisons fail and by how much:

* ``order``: the rollout's environments (the batch axis) permuted, so every
  reduction over the batch sums in another order (exact in arithmetic);
* ``tf32``: the value network's matrix products with their inputs rounded to
  TF32 (10 mantissa bits), as NVIDIA GPUs compute float32 products at JAX's
  default precision (``lax.reduce_precision``; the products' accumulation
  stays float32);
* ``tf32_all``: the same for every matrix product of the meta-step (agents and
  meta-network too), for contrast.

``none`` runs the check unchanged. A probe that reproduces the GPU's pattern
(value function only, 1e-2 scale, from meta-step 0) names the likely cause.
"""

from __future__ import annotations

import argparse
import contextlib
import types as pytypes

import haiku._src.basic as haiku_basic
import jax
import jax.numpy as jnp
import numpy as np

from disco import parity
from disco.meta import value_function

FIXTURE = "tests/data/meta_train_steps_s0.npz"


def _tf32(x):
  return jax.lax.reduce_precision(x, exponent_bits=8, mantissa_bits=10)


def _tf32_dot(a, b, precision=None):
  return jnp.dot(_tf32(a), _tf32(b), precision=precision)


@contextlib.contextmanager
def tf32_linear_layers():
  """haiku ``Linear`` layers traced inside compute TF32-rounded products."""
  original = haiku_basic.jnp
  shim = pytypes.SimpleNamespace(**{k: getattr(jnp, k) for k in dir(jnp)})
  shim.dot = _tf32_dot
  haiku_basic.jnp = shim
  try:
    yield
  finally:
    haiku_basic.jnp = original


def run(probe: str) -> None:
  update = value_function.ValueFunction.update

  def permuted(self, state, rollout, pi_logits):
    perm = jnp.asarray(np.random.default_rng(0).permutation(pi_logits.shape[1]))
    take = lambda x: jnp.take(x, perm, axis=1)
    return update(self, state, jax.tree.map(take, rollout), take(pi_logits))

  def tf32(self, state, rollout, pi_logits):
    with tf32_linear_layers():
      return update(self, state, rollout, pi_logits)

  patched = {"order": permuted, "tf32": tf32}.get(probe)
  outer = (
      tf32_linear_layers() if probe == "tf32_all" else contextlib.nullcontext()
  )
  if patched is not None:
    value_function.ValueFunction.update = patched
  try:
    with outer:
      report = parity.check_fixture(FIXTURE)
  finally:
    value_function.ValueFunction.update = update
  bad = sorted(
      ((c.key, c.error) for c in report.comparisons if not c.ok),
      key=lambda kv: -kv[1],
  )
  value_fn = [k for k, _ in bad if "value" in k]
  print(
      f"| {probe} | {'pass' if report.ok else 'FAIL'} | "
      f"{len(bad)} of {len(report.comparisons)} | {len(value_fn)} | "
      f"{bad[0][0] + f' {bad[0][1]:.2e}' if bad else '-'} |",
      flush=True,
  )


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--probes", default="none,order,tf32,tf32_all")
  args = parser.parse_args()
  print(
      "| probe | fixture | failing comparisons | of them the value "
      "function's | worst |\n|---|---|---|---|---|"
  )
  for probe in args.probes.split(","):
    run(probe)


if __name__ == "__main__":
  main()
