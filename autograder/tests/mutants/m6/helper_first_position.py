"""Mistake: the logits are taken at the first position instead of the last.

CATCHES: greedy
DIAGNOSIS: next_token_logits_wrong

BASE: reference
"""


def _next_token_logits(model, ys, memory, src_mask):
    tgt_mask = causal_mask(ys.size(1), device=ys.device)                  # [t, t]
    out = model.decode(ys, memory, src_mask, tgt_mask)                     # [B, t, d_model]
    return model.generator(out[:, 0])                                      # [B, V]
