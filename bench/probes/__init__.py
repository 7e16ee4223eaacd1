"""Probes the measures run (`python -m bench.run NAME -- ARGS`); answered probes left the tree (bench/results)."""
