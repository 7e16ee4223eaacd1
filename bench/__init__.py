"""The one bench harness (study.py, measures.py, run.py, verdict.py, page.py), its studies, probes and perf benches."""
