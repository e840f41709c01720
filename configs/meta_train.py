"""Meta-training: discover (or fine-tune) a Disco rule on a population.

Used by ``disco-meta-train`` (``python -m disco.launch.meta_train``);
override any value on the command line, e.g.::

  disco-meta-train --config.num_meta_steps=100 \
      --config.init_meta_params=disco103 --config.output_dir=runs/ft

The defaults are the published meta-training notebook's: 2 agents on Catch
5x5, 32 environments per agent, rollouts of 16 steps, 2 inner steps per
meta-step, an MLP agent (512, 512) with an LSTM action model (256) and head
(256,) trained with learning rate 5e-4, a value function MLP (256, 256) with
learning rate 1e-3, discount 0.99 and lambda 0.96, Adam(5e-4) on the
meta-parameters, 800 meta-steps from random meta-parameters (key 1).

The population is a tuple of groups, each a (jittable) environment with its
settings, its number of agents and optionally its ``weight`` in the
meta-gradient (default: its number of agents). Groups may differ in
observation shapes and action counts; each gets its own agent network and
value function. E.g. Catch 5x5, an LPG grid world, the delayed chain and
CartPole::

  --config.population="({'env': 'catch', 'env_settings': {'rows': 5, \
'columns': 5}, 'num_agents': 2}, {'env': 'lpg/dense', 'num_agents': 2}, \
{'env': 'delayed_chain', 'num_agents': 2}, \
{'env': 'gymnax/CartPole-v1', 'num_agents': 2, 'weight': 1.0})"
"""

from ml_collections import config_dict

from disco import distributed
from disco.meta import validation_settings


