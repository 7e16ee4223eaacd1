"""Probes: scripts that each answer one question (python -m bench.probes.NAME), and the measures run as modules."""
