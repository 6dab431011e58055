"""Benchmarks: each runs as `python -m bench.<name>` from the checkout (docs/benchmarks.md)."""
