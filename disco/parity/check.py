"""Checking fixtures of the published implementation: ``check_fixture``
and the ``python -m disco.parity`` command line (see ``disco.parity``)."""

from __future__ import annotations

import argparse
import dataclasses
import functools
from pathlib import Path

import jax

from disco import weights as weights_lib
from disco.meta import meta_gradient
from disco.parity import comparisons as comparisons_lib
from disco.parity import fixtures
from disco.parity import meta_steps
from disco.parity import runners


@dataclasses.dataclass
class Report:
  """What ``check_fixture`` found in one fixture: a comparison per array
  (``ok`` when every one passes and ``error`` is None; ``worst``: the one
  with the largest error)."""

  path: str
  kind: str
  comparisons: list[comparisons_lib.Comparison]
  error: str | None = None  # set when the fixture could not be checked
  # The rule updated parameters were checked by: "gradients" (the
  # rounding-robust one), "99.9%", or "-" (none in the fixture).
  rule: str = "-"

  @property
  def ok(self) -> bool:
    return self.error is None and all(c.ok for c in self.comparisons)

  @property
  def worst(self) -> comparisons_lib.Comparison | None:
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
    fx = fixtures.load_fixture(path)
  except (OSError, ValueError) as e:
    return Report(str(path), "?", [], f"cannot read fixture: {e}")
  kind = str(fx.get("kind", "?"))
  if kind not in runners.KINDS and kind != meta_steps.META_STEPS_KIND:
    return Report(
        str(path),
        kind,
        [],
        f"unsupported fixture kind {kind!r} (supported: "
        f"{', '.join(runners.KINDS)})",
    )
  if kind == meta_steps.META_STEPS_KIND:
    return Report(str(path), kind, meta_steps.check_meta_train_steps(fx))
  meta_params = None
  if kind in ("disco_meta_net", "disco_learner_step"):
    meta_params = weights_lib.load_disco103(weights_path)
  run = runners.KINDS[kind]
  if kind == "disco_meta_gradient" and meta_gradient_config is not None:
    run = functools.partial(run, config=meta_gradient_config)
  ours, max_steps = run(fx, meta_params)
  fx = fixtures.with_companion_gradients(path, fx)
  robust = fixtures.has_gradients(fx)
  comparisons = comparisons_lib.compare_outputs(
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
