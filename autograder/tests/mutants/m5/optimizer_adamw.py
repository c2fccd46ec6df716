"""Mistake: make_optimizer builds torch.optim.AdamW instead of torch.optim.Adam.

CATCHES: schedule
DIAGNOSIS: optimizer_kind

BASE: reference
"""


def make_optimizer(model, d_model, warmup_steps, factor=1.0):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    scheduler = LambdaLR(optimizer, lambda step: noam_lr(step, d_model, warmup_steps, factor))
    return optimizer, scheduler
