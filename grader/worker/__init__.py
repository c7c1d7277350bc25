"""The worker: the only place where submitted code runs, in a separate process."""
