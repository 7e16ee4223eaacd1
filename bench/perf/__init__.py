"""Performance benches and the GPU check, each a step of the one runner (`python -m bench.run --list`)."""
