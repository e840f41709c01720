r"""Distillation launcher: fit a smaller Disco meta-network to a teacher's.

    disco-distill --config.student.hidden_size=32 --config.output_dir=runs/d32

(or ``python -m disco.launch.distill``). Settings: ``configs/distill.py``. It
trains agents with the teacher (``--config.teacher``: ``disco103`` or a Disco
rule file), keeps their learner batches in ``OUTPUT_DIR/dataset`` (a stopped run
resumes there), fits the student and writes ``agreement.csv``, ``fit.csv``,
``fit.png`` and the rule file ``student.npz`` (``disco-eval
--config.rule=runs/d32/student.npz``).

Bad input ends the program with one line on stderr and exit status 2 before
anything is trained. Python callers use ``disco.distillation``.
"""

from __future__ import annotations

from ml_collections import config_dict

from disco import distillation
from disco.launch import common


def _distill(config: config_dict.ConfigDict) -> None:
  distillation.distill(config)


def main() -> None:
  """Console entry point (``disco-distill``)."""
  common.run_launcher(
      distillation.PROGRAM, __doc__, distillation.CONFIG_NAME, _distill
  )


if __name__ == "__main__":
  main()
