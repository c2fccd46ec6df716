"""Milestone m5's hidden checks (checks.py)."""
