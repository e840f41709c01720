"""Statistics for comparing update rules across environments and seeds.

Pure NumPy/SciPy/rliable (no JAX):

* ``normalization``: per-environment normalisation against a sourced table;
* ``aggregates``: IQM, mean, median, optimality gap, probability of
  improvement, performance profiles and sample-efficiency curves with
  stratified-bootstrap intervals (``rliable``);
* ``significance``: pairwise tests (Welch, Mann-Whitney, bootstrap,
  permutation) with Holm-Bonferroni correction, effect sizes and power;
* ``plots``: PNG figures of the above.

Scores are ``{rule: [num_seeds, num_envs]}`` (``[..., num_points]`` for
learning curves).
"""
