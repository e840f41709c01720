"""Scoring: normalised scores and their aggregates with intervals.

What comparisons (``disco.comparison``) and meta-training's validation
(``disco.meta.validation``) both score runs with; it imports neither.

* ``normalization``: score tables normalised against the reference table
  (``disco.environments.reference_scores``), its rows, and references given
  on a command line (``parse_references``);
* ``aggregates``: IQM, mean, median, optimality gap, probability of
  improvement, performance profiles and sample-efficiency curves with
  stratified-bootstrap intervals (``rliable``).

Scores are ``{rule: [num_seeds, num_envs]}`` (``[..., num_points]`` for
learning curves).
"""
