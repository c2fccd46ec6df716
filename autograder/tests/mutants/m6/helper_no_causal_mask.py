"""Mistake: the prefix is decoded without the causal mask.

CATCHES: greedy
DIAGNOSIS: no_causal_mask

BASE: reference
"""


def _next_token_logits(model, ys, memory, src_mask):
    """A helper for the functions below (optional): the logits [B, V] of the token that follows
    the prefix ys [B, t], from memory [B, Ls, d_model] and src_mask [B, 1, Ls].

    Runs model.decode on the whole prefix with the causal mask causal_mask(t) (on ys's device)
    and applies model.generator to the last position only.
    """
    tgt_mask = causal_mask(ys.size(1), device=ys.device)                  # [t, t]
    out = model.decode(ys, memory, src_mask, None)                         # [B, t, d_model]
    return model.generator(out[:, -1])                                     # [B, V]
