"""Benchmarks of enzyme_py (run the scripts here directly; see README.md)."""
