"""The benchmark and measurement scripts, as a package.

Run one from the repository root as ``python -m benchmarks.<script> ...``;
``python benchmarks/<script>.py ...`` (the form the results pages quote) runs
it the same way. The scripts import each other as ``benchmarks.<script>``
and share ``timing`` (warm-up, interleaved rounds, medians, the matmul
reference), ``cli`` (the command-line and report shape) and ``meta_runs``
(folders of meta-training runs).
"""
