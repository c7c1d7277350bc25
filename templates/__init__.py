"""Jinja templates of the reports; installed as the package data of ``grader.templates``."""
