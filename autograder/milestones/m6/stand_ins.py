"""Milestone 6's stand-in: a correct judge-written `_next_token_logits`, the optional helper of the stub,
registered with `stand_ins("m6", ...)` when this module is imported (checks.py imports it). Sent to the
worker as source when greedy proved the student's helper wrong, so the later groups judge the decoding
functions on their own merits."""
from __future__ import annotations

import torch

from autograder.grading.checks import stand_ins


def _stand_in_next_token_logits(model, ys, memory, src_mask):
    t = ys.size(1)
    mask = torch.ones(t, t, dtype=torch.bool, device=ys.device).tril()
    return model.generator(model.decode(ys, memory, src_mask, mask)[:, -1])


stand_ins("m6", _next_token_logits=_stand_in_next_token_logits)
