"""The GPU check (bench/perf/gpu_check.py) as a package: the supervisor that runs each step in its own process
within a budget (supervisor.py), what a step's process shares (step.py), one module per step, and the page."""
