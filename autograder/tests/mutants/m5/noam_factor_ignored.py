"""Mistake: noam_lr leaves out `factor` (the paper's formula has none).

CATCHES: schedule
DIAGNOSIS: noam_factor_ignored

BASE: reference
"""


def noam_lr(step, d_model, warmup_steps, factor=1.0):
    step = max(step, 1)
    return d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)
