"""Distillation of a learned rule into a smaller student.

The library under ``disco-distill`` (a Disco meta-network rule into one with
a smaller meta-network)::

  from disco import distillation

  summary = distillation.distill(
      distillation.make_config(teacher="disco103", envs=("catch",)))

* ``settings``: ``default_config``, ``make_config``, ``DistillSettings``;
* ``dataset``: ``gather`` (resumable shards of the teacher's agents'
  learner batches), ``Shard``;
* ``fitting``: ``targets``, ``sample_loss``, ``fit``, ``agreement``;
* ``workflow``: ``distill`` (all of the above, and the student's export).

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
from disco.distillation.settings import CONFIG_NAME
from disco.distillation.settings import PROGRAM
from disco.distillation.settings import DistillSettings
from disco.distillation.settings import default_config
from disco.distillation.settings import make_config
from disco.distillation.workflow import STUDENT_FILE
from disco.distillation.workflow import distill
from disco.distillation.workflow import student_settings

__all__ = [
    "CONFIG_NAME",
    "DistillSettings",
    "PROGRAM",
    "Pair",
    "STUDENT_FILE",
    "Shard",
    "agreement",
    "default_config",
    "distill",
    "fit",
    "gather",
    "make_config",
    "sample_loss",
    "student_settings",
    "targets",
]
