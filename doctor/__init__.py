"""Bundled data; see wheelhouse/resources.py."""
