"""Milestone m2's hidden checks (checks.py)."""
