"""Comparing update rules across environments and seeds.

The runner (under ``disco-compare``), in a few lines::

  from disco import comparison

  stats = comparison.compare(
      rules=("actor_critic", "ppo"), envs=("catch",), num_seeds=5)

* ``settings``: ``CompareSettings`` (checked in one pass), ``make_config``;
* ``runs``: ``Cell`` (one rule on one environment) and ``ComparePlan``;
* ``tuning``: baselines tuned per environment on seeds of their own;
* ``runner``: ``build``, ``run``, ``write`` and ``compare``.

The scores of the runs are normalised and aggregated by ``disco.scoring``
(``normalization``, ``aggregates``: IQM and the other rliable aggregates
with intervals); the statistics on top, pure NumPy/SciPy:

* ``significance``: pairwise tests (Welch, Mann-Whitney, bootstrap,
  permutation) of every pair of rules with Holm-Bonferroni correction,
  effect sizes and power; the tests themselves are in ``two_sample``, the
  effect sizes and power in ``effect_sizes``;
* ``plots``: PNG figures of the above.

Scores are ``{rule: [num_seeds, num_envs]}`` (``[..., num_points]`` for
learning curves).
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
