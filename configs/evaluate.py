r"""Meta-evaluation: train agents with a fixed update rule and report returns.

Used by ``disco-eval`` (``python -m disco.launch.evaluate``); override any
value on the command line, e.g.::

  disco-eval --config.rule=actor_critic --config.total_env_steps=20000 \
      --config.num_seeds=3

The defaults are the published evaluation notebook's: Disco103 on Catch 8x8,
2 environments x 29 steps per iteration, a replay of 1024 trajectories and
learner batches of 64 (a rule registered with its own loop, such as PPO,
uses that one unless the loop settings are given).
"""

from ml_collections import config_dict

from disco import distributed


def get_config() -> config_dict.ConfigDict:
  return config_dict.ConfigDict(
      dict(
          # A registered rule ('disco103': the published weights; actor_critic,
          # policy_gradient, ppo, mpo, spo, disco; 'list' prints them all) or
          # the path of a .npz of meta-parameters saved by
          # disco.weights.save_meta_params with {'rule': ...} metadata.
          rule="disco103",
          # Path of the Disco103 weights (default: found or downloaded), or of
          # meta-parameters for a named rule that has them.
          weights=config_dict.placeholder(str),
          # Comma-separated Python modules to import first (modules that register
          # their own rules or environments).
          imports="",
          env="catch",  # a registered environment; 'list' prints them all
          env_settings=dict(rows=8, columns=8),
          # Settings of the rule for the environment, for the keys below that
          # are left unset (a flag always wins): 'auto' (the rule's first
          # preset whose environments match, if any), 'none', or a preset's
          # name. The presets: docs/reference/presets.md; config.json records
          # the one applied.
          preset="auto",
          total_env_steps=40_000,  # per seed; rounded up to whole calls
          num_seeds=1,
          seed=0,  # seeds seed .. seed + num_seeds - 1 run together (vmapped)
          # The training loop. None: the rule's own (its registry entry;
          # PPO: purejaxrl's 4 envs x 128 steps, no replay, 4 epochs x 4
          # minibatches), else the published notebook's: 2 envs x 29 steps,
          # a replay of 1024 trajectories, batches of 64 from 64 stored.
          num_envs=config_dict.placeholder(int),
          rollout_len=config_dict.placeholder(int),
          batch_size=config_dict.placeholder(int),
          # 0: no replay, learn on each rollout (batch_size = num_envs).
          replay_capacity=config_dict.placeholder(int),
          min_replay_size=config_dict.placeholder(int),
          # Sample reuse: passes over each learner batch, each in
          # num_minibatches learner steps on a shuffled split of its
          # trajectories (batch_size must be divisible by it).
          update_epochs=config_dict.placeholder(int),
          num_minibatches=config_dict.placeholder(int),
          # True: the agent acts on and learns from observations standardised
          # by their running mean and variance (float observations only).
          # None: off.
          normalize_observations=config_dict.placeholder(bool),
          # True: the learner's rewards are divided by the running standard
          # deviation of a discounted return; reported returns stay the
          # environment's. None: off.
          normalize_rewards=config_dict.placeholder(bool),
          # The discount of that return (None: 0.99).
          normalize_rewards_discount=config_dict.placeholder(float),
          # The learner's rewards clipped to [-reward_clip, reward_clip]
          # (Atari's 1.0); reported returns stay the environment's. None or
          # 0: no clip.
          reward_clip=config_dict.placeholder(float),
          learning_rate=config_dict.placeholder(float),  # None: rule's default
          # Overrides of the rule's hyper-parameters (loss costs, discounts,
          # ...), e.g. --config.hyper_params.entropy_cost=0.01; the keys are
          # those of the rule the command line names, with its defaults.
          hyper_params=dict(),
          # Overrides of the rule's other settings (its factory's keyword
          # arguments), e.g. --config.rule_kwargs.clip_value=False; the keys
          # are those of the rule the command line names, with its defaults
          # (disco-eval --describe_rule=NAME lists them).
          rule_kwargs=dict(),
          # The agent optimiser (None: the rule's setting): the elementwise
          # clip of Adam's update direction and the clip of the gradients'
          # global norm (0 turns either off), and Adam's epsilon.
          max_abs_update=config_dict.placeholder(float),
          max_grad_norm=config_dict.placeholder(float),
          adam_eps=config_dict.placeholder(float),
          # Decay the learning rate linearly to 0 over the run (PPO's
          # registered settings do; None: the rule's setting).
          anneal_learning_rate=config_dict.placeholder(bool),
          # Transitions the losses average over: "valid" (every transition with a
          # valid target) or "published" (as the published DiscoRL agent: not
          # those that start at an episode's last step). None: the rule's.
          loss_mask=config_dict.placeholder(str),
          # Overrides of the rule's agent network (None: the rule's setting);
          # e.g. conv_channels=(16,) puts a convolutional torso in front of the
          # dense one for image-like observations such as MinAtar's, and
          # compute_dtype="bfloat16" computes the network in bfloat16
          # (float32 parameters and outputs; for GPUs and TPUs);
          # obs_embedding="minigrid" embeds MiniGrid/XLand tile and colour ids;
          # "one_hot" reads state indices (lpg/* with env_settings
          # observation="index") as one-hot vectors, its first layer a gather.
          network=dict(
              dense=config_dict.placeholder(tuple),
              conv_channels=config_dict.placeholder(tuple),
              model_lstm_size=config_dict.placeholder(int),
              model_head_hiddens=config_dict.placeholder(tuple),
              compute_dtype=config_dict.placeholder(str),
              activation=config_dict.placeholder(str),  # "relu" or "tanh"
              activate_final=config_dict.placeholder(bool),
              separate_torsos=config_dict.placeholder(bool),
              head_w_init_std=config_dict.placeholder(float),
              # "minigrid": embed MiniGrid/XLand tile and colour ids, then
              # xland-minigrid's PPO convolutions (agent_nets.NetConfig).
              obs_embedding=config_dict.placeholder(str),
              obs_embedding_dim=config_dict.placeholder(int),
          ),
          # The Gaussian policy of continuous-action environments (None: its
          # defaults; discrete environments take none): squash=True maps
          # tanh-squashed samples into the action bounds (else the
          # environment clips them); log_std "state_independent" (a learnt
          # vector, as purejaxrl's PPO) or "state_dependent" (a network
          # head); init_log_std, where the log standard deviation starts.
          policy=dict(
              squash=config_dict.placeholder(bool),
              log_std=config_dict.placeholder(str),
              init_log_std=config_dict.placeholder(float),
          ),
          iterations_per_call=50,  # iterations per compiled call
          last_episodes=500,  # final score: mean return of the last episodes
          output_dir="",  # '' -> runs/eval-<rule>-<UTC timestamp>
          # Where the metrics go besides metrics.csv: 'csv' (only there),
          # 'tensorboard' (output_dir/tensorboard), 'wandb' (output_dir/wandb,
          # offline unless WANDB_MODE=online) or a list, 'csv,tensorboard'.
          tracking="csv",
          # Replace an earlier evaluation in output_dir: its files go, and
          # nothing else (another kind of run or a file of yours is refused).
          overwrite=False,
          # Compiled programs are kept on disk and reused by later runs:
          # '' -> $JAX_COMPILATION_CACHE_DIR or ~/.cache/disco/jax (under
          # $XDG_CACHE_HOME if set), a folder, or 'off'.
          compilation_cache="",
          # Seeds spread over several processes (hosts), on jax.distributed:
          # start the same command in every process; each trains a contiguous
          # block of the seeds and process 0 writes the outputs. enabled=True
          # alone detects the cluster (SLURM, Open MPI, Cloud TPU,
          # Kubernetes); setting coordinator_address, num_processes and
          # process_id enables it too (the keys: disco/distributed.py,
          # default_config).
          distributed=distributed.default_config(),
      )
  )
