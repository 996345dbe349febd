"""The version of PyPI's bcrypt whose API the sandbox's `bcrypt` has (passlib reads it here)."""

__version__ = "4.3.0"
