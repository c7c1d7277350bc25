"""The graded checks of the differential-attention exercise, one module per tier."""
