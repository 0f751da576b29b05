"""Scripted policies and fault-injecting environments for tests and benchmarks (no model needed)."""
