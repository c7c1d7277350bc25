"""diffgrade: an autograding harness for deep-learning exercises."""

from pathlib import Path

__version__ = "0.2.0"

# The installed package, and the folder above it (in a source checkout: the repository's root).
PACKAGE_DIR = Path(__file__).resolve().parent
CHECKOUT_DIR = PACKAGE_DIR.parent
