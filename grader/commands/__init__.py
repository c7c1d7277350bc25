"""The ``diffgrade`` commands: the entry point, grading a file or a class, the handout, the Gradescope bundle, the listing."""
