#!/bin/bash
# The prepared GPU check (issue 50), for a lent GPU machine with JAX for CUDA
# installed and no network. On this machine first, once per dependency change:
#
#   bash benchmarks/gpu_wheels.sh          # our dependencies as wheels in .gpu/whl
#
# then, on the GPU machine, from the repository root (shared/ beside it):
#
#   OUT=/path/for/outputs bash benchmarks/gpu_check.sh [PUBLISHED_COPY]
#
# Everything it writes is packed into ONE archive, $OUT/gpu_check.tar.gz,
# after every stage (the device returns few files; a kill at the time limit
# still returns what was done). Stages, most important first, each with its
# own time limit (BUDGET, default 560 s, bounds the whole):
#   1. parity at full float32 precision (tests/test_parity.py), and the
#      four-meta-step fixture with TF32 disabled everywhere
#      (NVIDIA_TF32_OVERRIDE=0) and with Triton GEMMs off: which of them makes
#      the value function match names the cause
#      (benchmarks/value_fn_backend_probe.py reproduces the failure on the
#      CPU by TF32-rounding the value function's products alone);
#   2. the README's first command (Disco103 on Catch, 40k steps);
#   3. ES runs towards the threshold on the published settings (3 seeds in
#      parallel; benchmarks/estimator_threshold.py report reads them);
#   4. the learner-step and meta-step ratios against the published code,
#      when PUBLISHED_COPY is given;
#   5. the largest meta-training population that fits (agents per GPU).
set -u
OUT=${OUT:-runs/gpu_check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
T0=$(date +%s)
BUDGET=${BUDGET:-560}
el() { echo "[$(($(date +%s) - T0))s] $*" | tee -a "$OUT/stages.log"; }
left() { echo $((BUDGET - ($(date +%s) - T0))); }
pack() {
  tar -czf "$OUT/gpu_check.tar.gz.tmp" --exclude="*.npz" --exclude=checkpoints \
    --exclude="gpu_check.tar.gz*" -C "$OUT" . 2>/dev/null &&
    mv "$OUT/gpu_check.tar.gz.tmp" "$OUT/gpu_check.tar.gz"
}
limit() { # seconds wanted -> seconds allowed (0: none left)
  local l
  l=$(left)
  [ "$l" -lt 30 ] && { echo 0; return; }
  echo $(($1 < l ? $1 : l))
}
within() { # SECONDS CMD...: CMD under a time limit, skipped (rc 124) if none left
  local t
  t=$(limit "$1")
  shift
  [ "$t" -gt 0 ] || return 124
  timeout "$t" "$@"
}

. benchmarks/gpu_setup.sh
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "import jax, sys; print(sys.version.split()[0], jax.__version__, jax.devices())"
} >>"$OUT/setup.log" 2>&1
el setup done
pack

# 1. Parity.
within 200 python3 -m pytest -q -p no:cacheprovider -n 4 \
  tests/test_parity.py >"$OUT/parity.log" 2>&1
el "parity rc=$?"
for variant in "NVIDIA_TF32_OVERRIDE=0" "XLA_FLAGS=--xla_gpu_enable_triton_gemm=false"; do
  within 90 env "$variant" python3 -m disco.parity -v \
    tests/data/meta_train_steps_s0.npz >"$OUT/fixture_${variant%%=*}.log" 2>&1
  el "fixture with $variant rc=$?"
done
pack

# 2. The README's first command.
within 150 python3 -m disco.launch.evaluate \
  --config.output_dir="$OUT/eval" >"$OUT/eval.log" 2>&1
el "README first command rc=$?"
pack

# 3. ES towards the threshold (published Catch 5x5 settings), 3 seeds at once.
t=$(limit 150)
if [ "$t" -gt 0 ]; then
  for s in 0 1 2; do
    timeout "$t" python3 -m disco.launch.meta_train --config.estimator=es \
      --config.seed=$((4 + s)) --config.init_seed=$((1 + s)) \
      --config.num_meta_steps=1000 --config.checkpoint_every=0 \
      --config.validation.every=25 \
      "--config.validation.envs=({'env':'catch'},)" \
      --config.validation.total_env_steps=40000 --config.validation.num_seeds=2 \
      --config.output_dir="$OUT/es-s$s" >"$OUT/es-s$s.log" 2>&1 &
  done
  wait
fi
el "ES runs done"
pack

# 4. Against the published code.
if [ $# -ge 1 ]; then
  within 60 python3 benchmarks/published_compare.py --published "$1" \
    --rounds 2 >"$OUT/cmp_eval.log" 2>&1
  within 60 python3 benchmarks/published_compare.py --published "$1" \
    --meta --rounds 2 >"$OUT/cmp_meta.log" 2>&1
  el "published ratios done"
  pack
fi

# 5. The largest population per GPU (doubling until out of memory).
agents=64
while [ $agents -le 8192 ]; do
  within 60 python3 -m disco.launch.meta_train \
    "--config.population=({'env':'catch','env_settings':{'rows':5,'columns':5},'num_agents':$agents},)" \
    --config.num_meta_steps=2 --config.checkpoint_every=0 \
    --config.output_dir="$OUT/pop-$agents" >"$OUT/pop-$agents.log" 2>&1
  rc=$?
  el "population of $agents agents rc=$rc"
  [ $rc -ne 0 ] && break # out of memory, or out of time
  agents=$((agents * 2))
done
rm -rf "$OUT"/pop-*/checkpoints
pack
el all done
tail -n 2 "$OUT"/*.log
