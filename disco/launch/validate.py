r"""Validation launcher: validate a meta-training run's checkpoints.

  disco-validate RUN_DIR --follow

(or ``python -m disco.launch.validate RUN_DIR --follow``; the settings live
in ``configs/validate.py``). It reads the run's ``config.json``, builds the
rule and its held-out validation (``disco.meta.validation``, with the run's
``config.validation`` and any ``--config.validation.<key>=<value>``
overrides) and restores meta-parameters from ``RUN_DIR/checkpoints``:

* with ``--follow`` (``--config.follow=True``) it validates the initial
  meta-parameters (with ``validation.at_start``) and every checkpoint as it
  appears (at multiples of ``validation.every``; 0: all), until the run has
  finished (its ``summary.json`` reaches ``num_meta_steps``) or no new
  checkpoint came for ``max_idle_seconds``;
* without, it validates the latest checkpoint once.

The outputs are those of in-process validation, in the run's folder:
``validation.csv``, ``validation.png`` and ``best_meta_params.npz``. A
meta-step the CSV already holds is not validated again, so the follower can
be stopped and started at any time, also beside a run that validates
itself. The held-out loops compile once and are reused for every checkpoint.

Bad input (no run folder, unknown held-out environments, a budget that
cannot run, ...) ends the program with one line on stderr and exit status 2
before anything is trained. A run folder's config is data: modules it would
import (``config.imports``) and XLand ruleset files it names
(``env_settings.benchmark_path``) are refused unless the command line repeats
them (``--config.imports``, ``--config.benchmark_paths``). One follower
validates a run folder at a time (a second gets one line and exit status
2).
"""

from __future__ import annotations

import sys

from ml_collections import config_dict

from disco.launch import common
from disco.meta import follower


def _validate(config: config_dict.ConfigDict) -> None:
  follower.validate(follower.FollowSettings.from_config(config))


def _argv(argv: list[str]) -> list[str]:
  """``RUN_DIR`` and ``--follow`` as config overrides."""
  out = [argv[0]]
  for arg in argv[1:]:
    after_config = out[-1] in ("--config", "-config")  # --config FILE
    if arg in ("--follow", "-follow"):
      out.append("--config.follow=True")
    elif arg in ("--nofollow", "-nofollow"):
      out.append("--config.follow=False")
    elif (
        not arg.startswith("-")
        and not after_config
        and not any(a.startswith("--config.run_dir") for a in out)
    ):
      out.append(f"--config.run_dir={arg}")
    else:
      out.append(arg)
  return out


def main() -> None:
  """Console entry point (``disco-validate``)."""
  sys.argv = _argv(sys.argv)
  common.run_launcher(
      follower.PROGRAM, __doc__, follower.CONFIG_NAME, _validate
  )


if __name__ == "__main__":
  main()
