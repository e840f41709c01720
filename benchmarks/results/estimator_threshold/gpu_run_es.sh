#!/bin/bash
# GPU: issue 26, ES to the threshold on the published Catch 5x5 settings,
# 3 seeds in parallel on one GPU; every output packed into ONE archive
# ($OUT/es_runs.tar.gz), since the device returns a limited number of files.
# Not run yet. Like gpu_run.sh it installs wheels brought in .gpu/whl (the
# device has no network); unpack the archive and run
# `estimator_threshold.py report` on it.
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/whl/*.whl > /tmp/setup.log 2>&1 || { tail -20 /tmp/setup.log; exit 1; }
export PYTHONPATH=/tmp/site:$PWD
ln -sfn $PWD/configs disco/configs
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
el setup done
R=/tmp/es_runs; mkdir -p $R
VAL="--config.validation.envs=({'env':'catch'},) --config.validation.total_env_steps=40000 --config.validation.num_seeds=2"
BUDGET=${BUDGET:-480}
for s in 0 1 2; do
  d=$R/es-s$s; mkdir -p $d
  ( timeout $(( BUDGET - ($(date +%s) - T0) )) python3 -m disco.launch.meta_train \
      --config.estimator=es --config.seed=$((4 + s)) --config.init_seed=$((1 + s)) \
      --config.num_meta_steps=${GENS:-1000} --config.checkpoint_every=0 \
      --config.validation.every=${EVERY:-25} $VAL --config.output_dir=$d \
      > $d/log.txt 2>&1; echo "es s$s rc=$? $(( $(date +%s) - T0 ))s" ) &
done
# Pack what exists every 30 s, so a kill at the limit still returns files.
pack() { tar -czf $OUT/es_runs.tar.gz --exclude="*.npz" --exclude=checkpoints -C $R . 2>/dev/null; }
while [ -n "$(jobs -r)" ]; do sleep 30; pack; el packed; done
wait; pack; el done
for d in $R/es-s*; do echo "== $d"; tail -n 3 $d/validation.csv 2>/dev/null; tail -c 300 $d/log.txt | tr '\r' '\n' | tail -2; done
