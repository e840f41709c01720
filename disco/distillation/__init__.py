"""Distillation of a learned rule into a smaller student (the library under
``disco-distill``):

```python
from disco import distillation

summary = distillation.distill(
    distillation.make_config(teacher="disco103", envs=("catch",)))
```

or step by step: ``DistillSettings.from_config``, ``build``, ``open_output``
(the folder's lock), ``run`` (dataset, fit, agreement), ``write``.

Modules: ``settings``, ``plan``, ``dataset``, ``fitting``, ``running``,
``outputs``, ``workflow``; and ``drift_fit`` (an LPO drift fitted by a smaller
or closed-form one).
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
