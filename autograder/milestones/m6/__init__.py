"""Milestone m6's hidden checks (checks.py)."""