def get_config() -> config_dict.ConfigDict:
  return config_dict.ConfigDict(
      dict(
          # Groups of agents: a (jittable) environment, its settings and the
          # number of agents (over all devices; a multiple of the device count).
          population=(
              dict(
                  env="catch",
                  env_settings=dict(rows=5, columns=5),
                  num_agents=2,
              ),
          ),
          # Comma-separated Python modules to import first (modules that register
          # their own rules, environments, estimators or level samplers).
          imports="",
          batch_size=32,  # environments per agent
          rollout_len=16,  # actor steps per training rollout (validation: 2x)
          inner_steps=2,  # agent updates per meta-step
          # A replay per agent (the backprop estimator): its rollouts go in,
          # and each inner update learns from replay_batch_size
          # trajectories drawn from it (0: the rollouts' batch), as
          # Disco103's agents learn in evaluation (capacity 1024, batches
          # of 64). 0: no replay; each update learns from its own rollout.
          replay_capacity=0,
          replay_batch_size=0,
          # The rule to meta-train: a registered rule with meta-parameters
          # (disco, lpg, ta_lpg; configs/meta_train_lpg.py sets up LPG).
          rule="disco",
          # Overrides of the rule's settings, as in disco-eval: its
          # hyper-parameters (loss costs, discounts), e.g.
          # --config.hyper_params.value_cost=0.5, and its factory's keyword
          # arguments (dicts merged one level deep), e.g.
          # --config.rule_kwargs.num_bins=51. The keys are those of the rule
          # the command line names, with its defaults (disco-meta-train
          # --describe_rule=NAME lists them).
          hyper_params={},
          rule_kwargs={},
          # The agents (trained by the rule being meta-learned).
          agent=dict(
              network=dict(
                  dense=(512, 512),
                  head_w_init_std=1e-2,
                  model_lstm_size=256,
                  model_head_hiddens=(256,),
                  # "bfloat16": the agents' networks compute in bfloat16
                  # (float32 parameters and outputs; for GPUs and TPUs). The
                  # meta-network, value function and losses stay float32.
                  compute_dtype="float32",
              ),
              learning_rate=5e-4,
              max_abs_update=1.0,
              # The published meta-trainer's agents leave out the transitions
              # that start at an episode's last step ("published"); "valid"
              # learns from every transition with a valid target.
              loss_mask="published",
              # Anneal the learning rate linearly to 0 over each agent's
              # lifetime (ES; None: the rule's default, on for ppo, dpo, lpo).
              anneal_learning_rate=config_dict.placeholder(bool),
          ),
          # The meta-training value function (drives the outer policy gradient).
          value_fn=dict(
              dense=(256, 256),
              head_w_init_std=1e-2,
              learning_rate=1e-3,
              max_abs_update=1.0,
              discount_factor=0.99,
              td_lambda=0.96,
              outer_value_cost=1.0,
          ),
          meta_entropy_cost=1e-2,  # policy-entropy bonus of the meta-loss
          meta_optimizer="adam",  # adam | sgd | rmsprop
          meta_learning_rate=5e-4,
          # Clip the meta-gradient's global norm to this first (None: no clip).
          meta_max_grad_norm=None,
          # 'random' (initialised with init_seed), 'disco103' (the published
          # weights, fine-tuned) or the path of a .npz of Disco meta-parameters.
          init_meta_params="random",
          init_seed=1,
          seed=4,  # agents, environments and acting
          # Random keys: 'published' (the published notebook's, so a run can be
          # compared with it step by step) or 'per_agent' (one key chain per
          # agent); see disco.meta.keys.
          key_scheme="published",
          # How the meta-gradient is estimated: 'backprop' (through
          # inner_steps learner updates; the published meta-trainer's), 'es'
          # (evolution strategies over whole lifetimes; settings in es),
          # 'pes' (persistent ES over truncations of inner_steps updates;
          # needs lifetime_meta_steps >= 1; settings in pes), 'bmg'
          # (bootstrapped meta-gradients: backprop through inner_steps updates
          # towards a target further on; settings in bmg) or one that a
          # module of imports registers (disco/meta/estimator_registry.py).
          estimator="backprop",
          es=dict(
              # An evosax strategy's name; 'open_es' (OpenAI-ES) feeds the
              # meta-optimiser.
              strategy="open_es",
              population_size=8,  # members: antithetic pairs, so even
              sigma=0.01,  # perturbation standard deviation
              lifetime_iterations=64,  # each member's agents' lifetime
              # 'final_return' (last final_iterations' episodes) or 'auc'.
              fitness="final_return",
              final_iterations=8,
              rank_shaping=True,  # centred ranks (False: raw returns)
              antithetic=True,
              # Passes over each rollout and learner steps per pass (PPO's
              # sample reuse); None: the rule's loop (ppo, dpo, lpo: 4 x 4;
              # others 1 x 1).
              update_epochs=config_dict.placeholder(int),
              num_minibatches=config_dict.placeholder(int),
          ),
          pes=dict(sigma=0.01, antithetic=True),
          bmg=dict(
              # Updates from the inner updates' learner x_K to the target,
              # each on the validation rollout (0: the target is x_K).
              target_steps=1,
              # The target's last update: 'outer' (a step down the outer
              # loss's gradient, with the agent's optimiser) or 'rule'.
              target_final_step="outer",
              # 'kl' (KL(target policy || x_K's) on the validation states) or
              # 'squared' (squared distance of the agent network's parameters).
              distance="kl",
              # Weight of the rule's meta_regularizer in the meta-loss (0:
              # none); the matching loss's gradient is far smaller than the
              # backprop outer loss's, so weights that suit backprop drown it.
              rule_regularizer_cost=0.0,
          ),
          # Curricula over levels (environments with levels: lpg/random,
          # delayed_chain): 'none' (the environments' own resets), 'uniform',
          # 'plr', 'groove' (disco/meta/level_samplers.py) or one that a
          # module of imports registers. Every group's agents then draw a
          # level at each new lifetime (needs lifetime_meta_steps or
          # lifetime_updates; backprop estimator).
          level_sampler=dict(
              kind="none",
              buffer_size=4000,  # PLR/GROOVE levels kept (>= the population)
              replay_prob=0.95,
              score_fn="pvl",  # PLR: 'pvl' (positive value loss) | 'max_mc'
              transform="rank",  # 'rank' | 'power'
              temperature=0.3,
              staleness_coef=0.3,
              min_fill=0.5,  # buffer fraction filled before replays start
              # GROOVE's reference rule, trained beside each agent on its
              # level: 'actor_critic' | 'ppo'.
              reference_rule="actor_critic",
          ),
          num_meta_steps=800,  # total for the run (a resumed run continues to it)
          lifetime_meta_steps=0,  # reset each agent after this many (0: never)
          # Or lifetimes in agent updates, drawn per agent log-uniformly from
          # (low, high) at every start (GROOVE's all_vrandlife: (10, 250));
          # (0, 0): none. Rules conditioned on the lifetime (ta_lpg) read it.
          lifetime_updates=(0, 0),
          remat_inner_steps=False,  # recompute inner steps in the backward pass
          # Up to this many inner steps compile without a loop: about 1.5x faster
          # meta-steps, longer compiles (33 s for 2 inner steps, 63 s for 4).
          max_unrolled_inner_steps=2,
          num_devices=0,  # devices per process (0: all of this process's)
          # Several processes (hosts) as one run, on jax.distributed: start the
          # same command in every process. enabled=True alone detects the
          # cluster (SLURM, Open MPI, Cloud TPU, Kubernetes); setting
          # coordinator_address, num_processes and process_id enables it too
          # (the keys: disco/distributed.py, default_config).
          distributed=distributed.default_config(),
          output_dir="",  # '' -> runs/meta-<UTC timestamp>
          checkpoint_every=50,  # meta-steps between checkpoints (0: only at end)
          keep_checkpoints=3,
          resume=False,  # continue from the latest checkpoint in output_dir
          log_every=1,  # meta-steps between metrics rows / progress updates
          # Where the metrics rows go besides metrics.csv: 'csv' (only there),
          # 'tensorboard' (output_dir/tensorboard), 'wandb' (output_dir/wandb,
          # offline unless WANDB_MODE=online) or a list, 'csv,tensorboard'.
          tracking="csv",
          # Held-out validation (disco/meta/validation.py, default_config):
          # every `every` meta-steps (0: off; disco-validate RUN_DIR --follow
          # validates the checkpoints from another process instead), fresh
          # agents of num_seeds seeds (from seed) are trained by the current
          # meta-parameters for total_env_steps on each of `envs` (dicts:
          # env, env_settings, optionally total_env_steps) by the disco-eval
          # loop (num_envs, rollout_len, ...: None is the rule's own);
          # their final returns (last_episodes) are normalised as
          # disco-compare does (references: entries for environments the
          # table lacks) into validation.csv and validation.png, and the best
          # meta-parameters go to best_meta_params.npz. E.g.
          # --config.validation.every=50 --config.validation.envs="({'env':
          # 'delayed_chain'}, {'env': 'gymnax/CartPole-v1'})"
          validation=validation_settings.default_config(),
          # Compiled programs are kept on disk and reused by later runs:
          # '' -> $JAX_COMPILATION_CACHE_DIR or ~/.cache/disco/jax (under
          # $XDG_CACHE_HOME if set), a folder, or 'off'.
          compilation_cache="",
          # Stop (exit status 3) after this many meta-steps in a row whose
          # meta-update was skipped for a non-finite meta-gradient.
          max_consecutive_skips=10,
      )
  )
