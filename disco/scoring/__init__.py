"""Scoring: normalised scores and their aggregates with intervals, for
comparisons and meta-training's validation alike.

Modules: ``normalization`` (score tables against
``disco.environments.reference_scores``, references given on a command line) and
``aggregates`` (IQM, mean, median, optimality gap, probability of improvement,
performance profiles and sample-efficiency curves with stratified-bootstrap
intervals, by ``rliable``). Scores are ``{rule: [num_seeds, num_envs]}``
(``[..., num_points]`` for curves).
"""
