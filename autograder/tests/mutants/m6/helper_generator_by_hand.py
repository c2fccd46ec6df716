"""Mistake: the helper applies the generator's weights by hand instead of calling model.generator.

CATCHES: greedy, sampling, beam, batched
DIAGNOSIS: generator_not_used

BASE: reference
"""


def _next_token_logits(model, ys, memory, src_mask):
    t = ys.size(1)
    out = model.decode(ys, memory, src_mask, causal_mask(t, device=ys.device))    # [B, t, d_model]
    w, b = model.generator.weight, model.generator.bias
    return out[:, -1] @ w.T + b                                                   # [B, V]
