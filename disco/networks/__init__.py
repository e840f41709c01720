"""Networks: the agent (MLP torso, heads, action-conditional model) and the
Disco meta-network with its input transforms."""
