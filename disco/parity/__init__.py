"""Parity checks against fixtures computed by the published implementation.

Usage:

```bash
python -m disco.parity FIXTURE.npz [FIXTURE.npz ...] [--weights PATH]
```

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

from disco.parity.check import Report
from disco.parity.check import check_fixture
from disco.parity.check import main

__all__ = ["Report", "check_fixture", "main"]
