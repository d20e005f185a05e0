"""Benchmarks: timed runs kept out of the test suite (`nox -s bench`; docs/gate.md)."""
