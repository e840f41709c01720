#!/bin/bash
# Issue 51's measurements at budgets a 2-core CPU cannot afford, for a GPU
# machine set up as for benchmarks/gpu_check.sh (our wheels in .gpu/whl, the
# suite extras among them: bash benchmarks/gpu_wheels.sh after
# pip install -e '.[brax,craftax,sokoban]'), from the repository root:
#
#   OUT=/path/for/outputs bash benchmarks/gpu_open_envs.sh PUREJAXRL_CHECKOUT
#
# Stages (each under its own time limit; BUDGET, default 3300 s, bounds the
# whole; every stage's output is packed into $OUT/gpu_open_envs.tar.gz as
# soon as it ends):
#   1. continuous PPO against purejaxrl's ppo_continuous_action.py at its
#      published batch (2048 environments x 10 steps, 4 epochs x 32
#      minibatches), 3 seeds each, side by side in one process per
#      environment: Pendulum-v1 (2M steps), brax/inverted_pendulum (2M),
#      brax/hopper and brax/halfcheetah (10M each; purejaxrl's default
#      budget is 50M);
#   2. PPO and Disco103 (its replay loop) on Craftax-Classic-Symbolic and
#      Sokoban at 5M environment steps per seed, 3 seeds, one disco-compare
#      run (returns, achievements and the statistics report);
#   3. MPO, SPO and PPO on Pendulum-v1 and brax/inverted_pendulum at 1M
#      steps, 3 seeds (one disco-compare run).
# benchmarks/results/continuous_control/ holds the CPU-budget versions of
# each stage and the commands that produced them.
set -u
[ $# -ge 1 ] || { echo "usage: OUT=... bash $0 PUREJAXRL_CHECKOUT" >&2; exit 2; }
PUREJAXRL=$1
OUT=${OUT:-runs/gpu_open_envs}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
T0=$(date +%s)
BUDGET=${BUDGET:-3300}
el() { echo "[$(($(date +%s) - T0))s] $*" | tee -a "$OUT/stages.log"; }
pack() {
  tar -czf "$OUT/gpu_open_envs.tar.gz.tmp" --exclude="*.npz" \
    --exclude="gpu_open_envs.tar.gz*" -C "$OUT" . 2>/dev/null &&
    mv "$OUT/gpu_open_envs.tar.gz.tmp" "$OUT/gpu_open_envs.tar.gz"
}
within() { # SECONDS CMD...: CMD under min(SECONDS, what is left)
  local l t
  l=$((BUDGET - ($(date +%s) - T0)))
  [ "$l" -lt 30 ] && return 124
  t=$(($1 < l ? $1 : l))
  shift
  timeout "$t" "$@"
}

. benchmarks/gpu_setup.sh
python3 -c "import jax, sys; print(sys.version.split()[0], jax.__version__, jax.devices())" \
  >>"$OUT/setup.log" 2>&1
el setup done

# 1. PPO against purejaxrl.
for run in "gymnax/Pendulum-v1 2000000" "brax/inverted_pendulum 2000000" \
  "brax/hopper 10000000" "brax/halfcheetah 10000000"; do
  set -- $run
  within 900 python3 -m benchmarks.ppo_continuous_vs_purejaxrl \
    --purejaxrl "$PUREJAXRL" --env "$1" --seeds 3 --num_envs 2048 \
    --total_env_steps "$2" --repeats 2 --csv "$OUT/ppo_vs_purejaxrl.csv" \
    >"$OUT/ppo_${1//\//_}.log" 2>&1
  el "PPO vs purejaxrl on $1 rc=$?"
  pack
done

# 2. Craftax-Classic and Sokoban: PPO and Disco103.
within 1500 python3 -m disco.launch.compare \
  --config.rules="('ppo', 'disco103')" \
  --config.envs="('craftax/Craftax-Classic-Symbolic-v1', 'jumanji/Sokoban-v0')" \
  --config.num_seeds=3 --config.total_env_steps=5000000 \
  --config.output_dir="$OUT/open_envs" >"$OUT/open_envs.log" 2>&1
el "Craftax and Sokoban rc=$?"
pack

# 3. MPO and SPO against PPO on continuous control.
within 1200 python3 -m disco.launch.compare \
  --config.rules="('ppo', 'mpo', 'spo')" \
  --config.envs="('gymnax/Pendulum-v1', 'brax/inverted_pendulum')" \
  --config.num_seeds=3 --config.total_env_steps=1000000 \
  --config.hyper_params.ppo.reward_scale=0.01 \
  --config.output_dir="$OUT/mpo_spo" >"$OUT/mpo_spo.log" 2>&1
el "MPO/SPO vs PPO rc=$?"
pack
el all done
