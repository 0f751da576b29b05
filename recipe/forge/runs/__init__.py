"""The run's files, shared by every engine and command: the run folder and its lock, durable writes, checkpoints and
their sources (eval, export), the metrics file and loggers, validation passes, rollout dumps, the run's length and
the fit loop that the embedded and prompt-only engines drive."""
