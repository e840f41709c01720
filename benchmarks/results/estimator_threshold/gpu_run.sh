#!/bin/bash
# GPU: issue 26, meta-steps to threshold per estimator (published Catch 5x5
# settings), 3 seeds each; one chain per estimator, seeds in turn (the
# compile cache serves seeds 1 and 2).
set -u
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/whl/*.whl > $OUT/setup.log 2>&1 || { tail -20 $OUT/setup.log; exit 1; }
export PYTHONPATH=/tmp/site:$PWD
ln -sfn $PWD/configs disco/configs
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader >> $OUT/setup.log 2>&1
el setup done
VAL="--config.validation.envs=({'env':'catch'},) --config.validation.total_env_steps=40000 --config.validation.num_seeds=2"
run() {  # estimator seed steps every timeout extra...
  local e=$1 s=$2 n=$3 v=$4 t=$5; shift 5
  local d=$OUT/$e-s$s; mkdir -p $d
  local left=$(( ${DEADLINE:-560} - ($(date +%s) - T0) ))
  [ $left -lt 30 ] && { echo "$e s$s skipped (no time)"; return; }
  t=$(( t < left ? t : left ))
  timeout $t python3 -m disco.launch.meta_train --config.estimator=$e \
    --config.seed=$((4 + s)) --config.init_seed=$((1 + s)) \
    --config.num_meta_steps=$n --config.checkpoint_every=0 \
    --config.validation.every=$v $VAL --config.output_dir=$d "$@" \
    > $d/log.txt 2>&1
  echo "$e s$s rc=$? $(( $(date +%s) - T0 ))s"
}
chain() { local e=$1 n=$2 v=$3 t=$4; shift 4
  for s in 0 1 2; do run $e $s $n $v $t "$@"; done; }
( chain backprop 1000 250 300 ) > $OUT/chain_bp.log 2>&1 &
( chain pes 1000 250 300 --config.lifetime_meta_steps=100 ) > $OUT/chain_pes.log 2>&1 &
( chain es 300 25 170 ) > $OUT/chain_es.log 2>&1 &
wait; el done
cat $OUT/chain_*.log
for d in $OUT/*-s*; do echo "== $d"; tail -c 400 $d/log.txt | tr '\r' '\n' | tail -3; done
rm -rf $OUT/*/checkpoints $OUT/*/*.npz
