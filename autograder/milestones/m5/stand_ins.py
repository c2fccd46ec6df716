"""Milestone 5's stand-ins: correct judge-written versions of the loss, the schedule and make_optimizer,
registered with `stand_ins("m5", ...)` when this module is imported (checks.py imports it). Sent to the
worker as source when the group that judges them failed, so that train_step, evaluate and learning are
graded on their own merits."""
from __future__ import annotations

import torch

from autograder.grading.checks import stand_ins


def _stand_in_loss(logits, target, smoothing=0.0, pad_id=None):
    Vv = logits.size(-1)
    lp = logits.reshape(-1, Vv) - torch.logsumexp(logits.reshape(-1, Vv), -1, keepdim=True)
    t = target.reshape(-1)
    keep = torch.ones_like(t, dtype=torch.bool) if pad_id is None else t != pad_id
    cost = (1 - smoothing) * -lp.gather(1, torch.where(keep, t, 0)[:, None])[:, 0] + smoothing * (-lp).mean(1)
    return torch.where(keep, cost, torch.zeros_like(cost)).sum() / keep.sum()


def _stand_in_noam(step, d_model, warmup_steps, factor=1.0):
    step = max(step, 1)
    return factor * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)


def _stand_in_make_optimizer(model, d_model, warmup_steps, factor=1.0):
    opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    step = lambda s: factor * d_model ** -0.5 * min(max(s, 1) ** -0.5, max(s, 1) * warmup_steps ** -1.5)  # noqa
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, step)


stand_ins("m5", label_smoothed_cross_entropy=_stand_in_loss, noam_lr=_stand_in_noam,
          make_optimizer=_stand_in_make_optimizer)
