"""Benchmarks: run from the checkout's root as ``.venv/bin/python -m benchmarks.NAME``; each
prints its figures and can write its section of ``benchmarks/RESULTS.md``."""
