"""The core run: exercises and their registry, reading a submission, the check session, scoring."""
