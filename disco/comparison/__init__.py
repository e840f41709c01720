"""Statistics for comparing update rules across environments and seeds.

Pure NumPy/SciPy/rliable (no JAX):

* ``normalization``: per-environment normalisation against a sourced table;
* ``aggregates``: IQM, mean, median, optimality gap, probability of
  improvement, performance profiles and sample-efficiency curves with
  stratified-bootstrap intervals (``rliable``);
* ``significance``: pairwise tests (Welch, Mann-Whitney, bootstrap,
  permutation) of every pair of rules with Holm-Bonferroni correction,
  effect sizes and power; the tests themselves are in ``two_sample``, the
  effect sizes and power in ``effect_sizes``;
* ``plots``: PNG figures of the above.

Scores are ``{rule: [num_seeds, num_envs]}`` (``[..., num_points]`` for
learning curves).
"""
