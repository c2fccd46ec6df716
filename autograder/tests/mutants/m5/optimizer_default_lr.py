"""Mistake: make_optimizer leaves Adam's default lr (1e-3) as the base lr, so the schedule is scaled by 1e-3.

CATCHES: schedule
DIAGNOSIS: base_lr

BASE: reference
"""


def make_optimizer(model, d_model, warmup_steps, factor=1.0):
    """Adam with the paper's settings, and the warm-up schedule.

    Returns:
        (optimizer, scheduler): torch.optim.Adam over model.parameters() with lr=1.0,
        betas=(0.9, 0.98), eps=1e-9, and a torch.optim.lr_scheduler.LambdaLR whose factor at
        scheduler step s is noam_lr(s, d_model, warmup_steps, factor). (LambdaLR multiplies the
        base lr, 1.0, by that factor, so the lr IS noam_lr.) Call scheduler.step() after each
        optimizer.step().
    """
    optimizer = torch.optim.Adam(model.parameters(), betas=(0.9, 0.98), eps=1e-9)
    scheduler = LambdaLR(optimizer, lambda step: noam_lr(step, d_model, warmup_steps, factor))
    return optimizer, scheduler
