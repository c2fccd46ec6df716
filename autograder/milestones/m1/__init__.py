"""Milestone m1's hidden checks (checks.py)."""
