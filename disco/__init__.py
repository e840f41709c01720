"""disco: discover and evaluate reinforcement-learning update rules by meta-learning."""

__version__ = "0.3.0.dev0"
