"""Generic tools for exercises that grade tensor functions: comparison, tolerances, cases, shrinking, diagnosis."""
