"""Mistake: the schedule uses step + 1.

CATCHES: schedule
DIAGNOSIS: noam_off_by_one

BASE: reference
"""


def noam_lr(step, d_model, warmup_steps, factor=1.0):
    step = step + 1
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)
