"""Mistake: make_optimizer's LambdaLR calls noam_lr without `factor`, so the factor is dropped.

CATCHES: schedule
DIAGNOSIS: optimizer_factor_ignored

BASE: reference
"""


def make_optimizer(model, d_model, warmup_steps, factor=1.0):
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    scheduler = LambdaLR(optimizer, lambda step: noam_lr(step, d_model, warmup_steps))
    return optimizer, scheduler
