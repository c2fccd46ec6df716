"""Mistake: step 0 is not treated as step 1 (division by zero).

CATCHES: schedule
DIAGNOSIS: noam_step_zero

BASE: reference
"""


def noam_lr(step, d_model, warmup_steps, factor=1.0):
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)
