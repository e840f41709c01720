r"""Distillation of a Disco meta-network rule into a smaller student.

Used by ``disco-distill`` (``python -m disco.launch.distill``)::

  disco-distill --config.student.hidden_size=32 \
      --config.envs="('catch', 'lpg/dense')" --config.output_dir=runs/d32

trains agents with the teacher (Disco103 by default) on ``envs``, keeps
learner batches of theirs spread over their lifetimes (``dataset/``,
resumable), fits the student's meta-network to the teacher's targets
(``pi``, ``y``, ``z``), measures their agreement there and on
``held_out_envs``, and writes the student as a rule file
(``student.npz``) that ``disco-eval`` and ``disco-compare`` load.
"""

from ml_collections import config_dict


def get_config() -> config_dict.ConfigDict:
  p = config_dict.placeholder
  return config_dict.ConfigDict(
      dict(
          # 'disco103' or the path of a rule file of the Disco rule (e.g. a
          # meta-training run's best_meta_params.npz).
          teacher="disco103",
          # The student's meta-network (networks/meta_nets.py,
          # MetaNetConfig); None: the teacher's value. The default: a
          # 64-unit LSTM without the per-lifetime LSTM
          # (meta_hidden_size=0; a student with one cannot be fitted from
          # independent samples), reading its lifetime n / N and log N as
          # two inputs instead (lifetime_conditioning).
          student=dict(
              hidden_size=64,
              meta_hidden_size=0,
              lifetime_conditioning=True,
              prediction_size=p(int),  # must be the teacher's
              embedding_size=p(tuple),
              policy_channels=p(tuple),
              policy_target_channels=p(tuple),
              output_stddev=p(float),
              aux_stddev=p(float),
              policy_target_stddev=p(float),
              state_stddev=p(float),
              meta_policy_channels=p(tuple),
              meta_embedding_size=p(tuple),
              meta_pred_embedding_size=p(tuple),
              # 'disco103' (the teacher's inputs) or 'flat' (without z; the
              # default of a flat student_agent). None: the teacher's.
              input_option=p(str),
          ),
          # The agent the student trains: 'teacher' (the teacher's, with
          # its action-conditional model) or 'flat' (no action-conditional
          # model: no z or aux_pi, per-action q from a linear head; the
          # student reads no z and learns the pi and y targets alone).
          student_agent="teacher",
          # The torso of the student's agents (the sizes of its dense
          # layers, e.g. (256, 256)), written into the student's file so
          # that agents trained with it use it; None: the teacher's
          # (Disco103: (512, 512)). The fit does not depend on it.
          student_torso=p(tuple),
          # Environments whose agents give the fitting data, and held-out
          # ones measured only (spec strings as disco-compare's
          # config.envs: 'name' or 'name:key=value,...').
          envs=("catch",),
          held_out_envs=("catch:rows=8,columns=8",),
          dataset=dict(
              num_seeds=2,  # agents per environment
              seed=0,  # the held-out agents' seeds start at seed + 1000
              total_env_steps=40_000,  # each agent's lifetime
              samples_per_seed=8,  # learner batches kept, spread over it
              # Where the shards live: '' -> OUTPUT_DIR/dataset; a folder of
              # its own lets several students (runs) share one dataset.
              folder="",
              # The gathering runs' loop (None: the teacher's defaults, as
              # disco-eval trains it).
              num_envs=p(int),
              rollout_len=p(int),
              batch_size=p(int),
              replay_capacity=p(int),
              min_replay_size=p(int),
              iterations_per_call=p(int),
          ),
          fit=dict(
              steps=2000,  # Adam steps, each on one sample per environment
              learning_rate=1e-3,
              max_grad_norm=1.0,
              seed=0,  # the student's initialisation and sample draws
              log_every=100,  # steps per compiled call and fit.csv row
              # Weights of the KL from the teacher's targets to the
              # student's, per head.
              pi_cost=1.0,
              y_cost=1.0,
              z_cost=1.0,
          ),
          output_dir="",  # '' -> runs/distill-<UTC time>
          # Remove a finished distillation's files (dataset included) and run
          # again; without it, an unfinished run's folder resumes its dataset.
          overwrite=False,
          # Compiled programs are kept on disk and reused by later runs:
          # '' -> $JAX_COMPILATION_CACHE_DIR or ~/.cache/disco/jax (under
          # $XDG_CACHE_HOME if set), a folder, or 'off'.
          compilation_cache="",
      )
  )
