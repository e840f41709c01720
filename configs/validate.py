r"""Validation of a meta-training run's checkpoints on held-out environments.

Used by ``disco-validate`` (``python -m disco.launch.validate``)::

  disco-validate runs/my-rule --follow

validates every checkpoint of the run in ``runs/my-rule`` as it appears,
with the run's own ``config.validation`` settings (override any with
``--config.validation.<key>=<value>``), until the run ends; without
``--follow`` it validates the latest checkpoint once. The outputs are those
of in-process validation: ``validation.csv``, ``validation.png`` and
``best_meta_params.npz`` in the run's folder. Modules and ruleset files the
run's config names are loaded only when repeated on the command line
(``--config.imports``, ``--config.benchmark_paths``).
"""

from ml_collections import config_dict


def get_config() -> config_dict.ConfigDict:
  return config_dict.ConfigDict(
      dict(
          run_dir="",  # the meta-training run's folder (or the first argument)
          # Validate each new checkpoint until the run has finished (the
          # --follow flag); False: the latest checkpoint, once.
          follow=False,
          poll_seconds=10.0,  # following: seconds between looks
          # Following: stop after this many seconds without a new checkpoint
          # (a run that was killed or diverged; 0: never).
          max_idle_seconds=3600.0,
          # Code and ruleset files the run's config names are not loaded
          # from its folder (someone else's config.json must not run code
          # here): repeat the run's config.imports (comma-separated modules)
          # and every XLand env_settings.benchmark_path (comma-separated
          # files) to load them.
          imports="",
          benchmark_paths="",
          # Overrides of the run's config.validation (None: the run's value;
          # the keys: disco/meta/validation.py, default_config). `every`
          # picks the checkpoints: those at multiples of it (0: all).
          validation=dict(
              every=config_dict.placeholder(int),
              envs=config_dict.placeholder(tuple),
              num_seeds=config_dict.placeholder(int),
              seed=config_dict.placeholder(int),
              total_env_steps=config_dict.placeholder(int),
              last_episodes=config_dict.placeholder(int),
              iterations_per_call=config_dict.placeholder(int),
              at_start=config_dict.placeholder(bool),
              references=config_dict.placeholder(tuple),
              num_envs=config_dict.placeholder(int),
              rollout_len=config_dict.placeholder(int),
              batch_size=config_dict.placeholder(int),
              replay_capacity=config_dict.placeholder(int),
              min_replay_size=config_dict.placeholder(int),
              update_epochs=config_dict.placeholder(int),
              num_minibatches=config_dict.placeholder(int),
          ),
          # Compiled programs are kept on disk and reused by later runs:
          # '' -> $JAX_COMPILATION_CACHE_DIR or ~/.cache/disco/jax (under
          # $XDG_CACHE_HOME if set), a folder, or 'off'.
          compilation_cache="",
      )
  )
