"""Benchmarks of a clone (not in the wheel): `benchmarks.suite` holds the suites `python -m benchmarks.suite NAME` runs."""
