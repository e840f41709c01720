"""Online objective learning (FRODO-style): one agent, one lifetime, its
update rule meta-learned while it learns.

  disco-meta-train --config=configs/meta_train_online.py
  disco-meta-train --config=configs/meta_train_online.py --config.rule=disco \
      --config.population="({'env': 'lpg/dense', 'num_agents': 1},)"

Xu et al., "Meta-Gradient Reinforcement Learning with an Objective
Discovered Online" (NeurIPS 2020), learn the agent's update target with a
meta-network inside a single agent's lifetime, at the compute of one run.
The meta-trainer expresses this without a second trainer: one agent
(``num_agents=1``) that is never reset (``lifetime_meta_steps=0``, no drawn
lifetimes), whose meta-parameters (LPG's network here; ``--config.rule=disco``
for the Disco meta-network) take one Adam step after every ``inner_steps``
agent updates, on the backprop meta-gradient of the outer loss (policy
gradient with the value function's advantages on the next rollout). The
agent's lifetime is ``num_meta_steps * inner_steps`` updates and its
training return (``metrics.csv``) is the result; held-out validation is off
(there is nothing to transfer to), and the rule exported at the end is the
objective as it stood when the agent finished.
"""

from disco import checks


def get_config():
  config = checks.load_config("meta_train")
  config.rule = "lpg"
  config.population = (
      dict(env="catch", env_settings=dict(rows=5, columns=5), num_agents=1),
  )
  config.num_devices = 1  # one agent: one device
  config.batch_size = 32
  config.rollout_len = 16
  config.inner_steps = 4
  config.max_unrolled_inner_steps = 4
  # One lifetime: the agent is never reset.
  config.lifetime_meta_steps = 0
  config.lifetime_updates = (0, 0)
  config.num_meta_steps = 500  # a lifetime of 2,000 agent updates
  config.meta_learning_rate = 1e-4
  config.meta_max_grad_norm = 0.5
  config.estimator = "backprop"
  return config
