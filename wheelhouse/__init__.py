"""wh: get a Python GPU serving stack onto a machine with no network, and prove it works there."""

__all__ = ["__version__"]

__version__ = "0.1.0"
