"""Comparing update rules across environments and seeds (the library under
``disco-compare``):

```python
from disco import comparison

stats = comparison.compare(
    rules=("actor_critic", "ppo"), envs=("catch",), num_seeds=5)
```

Modules: ``settings``, ``runs`` (``Cell``, ``ComparePlan``), ``tuning``,
``runner`` (``build``, ``run``, ``write``, ``compare``), ``results`` (runs read
back), ``report``; the statistics on top of ``disco.scoring``: ``significance``
(pairwise tests with Holm-Bonferroni correction), ``two_sample`` (the tests),
``effect_sizes``, ``calibration`` (error rates by simulation) and ``plots``.
"""

from disco.comparison.runner import build
from disco.comparison.runner import compare
from disco.comparison.runner import run
from disco.comparison.runner import write
from disco.comparison.runs import Cell
from disco.comparison.runs import ComparePlan
from disco.comparison.settings import CONFIG_NAME
from disco.comparison.settings import PROGRAM
from disco.comparison.settings import CompareSettings
from disco.comparison.settings import Tuning
from disco.comparison.settings import default_config
from disco.comparison.settings import make_config

__all__ = [
    "CONFIG_NAME",
    "Cell",
    "ComparePlan",
    "CompareSettings",
    "PROGRAM",
    "Tuning",
    "build",
    "compare",
    "default_config",
    "make_config",
    "run",
    "write",
]
