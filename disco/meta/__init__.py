"""Meta-training (the library under ``disco-meta-train``):

```python
from disco import meta

summary = meta.meta_train(num_meta_steps=10, output_dir="runs/my-rule")
```

or step by step:

```python
settings = meta.MetaTrainSettings.from_config(meta.default_config())
plan = meta.build(settings)             # groups, population, start
result = meta.run(plan, hooks=[...])    # the meta-training loop
summary = meta.write(plan, result)
```

Modules: ``settings``, ``plan``, ``trainer``, ``hooks``, ``rule_files``,
``run_folder``, ``estimator_registry``, ``level_sampler_registry``; the
meta-step (``meta_step``) and its estimators (``population``, ``bmg``, ``es``,
``pes``, ``estimators``), ``meta_gradient``, ``value_function``, ``keys``,
``level_samplers``, ``checkpoints``, ``history``, ``divergence``,
``validation``, ``validation_record``, ``follower``.
"""

from disco.meta.estimator_registry import register_estimator
from disco.meta.hooks import Hook
from disco.meta.hooks import Progress
from disco.meta.level_sampler_registry import register_level_sampler
from disco.meta.plan import MetaTrainPlan
from disco.meta.plan import abstract_state
from disco.meta.plan import build
from disco.meta.plan import initial_state
from disco.meta.plan import write_config
from disco.meta.rule_files import export_meta_params
from disco.meta.rule_files import load_initial_meta_params
from disco.meta.settings import CONFIG_NAME
from disco.meta.settings import PROGRAM
from disco.meta.settings import MetaTrainSettings
from disco.meta.settings import default_config
from disco.meta.trainer import MetaTrainer
from disco.meta.trainer import MetaTrainResult
from disco.meta.trainer import meta_train
from disco.meta.trainer import run
from disco.meta.trainer import train
from disco.meta.trainer import write

__all__ = [
    "CONFIG_NAME",
    "Hook",
    "MetaTrainPlan",
    "MetaTrainResult",
    "MetaTrainSettings",
    "MetaTrainer",
    "PROGRAM",
    "Progress",
    "abstract_state",
    "build",
    "default_config",
    "export_meta_params",
    "initial_state",
    "load_initial_meta_params",
    "meta_train",
    "register_estimator",
    "register_level_sampler",
    "run",
    "train",
    "write",
    "write_config",
]
