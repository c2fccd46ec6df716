"""Mistake: make_optimizer leaves Adam's default lr (1e-3) as the base lr, so the schedule is scaled by 1e-3.

CATCHES: schedule
DIAGNOSIS: base_lr

BASE: reference
"""


def make_optimizer(model, d_model, warmup_steps, factor=1.0):
    optimizer = torch.optim.Adam(model.parameters(), betas=(0.9, 0.98), eps=1e-9)
    scheduler = LambdaLR(optimizer, lambda step: noam_lr(step, d_model, warmup_steps, factor))
    return optimizer, scheduler
