"""What a process does first in every workflow, before its settings are read.

``start`` joins the multi-process run that ``config.distributed`` describes
(before anything uses JAX's devices) and imports the modules
``config.imports`` names, which may register rules, environments,
estimators and level samplers that the settings then name. Each workflow's
``build`` calls it first; settings parsing itself has no side effects.
"""

from __future__ import annotations

from typing import Any

from disco import checks
from disco import distributed


def start(
    program: str,
    distributed_settings: distributed.DistributedSettings | None = None,
    imports: Any = "",
) -> None:
  """Joins the run (``distributed.initialize``; nothing for None or when
  JAX is already initialised) and imports ``imports`` (comma-separated
  module names; ``checks.import_modules``).

  Raises:
    UsageError: a process that cannot join, or a module that cannot be
      imported.
  """
  distributed.initialize(distributed_settings, program)
  checks.import_modules(imports)
