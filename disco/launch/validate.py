r"""Validation launcher: validate a meta-training run's checkpoints.

    disco-validate RUN_DIR --follow

(or ``python -m disco.launch.validate RUN_DIR --follow``). Settings:
``configs/validate.py``. It builds the run's rule and held-out validation (the
run's ``config.validation``, with ``--config.validation.<key>=<value>``
overrides) and restores meta-parameters from ``RUN_DIR/checkpoints``:

* with ``--follow``, it validates the initial meta-parameters (with
  ``validation.at_start``) and each checkpoint as it appears (at multiples of
  ``validation.every``; 0: all), until the run finishes or no checkpoint comes
  for ``max_idle_seconds``;
* without, it validates the latest checkpoint once.

Outputs go into the run's folder: ``validation.csv``, ``validation.png`` and
``best_meta_params.npz``. Validated meta-steps are not validated again, so it
may be stopped and restarted at any time.

Bad input ends the program with one line on stderr and exit status 2, as does a
second follower on the same folder. Modules (``config.imports``) and XLand
ruleset files (``env_settings.benchmark_path``) named in the run's config are
refused unless repeated with ``--config.imports`` and
``--config.benchmark_paths``.
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
