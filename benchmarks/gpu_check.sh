#!/bin/bash
# The GPU checks of BENCHMARKS.md "On a GPU", on a machine with disco
# installed for its accelerator (pip install -e '.[cuda13]') and the shared
# folder (fixtures, weights) beside the checkout. Logs go to OUT (default
# runs/gpu_check). Run from the repository root:
#
#   bash benchmarks/gpu_check.sh [PUBLISHED_COPY [GROOVE_COPY]]
#
# A (side by side, correctness): the README's first command, the parity and
# rule tests (at JAX's default precision, then at full float32), a short
# meta-training run. B (one at a time, timing): ours against the published
# code and against GROOVE, when their copies are given.
set -u
OUT=${OUT:-runs/gpu_check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
T0=$(date +%s)
el() { echo "[$(($(date +%s) - T0))s] $*"; }
python -c "import jax; print(jax.__version__, jax.devices())" | tee "$OUT/setup.log"
tests="tests/test_parity.py tests/test_disco_rule.py tests/test_agent.py tests/test_lpg.py tests/test_mixed_precision.py"
(disco-eval --config.output_dir="$OUT/eval") >"$OUT/eval.log" 2>&1 &
(python -m pytest -q -p no:cacheprovider -n 4 $tests) >"$OUT/pytest_default.log" 2>&1 &
(disco-meta-train --config.output_dir="$OUT/meta_train" --config.num_meta_steps=40) >"$OUT/meta_train.log" 2>&1 &
wait
el A done
(JAX_DEFAULT_MATMUL_PRECISION=highest python -m pytest -q -p no:cacheprovider -n 4 tests/test_parity.py) >"$OUT/pytest_highest.log" 2>&1
el parity at highest precision done
tail -n 3 "$OUT"/eval.log "$OUT"/pytest_*.log "$OUT"/meta_train.log
if [ $# -ge 1 ]; then
  python benchmarks/published_compare.py --published "$1" --rounds 3 >"$OUT/cmp_eval.log" 2>&1
  python benchmarks/published_compare.py --published "$1" --meta --rounds 3 >"$OUT/cmp_meta.log" 2>&1
  tail -n 8 "$OUT"/cmp_*.log
fi
if [ $# -ge 2 ]; then
  python benchmarks/groove_compare.py --groove "$2" --steps 5 >"$OUT/groove.log" 2>&1
  tail -n 8 "$OUT/groove.log"
fi
el all done
