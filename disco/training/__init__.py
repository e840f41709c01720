"""The training loop: acting, the on-device replay, the scanned loop of
rollouts and learner steps, and the analysis of its metrics. Meta-evaluation
(``disco.evaluation``) and meta-training run agents through it."""
