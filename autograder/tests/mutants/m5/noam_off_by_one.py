"""Mistake: the schedule uses step + 1.

CATCHES: schedule
DIAGNOSIS: noam_off_by_one

BASE: reference
"""


def noam_lr(step, d_model, warmup_steps, factor=1.0):
    """The learning rate of the paper's section 5.3 at a given step (a Python float).

        lr = factor * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)

    It rises linearly for warmup_steps steps, peaks at step = warmup_steps, then decays as
    1/sqrt(step). Step 0 is treated as step 1 (0^-0.5 would divide by zero).

    Example: noam_lr(4000, 512, 4000) is about 6.99e-4.
    """
    step = step + 1
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)
