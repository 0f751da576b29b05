"""Helpers of tests and reliability attacks that need recipe (agent_system/testing holds those that do not)."""
