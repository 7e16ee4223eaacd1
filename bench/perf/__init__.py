"""Performance benches: throughput, CPU speed, step parts, memory, reliability, scale (python -m bench.perf.NAME)."""
