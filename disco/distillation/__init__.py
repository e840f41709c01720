"""Distillation of a learned rule into a smaller student.

The library under ``disco-distill`` (a Disco meta-network rule into one with
a smaller meta-network)::

  from disco import distillation

  summary = distillation.distill(
      distillation.make_config(teacher="disco103", envs=("catch",)))

or step by step, each step a function::

  settings = distillation.DistillSettings.from_config(
      distillation.make_config(teacher="disco103"))
  plan = distillation.build(settings)       # teacher, student, output folder
  lock = distillation.open_output(plan)     # the folder's lock, config.json
  result = distillation.run(plan)           # dataset, fit, agreement
  summary = distillation.write(plan, result)
  lock.release()

* ``settings``: ``default_config``, ``make_config``, ``DistillSettings``;
* ``plan``: ``DistillPlan``, ``build``, ``student_settings``;
* ``dataset``: ``gather`` (resumable shards of the teacher's agents'
  learner batches), ``Shard``;
* ``fitting``: ``targets``, ``sample_loss``, ``fit``, ``agreement``;
* ``running``: ``run`` (the dataset, the fit and the agreement),
  ``DistillResult``;
* ``outputs``: ``open_output``, ``write`` (the run folder, the student's
  rule file);
* ``workflow``: ``distill`` (all of the above).

And an LPO rule's drift into a smaller or closed-form one:

* ``drift_fit``: ``distill`` (a student LPO drift fitted to a teacher's on a
  grid), ``agreement``, ``standard_drifts``, ``plot_drifts``.
"""

from disco.distillation.dataset import Shard
from disco.distillation.dataset import gather
from disco.distillation.fitting import Pair
from disco.distillation.fitting import agreement
from disco.distillation.fitting import fit
from disco.distillation.fitting import sample_loss
from disco.distillation.fitting import targets
from disco.distillation.outputs import STUDENT_FILE
from disco.distillation.outputs import open_output
from disco.distillation.outputs import write
from disco.distillation.plan import DistillPlan
from disco.distillation.plan import build
from disco.distillation.plan import student_settings
from disco.distillation.running import DistillResult
from disco.distillation.running import run
from disco.distillation.settings import CONFIG_NAME
from disco.distillation.settings import PROGRAM
from disco.distillation.settings import DistillSettings
from disco.distillation.settings import default_config
from disco.distillation.settings import make_config
from disco.distillation.workflow import distill

__all__ = [
    "CONFIG_NAME",
    "DistillSettings",
    "PROGRAM",
    "Pair",
    "DistillPlan",
    "DistillResult",
    "STUDENT_FILE",
    "Shard",
    "agreement",
    "build",
    "default_config",
    "distill",
    "fit",
    "gather",
    "make_config",
    "open_output",
    "run",
    "sample_loss",
    "student_settings",
    "targets",
    "write",
]
