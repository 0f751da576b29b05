"""Environment packages, one folder per environment family (env, manager, extras)."""
