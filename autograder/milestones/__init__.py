"""Course content for the grader: one folder per milestone (mN/checks.py: its groups, right answers,
mistakes and stand-ins), and reference.py, the judge's Transformer they all share."""
