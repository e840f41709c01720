# Sourced by the GPU scripts (gpu_check.sh, gpu_open_envs.sh) from the
# repository root with $OUT set: installs the wheels that
# benchmarks/gpu_wheels.sh put in .gpu/whl (the GPU machine has no network)
# into /tmp/site, puts them and the checkout on PYTHONPATH, and lets the
# package find its configs; without .gpu/whl, the installed packages are used.
if [ -d .gpu/whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --target /tmp/site .gpu/whl/*.whl >"$OUT/setup.log" 2>&1 ||
    { tail -20 "$OUT/setup.log"; exit 1; }
  export PYTHONPATH=/tmp/site:$PWD
  ln -sfn "$PWD/configs" disco/configs
fi
