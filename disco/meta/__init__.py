"""Meta-training: the value function, the meta-gradient of one agent, the
population step, checkpoints and the metrics history."""
