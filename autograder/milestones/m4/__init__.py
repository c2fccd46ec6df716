"""Milestone m4's hidden checks (checks.py)."""
