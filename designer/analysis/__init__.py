"""Analyses of designs that need no solver: availability under failures (failures.py)."""
