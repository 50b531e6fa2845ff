"""The version of Sandbox Lab (one place: the package, the CLI and the wheel read it here)."""

__version__ = "0.1.0"
