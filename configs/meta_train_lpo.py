"""Meta-training LPO's drift with evolution strategies (Lu et al. 2022).

  disco-meta-train --config=configs/meta_train_lpo.py
  disco-meta-train --config=configs/meta_train_lpo.py \
      --config.rule_kwargs.init=random --config.output_dir=runs/lpo

Starts from ``configs/meta_train.py`` and sets what LPO uses: the ``lpo``
rule (a drift network of 128 tanh units over the paper's 8 features, no
biases, PPO's drift inside its ReLU; zero meta-parameters, i.e. PPO, to
start), OpenAI-ES with antithetic pairs and centred-rank fitness shaping, and
members whose agents each train a whole PPO lifetime (``es.lifetime_iterations``
iterations of 4 environments x 128 steps, 4 epochs x 4 minibatches, the
learning rate annealed to 0 over the lifetime) on CartPole-v1 and
Breakout-MinAtar. A member's fitness is the normalised final return
(``disco.environments.reference_scores``: 0 for a random policy, 1 for
the table's reference) averaged over the two, so both count the same. The
agents are purejaxrl's PPO agents (separate 64x64 tanh actor and critic) at
a learning rate of 1e-3, which learns more in these short lifetimes than
PPO's default 2.5e-4. Held-out validation is off here; the discovery script
(``benchmarks/lpo_discovery.py``) sets it.
"""

from disco import checks


def get_config():
  config = checks.load_config("meta_train")
  config.rule = "lpo"
  config.estimator = "es"
  config.population = (
      dict(env="gymnax/CartPole-v1", num_agents=1),
      dict(env="gymnax/Breakout-MinAtar", num_agents=1),
  )
  config.batch_size = 4  # environments per agent (purejaxrl's CartPole PPO)
  config.rollout_len = 128
  config.agent.network = dict(
      dense=(64, 64),
      activation="tanh",
      activate_final=True,
      separate_torsos=True,
      compute_dtype="float32",
  )
  config.agent.learning_rate = 1e-3
  config.agent.max_abs_update = None
  config.agent.loss_mask = "valid"
  config.es.population_size = 16
  config.es.sigma = 0.03
  config.es.lifetime_iterations = 100  # 51,200 env steps per agent
  config.es.final_iterations = 10
  config.meta_optimizer = "adam"
  config.meta_learning_rate = 0.03
  config.key_scheme = "per_agent"
  config.num_meta_steps = 100
  config.checkpoint_every = 5
  return config
