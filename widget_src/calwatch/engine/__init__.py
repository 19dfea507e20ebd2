"""Numerics only: array in, array out. Never imports widgets, Jupyter or frames of the monitor."""
