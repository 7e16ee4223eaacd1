"""The GPU check's steps (bench/perf/gpu_check.py declares them for the runner, bench/run.py), one module each."""
