"""Benchmarks of a clone (not in the wheel): `benchmarks.suite` holds the suites `mmspec bench --suite` runs."""
