"""Mistake: Adam keeps its default betas and eps.

CATCHES: schedule
DIAGNOSIS: adam_settings

BASE: reference
"""


def make_optimizer(model, d_model, warmup_steps, factor=1.0):
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0)
    scheduler = LambdaLR(optimizer, lambda step: noam_lr(step, d_model, warmup_steps, factor))
    return optimizer, scheduler
