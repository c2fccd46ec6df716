"""Milestone m6's hidden checks: checks.py (the check groups), answers.py (the judge's right answers),
mistakes.py (the catalogue of known mistakes), stand_ins.py (stand-ins) and recipes.py (code sent to the worker)."""
