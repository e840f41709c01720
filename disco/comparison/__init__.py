"""Comparing update rules across environments and seeds.

The runner (under ``disco-compare``), in a few lines::

  from disco import comparison

  stats = comparison.compare(
      rules=("actor_critic", "ppo"), envs=("catch",), num_seeds=5)

* ``settings``: ``CompareSettings`` (checked in one pass), ``make_config``;
* ``runs``: ``Cell`` (one rule on one environment) and ``Plan``;
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

import importlib

# The runner's names and the modules defining them, imported on first use so
# that the statistics modules import without JAX.
_RUNNER = {
    "CompareSettings": "disco.comparison.settings",
    "default_config": "disco.comparison.settings",
    "Tuning": "disco.comparison.settings",
    "make_config": "disco.comparison.settings",
    "parse_spec": "disco.specs",
    "Cell": "disco.comparison.runs",
    "Plan": "disco.comparison.runs",
    "build": "disco.comparison.runner",
    "run": "disco.comparison.runner",
    "write": "disco.comparison.runner",
    "compare": "disco.comparison.runner",
}


_SUBMODULES = ("settings", "runs", "tuning", "runner")


def __getattr__(name: str):
  if name in _SUBMODULES:
    return importlib.import_module(f"disco.comparison.{name}")
  if name in _RUNNER:
    module = importlib.import_module(_RUNNER[name])
    return getattr(module, name)
  raise AttributeError(f"module 'disco.comparison' has no attribute {name!r}")
