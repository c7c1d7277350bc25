"""The graded checks of the DIFF V2 exercise, one module per tier."""
