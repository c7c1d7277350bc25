"""diffgrade: an autograder for the differential-attention exercise."""

__version__ = "0.1.0"
