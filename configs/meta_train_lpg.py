"""Meta-training LPG on the five LPG grid worlds (GROOVE's settings).

  disco-meta-train --config=configs/meta_train_lpg.py
  disco-meta-train --config=configs/meta_train_lpg.py --config.rule=ta_lpg

Starts from ``configs/meta_train.py`` and sets what LPG and GROOVE
(github.com/EmptyJackson/groove, ``experiments/parse_args.py``) use where
the published Disco setup has no equivalent: one agent on each of the grid
worlds ``lpg/dense``, ``sparse``, ``long_horizon``, ``longer_horizon`` and
``long_dense`` (tabular observations, as state indices: see below), linear
agents and value function (as
GROOVE's tabular ones, with Adam(1e-2) for its SGD), 64 environments per
agent, rollouts
of 20 steps, K=5 agent updates per meta-step, a GRU of 256 (the rule's
default), Adam(1e-4) on the meta-parameters with their gradient's global norm
clipped at 0.5, and a value function with discount 0.99 and lambda 0.95.
Agent lifetimes are drawn per agent, log-uniformly between 10 and 250 updates
(GROOVE's ``all_vrandlife``); ``ta_lpg`` reads them. The outer loss's own
entropy bonus is off: LPG's regularisers (beta_0 .. beta_3, the rule's
hyper-parameters ``policy_entropy_coeff`` .. ``target_l2_coeff``) include
the policy entropy.

The grid worlds give their tabular states as int32 indices
(``observation="index"``) and the agents and value function read them with
``obs_embedding="one_hot"``: the same function, parameters and gradients as
on the one-hot observations, with the first linear layer computed as a row
gather (``one_hot(i) @ w + b == w[i] + b``), so the rollouts keep one int32
per step instead of a ``[~2000]`` float32 vector. A population or held-out
environment given other observations (e.g. ``env_settings={}``: one-hot, or
CartPole's) is read as it is, as with ``obs_embedding="none"``.
"""

from disco import checks

LPG_ENVS = ("dense", "sparse", "long_horizon", "longer_horizon", "long_dense")


def get_config():
  config = checks.load_config("meta_train")
  config.rule = "lpg"
  # The meta-network's GRU (256, the rule's default): tests shrink it with
  # --config.rule_kwargs.net.hidden_size=8.
  config.rule_kwargs = dict(net=dict(hidden_size=256))
  # Tabular states as indices (see the docstring).
  config.population = tuple(
      dict(
          env=f"lpg/{name}",
          env_settings=dict(observation="index"),
          num_agents=1,
      )
      for name in LPG_ENVS
  )
  config.batch_size = 64
  config.rollout_len = 20
  config.inner_steps = 5
  config.lifetime_updates = (10, 250)
  # GROOVE's tabular agents and value critic are linear (with SGD at
  # learning rates 40 and 4); ours are linear too, with Adam. obs_embedding:
  # the same function as on one-hot inputs, computed as a gather.
  config.agent.network = dict(
      dense=(),
      obs_embedding="one_hot",
      head_w_init_std=1e-2,
      activate_final=True,
      separate_torsos=True,
      compute_dtype="float32",
  )
  config.agent.learning_rate = 1e-2
  config.agent.max_abs_update = None
  config.agent.loss_mask = "valid"
  config.value_fn.dense = ()
  config.value_fn.obs_embedding = "one_hot"  # as the agents'
  config.value_fn.learning_rate = 1e-2
  config.value_fn.discount_factor = 0.99
  config.value_fn.td_lambda = 0.95
  config.meta_entropy_cost = 0.0
  config.meta_optimizer = "adam"
  config.meta_learning_rate = 1e-4
  config.meta_max_grad_norm = 0.5
  # K=5 inner steps as straight-line code: 1.4x faster meta-steps than the
  # loop on a 2-core CPU (BENCHMARKS.md, "LPG meta-step against GROOVE").
  config.max_unrolled_inner_steps = 5
  config.key_scheme = "per_agent"
  config.num_meta_steps = 1000
  return config
