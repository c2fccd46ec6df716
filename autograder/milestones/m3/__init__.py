"""Milestone m3's hidden checks (checks.py)."""
