"""The built-in exercises: each a package providing an ``exercise()`` factory (grader.core.registry)."""
