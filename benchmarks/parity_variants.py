"""Parity fixtures with other inputs, their outputs from this checkout's code.

A rewrite that is exact in real arithmetic (another order of the same sums,
a shared matrix product) changes only the rounding. To check that, write
variants of the golden fixtures with this checkout's code BEFORE the
rewrite, then check the rewritten code against them:

  python benchmarks/parity_variants.py --out /tmp/variants      # before
  python -m disco.parity /tmp/variants/*.npz                    # after

Each variant copies a fixture (the learner-step fixtures of ``grads/`` and
the meta-gradient fixture), perturbs its parameters (every weight times
``1 + scale * N(0, 1)``) and permutes its trajectories (the batch axis), and
stores the outputs that ``disco.parity`` computes for it, gradients
included, so that the rounding-robust rule applies. Nothing is written
inside the repository.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from disco import weights
from disco.parity import fixtures
from disco.parity import runners

BASES = (
    "grads/disco_learner_step_s0.npz",
    "grads/actor_critic_learner_step_s0.npz",
    "disco_meta_gradient_s0.npz",
)
# Parameters to perturb, by key prefix.
PARAMS = (
    "inputs::params::",
    "inputs::meta_state::target_params::",
    "inputs::learner_params::",
    "inputs::value_params::",
    "inputs::meta_params::",
)
# Trajectories, by key prefix, and their batch axis.
TRAJECTORIES = {
    "inputs::train_rollouts::": 2,
    "inputs::valid_rollout::": 1,
    "inputs::": 1,  # the learner-step rollouts ([T+1, B, ...])
}
LEARNER_STEP_ROLLOUT = (
    "observations",
    "actions",
    "rewards",
    "discounts",
    "behaviour_logits",
    "behaviour_agent_outs",
)


def _batch_axis(key: str) -> int | None:
  for prefix, axis in TRAJECTORIES.items():
    if not key.startswith(prefix):
      continue
    if prefix != "inputs::":
      return axis
    name = key[len(prefix) :].split("::")[0]
    return axis if name in LEARNER_STEP_ROLLOUT else None
  return None


def variant(
    fx: dict[str, np.ndarray], seed: int, scale: float
) -> dict[str, np.ndarray]:
  """Inputs of a variant of ``fx`` (its outputs dropped)."""
  rng = np.random.default_rng(seed)
  batch = None
  out = {}
  for key, value in fx.items():
    if key.startswith("outputs::"):
      continue
    if key.startswith(PARAMS) and value.dtype.kind == "f":
      noise = rng.normal(size=value.shape).astype(value.dtype)
      value = value * (1 + scale * noise)
    axis = _batch_axis(key)
    if axis is not None:
      if batch is None:
        batch = rng.permutation(value.shape[axis])
      value = np.take(value, batch, axis=axis)
    out[key] = value
  return out


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--fixtures", default="../shared/fixtures")
  parser.add_argument("--weights", default=None, help="Disco103 file")
  parser.add_argument("--out", default="/tmp/parity_variants")
  parser.add_argument("--count", type=int, default=6, help="per fixture")
  parser.add_argument(
      "--scale", type=float, default=0.1, help="relative parameter noise"
  )
  args = parser.parse_args(argv)
  out_dir = Path(args.out)
  out_dir.mkdir(parents=True, exist_ok=True)
  for base in BASES:
    path = Path(args.fixtures) / base
    fx = fixtures.load_fixture(path)
    kind = str(fx["kind"])
    meta_params = None
    if kind in ("disco_meta_net", "disco_learner_step"):
      meta_params = weights.load_disco103(args.weights)
    for i in range(args.count):
      new = variant(fx, seed=1000 * BASES.index(base) + i, scale=args.scale)
      ours, _ = runners.KINDS[kind](new, meta_params)
      for key in fx:
        if key.startswith("outputs::"):
          new[key] = np.asarray(ours[key[len("outputs") :]])
      target = out_dir / f"{path.stem}_v{i}.npz"
      np.savez(target, **new)
      print(target)


if __name__ == "__main__":
  main()
