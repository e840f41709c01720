"""Parity checks against fixtures computed by the published implementation.

Usage::

    python -m disco.parity FIXTURE.npz [FIXTURE.npz ...] [--weights PATH]

For each fixture it prints its kind, the rule its updated parameters were
checked by, the worst relative error and PASS/FAIL, and exits non-zero on any
failure or unsupported fixture kind. Tolerances (from the fixtures' README),
for every fixture array ``b`` and ours ``a``:

* gradients (``grads::*``: of the learner step's loss with respect to the
  agent parameters, before the optimiser; ``meta_grads::*``), per array:
  ``||a-b|| <= 1e-3 ||b|| + 1e-7``;
* parameters after an update (``params``, ``learner_params``,
  ``value_params``), in a fixture that carries gradients: at least 99% of
  elements within ``1e-4 (1 + max|b|)`` and every element within
  ``2 N lr max_abs_update + 1e-4 (1 + max|b|)``, the most that ``N``
  clipped Adam steps of learning rate ``lr`` can move a weight apart (a
  gradient within rounding of zero may flip the sign of Adam's first,
  normalised step; a wrong gradient fails the bound above instead);
* parameters after an update in a fixture without gradients: 99.9% of
  elements within ``1e-4 (1 + max|b|)``, all within ``1e-2 (1 + max|b|)``;
* everything else (logs, rule state, meta-network outputs):
  ``max|a-b| <= 1e-4 (1 + max|b|)``.

A learner-step fixture without gradients is checked with those of its copy
in a ``grads/`` folder beside it (same name), when that copy holds the same
inputs and outputs.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
from pathlib import Path

import jax

from disco import weights as weights_lib
from disco.meta import meta_gradient
from disco.parity import fixtures

# The names the parity checks have always had (benchmarks and tests use
# them).
from disco.parity.comparisons import Comparison as Comparison
from disco.parity.comparisons import compare_array as compare_array
from disco.parity.comparisons import compare_gradient as compare_gradient
from disco.parity.comparisons import compare_outputs as compare_outputs
from disco.parity.fixtures import GRADS_DIR as GRADS_DIR
from disco.parity.fixtures import SEP as SEP
from disco.parity.fixtures import flatten_arrays as flatten_arrays
from disco.parity.fixtures import has_gradients as has_gradients
from disco.parity.fixtures import load_fixture as load_fixture
from disco.parity.fixtures import (
    with_companion_gradients as with_companion_gradients,
)
from disco.parity.meta_steps import META_STEPS_KIND as META_STEPS_KIND
from disco.parity.meta_steps import (
    check_meta_train_steps as check_meta_train_steps,
)
from disco.parity.meta_steps import (
    meta_train_steps_fixture as meta_train_steps_fixture,
)
from disco.parity.runners import KINDS as KINDS


@dataclasses.dataclass
class Report:
  path: str
  kind: str
  comparisons: list[Comparison]
  error: str | None = None  # set when the fixture could not be checked
  # The rule updated parameters were checked by: "gradients" (the
  # rounding-robust one), "99.9%", or "-" (none in the fixture).
  rule: str = "-"

  @property
  def ok(self) -> bool:
    return self.error is None and all(c.ok for c in self.comparisons)

  @property
  def worst(self) -> Comparison | None:
    return max(self.comparisons, key=lambda c: c.error, default=None)


# The precision of every parity computation (JAX's name for float32 products
# computed in float32).
MATMUL_PRECISION = "highest"


def check_fixture(
    path: str | Path,
    weights_path: str | Path | None = None,
    meta_gradient_config: meta_gradient.OuterLossConfig | None = None,
) -> Report:
  """Runs our implementation on a fixture's inputs and compares outputs.

  ``meta_gradient_config`` overrides the (default) settings of the
  meta-gradient fixtures' inner loop, e.g. to check the rolled loop.

  Matrix products run at full float32 precision (``MATMUL_PRECISION``), as
  the fixtures were computed, on every backend. JAX's default precision on
  NVIDIA GPUs computes float32 products in TF32: with it, on an H200, the
  Disco fixtures failed by up to 0.9 relative on meta-gradients.
  """
  with jax.default_matmul_precision(MATMUL_PRECISION):
    return _check_fixture(Path(path), weights_path, meta_gradient_config)


def _check_fixture(path, weights_path, meta_gradient_config) -> Report:
  try:
    fx = load_fixture(path)
  except (OSError, ValueError) as e:
    return Report(str(path), "?", [], f"cannot read fixture: {e}")
  kind = str(fx.get("kind", "?"))
  if kind not in KINDS and kind != META_STEPS_KIND:
    return Report(
        str(path),
        kind,
        [],
        f"unsupported fixture kind {kind!r} (supported: "
        f"{', '.join(KINDS)})",
    )
  if kind == META_STEPS_KIND:
    return Report(str(path), kind, check_meta_train_steps(fx))
  meta_params = None
  if kind in ("disco_meta_net", "disco_learner_step"):
    meta_params = weights_lib.load_disco103(weights_path)
  run = KINDS[kind]
  if kind == "disco_meta_gradient" and meta_gradient_config is not None:
    run = functools.partial(run, config=meta_gradient_config)
  ours, max_steps = run(fx, meta_params)
  fx = with_companion_gradients(path, fx)
  robust = has_gradients(fx)
  comparisons = compare_outputs(
      fixtures.strip(ours), fx, max_steps if robust else None
  )
  rule = "-" if not max_steps else ("gradients" if robust else "99.9%")
  return Report(str(path), kind, comparisons, rule=rule)


def main(argv: list[str] | None = None) -> int:
  """``python -m disco.parity``: checks the fixtures named in ``argv``;
  returns the exit status (1 if any fails)."""
  parser = argparse.ArgumentParser(
      prog="python -m disco.parity", description=__doc__.split("\n\n")[0]
  )
  parser.add_argument("fixtures", nargs="+", help="fixture .npz files")
  parser.add_argument(
      "--weights",
      default=None,
      help="Disco103 weights file (default: search/download)",
  )
  parser.add_argument(
      "--verbose", "-v", action="store_true", help="print every compared array"
  )
  args = parser.parse_args(argv)
  failed = False
  for fixture in args.fixtures:
    try:
      report = check_fixture(fixture, args.weights)
    except weights_lib.WeightsError as e:
      report = Report(fixture, "?", [], str(e))
    if args.verbose:
      for c in report.comparisons:
        print(f"    {'ok ' if c.ok else 'BAD'} {c.error:.3e} {c.key}")
    if report.error:
      print(f"{report.path}: kind={report.kind} FAIL ({report.error})")
    else:
      worst = report.worst
      bad = [c.key for c in report.comparisons if not c.ok]
      print(
          f"{report.path}: kind={report.kind} arrays="
          f"{len(report.comparisons)} params_rule={report.rule} "
          f"worst_rel_error={worst.error:.3e} "
          f"({worst.key}) {'PASS' if report.ok else 'FAIL'}"
          + (f" failing: {', '.join(bad[:5])}" if bad else "")
      )
    failed |= not report.ok
  return 1 if failed else 0
