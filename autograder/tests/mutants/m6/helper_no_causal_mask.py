"""Mistake: the prefix is decoded without the causal mask.

CATCHES: greedy
DIAGNOSIS: no_causal_mask

BASE: reference
"""


def _next_token_logits(model, ys, memory, src_mask):
    tgt_mask = causal_mask(ys.size(1), device=ys.device)                  # [t, t]
    out = model.decode(ys, memory, src_mask, None)                         # [B, t, d_model]
    return model.generator(out[:, -1])                                     # [B, V]
