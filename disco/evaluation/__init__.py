"""Meta-evaluation: train agents with a fixed update rule and report returns
(the library under ``disco-eval``):

```python
from disco import evaluation

summary = evaluation.evaluate(rule="actor_critic", total_env_steps=20_000)
```

or step by step:

```python
settings = evaluation.EvalSettings.from_config(
    evaluation.make_config(rule="ppo", num_seeds=3))
plan = evaluation.build(settings)      # rule, environment, agent, loop
result = evaluation.run(plan)          # metrics of every seed, on the host
lock = evaluation.open_output(plan)    # the folder's lock, config.json
summary = evaluation.write(plan, result)
lock.release()
```

Modules: ``settings``, ``plan``, ``running``, ``outputs``, ``workflow``
(``evaluate``). With ``distributed`` settings, each process trains a contiguous
block of the seeds; process 0 gathers the metrics and writes the rest.
"""

from disco.evaluation.outputs import OUTPUT_FILES
from disco.evaluation.outputs import open_output
from disco.evaluation.outputs import resolved_config
from disco.evaluation.outputs import track
from disco.evaluation.outputs import write
from disco.evaluation.outputs import write_config
from disco.evaluation.plan import EvalPlan
from disco.evaluation.plan import build
from disco.evaluation.plan import plan_iterations
from disco.evaluation.running import CURVE_EPISODES
from disco.evaluation.running import EvalResult
from disco.evaluation.running import run
from disco.evaluation.settings import CONFIG_NAME
from disco.evaluation.settings import PROGRAM
from disco.evaluation.settings import EvalSettings
from disco.evaluation.settings import default_config
from disco.evaluation.settings import make_config
from disco.evaluation.settings import prepare
from disco.evaluation.workflow import evaluate

__all__ = [
    "CONFIG_NAME",
    "CURVE_EPISODES",
    "EvalSettings",
    "OUTPUT_FILES",
    "PROGRAM",
    "EvalPlan",
    "EvalResult",
    "build",
    "default_config",
    "evaluate",
    "make_config",
    "open_output",
    "plan_iterations",
    "prepare",
    "resolved_config",
    "run",
    "track",
    "write",
    "write_config",
]
