r"""Comparison: rules x environments x seeds, with statistics.

Used by ``disco-compare`` (``python -m disco.launch.compare``); override any
value on the command line, e.g.::

  disco-compare --config.rules="('disco103', 'actor_critic', 'ppo')" \
      --config.envs="('catch', 'delayed_chain', 'gymnax/CartPole-v1')" \
      --config.num_seeds=5 --config.total_env_steps=100000

Every rule is trained on every environment with ``num_seeds`` seeds (vmapped)
by the ``disco-eval`` loop, one run after the other, each into
``output_dir/runs/<rule>/<environment>``; then the statistics are written
(``report.md``, ``results.csv``, figures). A run that finished is never
repeated, so an interrupted sweep continues where it stopped.
"""

from ml_collections import config_dict

from disco import checks


def get_config() -> config_dict.ConfigDict:
  return config_dict.ConfigDict(
      dict(
          # Registered rules or .npz files of meta-parameters.
          rules=("disco103", "actor_critic"),
          # Registered environments, each optionally with settings:
          # "catch:rows=5,columns=5".
          envs=("catch",),
          # Comma-separated Python modules to import first (modules that
          # register their own rules or environments).
          imports="",
          weights=config_dict.placeholder(str),  # Disco103 file
          num_seeds=5,  # per run; seeds seed .. seed + num_seeds - 1
          seed=0,
          total_env_steps=40_000,  # per seed and run
          # Each run's preset, for the settings left unset ('auto': the
          # rule's preset for the environment, 'none', or a preset's name;
          # configs/evaluate.py).
          preset="auto",
          # The disco-eval loop of every run (configs/evaluate.py). None: each
          # rule's own (PPO's on-policy loop with sample reuse), else the
          # published notebook's.
          num_envs=config_dict.placeholder(int),
          rollout_len=config_dict.placeholder(int),
          batch_size=config_dict.placeholder(int),
          replay_capacity=config_dict.placeholder(int),
          min_replay_size=config_dict.placeholder(int),
          iterations_per_call=50,
          last_episodes=500,  # final score: mean return of the last episodes
          # Per-rule changes of the disco-eval settings, e.g.
          # "ppo:num_envs=8,rollout_len=32,batch_size=8,learning_rate=1e-3"
          # or "ppo:normalize_rewards=True".
          rule_overrides=(),
          # Per-rule hyper-parameters (loss costs, discounts, ...), e.g.
          # --config.hyper_params.actor_critic.entropy_cost=0.01: every
          # registered rule of config.rules gets its keys and defaults.
          hyper_params=dict(),
          # Per-rule other settings of the rule's factory (switches, sizes),
          # e.g. --config.rule_kwargs.ppo.normalize_advantages=False.
          rule_kwargs=dict(),
          # Every rule's agent-network changes (the keys of disco-eval's
          # config.network; None: the rule's), e.g.
          # --config.network.obs_embedding=minigrid.
          network=checks.load_config("evaluate").network,
          # The Gaussian policy's settings on the continuous-action
          # environments of the comparison (the keys of disco-eval's
          # config.policy; discrete environments take none), e.g.
          # --config.policy.squash=True.
          policy=checks.load_config("evaluate").policy,
          # Tuning of baselines per environment: every point of ``grid``
          # (learning_rate and the rule's hyper-parameters, e.g.
          # "learning_rate=(3e-4,1e-3),entropy_cost=(0.01,0.2)") trains
          # num_seeds seeds from ``seed`` (kept apart from the reported
          # seeds); the point of the best mean normalised final return
          # trains the reported seeds, as '<rule>-tuned' (and with
          # keep_untuned the rule's own settings too). The choices, every
          # point's score and the chosen point's score on the reported
          # seeds: tuning.csv and the report.
          tune=dict(
              rules=(),
              grid="",
              num_seeds=3,
              seed=1000,
              # None: config.total_env_steps.
              total_env_steps=config_dict.placeholder(int),
              keep_untuned=False,
              # Train a rule's grid as one program vmapped over the points
              # where they differ only in numbers (learning_rate and
              # hyper-parameters the rule uses in arithmetic); else, or
              # with False, point by point. The log and report say which.
              vmap=True,
          ),
          # Statistics. Every test is two-sided (null: no difference).
          test="welch",  # welch | mann_whitney | bootstrap | permutation
          alpha=0.05,
          # One Holm-Bonferroni family over every environment's table (and
          # the all-environments one) rather than one per table.
          holm_across_envs=False,
          power=0.8,  # target power of the seeds-needed estimate
          # The a-priori minimum effect of interest (|Hedges' g|) of the
          # seeds-needed estimate; None: the observed effect.
          min_effect=config_dict.placeholder(float),
          confidence=0.95,  # level of every interval
          # rliable's task bootstrap: intervals also resample environments.
          task_bootstrap=False,
          bootstrap_reps=2000,
          num_points=20,  # evaluation points of the sample-efficiency curves
          # The references scores are normalised by: "default" (an optimal
          # policy or the best published return per environment:
          # docs/reference/environments.md) or "discogen" (DiscoGen's PPO
          # baselines for MinAtar, Brax and Craftax, the default elsewhere).
          reference_set="default",
          # Normalisation entries for environments the table lacks (or to
          # replace its): "env:random=R,reference=X,source=TEXT".
          references=(),
          # Aggregate these disco-eval output folders instead of running.
          run_dirs=(),
          # "i/n": run only every n-th run from the i-th (n processes share a
          # sweep; aggregate with run_dirs or a last call without shard).
          shard="",
          output_dir="",  # '' -> runs/compare-<UTC timestamp>
          # Where every run's metrics go besides its metrics.csv: 'csv',
          # 'tensorboard' (<run>/tensorboard: tensorboard --logdir
          # output_dir/runs shows them all), 'wandb' or a list of them.
          tracking="csv",
          # Compiled programs are kept on disk and reused by later runs:
          # '' -> $JAX_COMPILATION_CACHE_DIR or ~/.cache/disco/jax (under
          # $XDG_CACHE_HOME if set), a folder, or 'off'.
          compilation_cache="",
      )
  )
