"""Dial lock: a combination lock opened one dial at a time (the second benchmark of the CPU presets)."""
