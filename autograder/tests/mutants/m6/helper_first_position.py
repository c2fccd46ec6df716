"""Mistake: the logits are taken at the first position instead of the last.

CATCHES: greedy
DIAGNOSIS: next_token_logits_wrong

BASE: reference
"""


def _next_token_logits(model, ys, memory, src_mask):
    """A helper for the functions below (optional): the logits [B, V] of the token that follows
    the prefix ys [B, t], from memory [B, Ls, d_model] and src_mask [B, 1, Ls].

    Runs model.decode on the whole prefix with the causal mask causal_mask(t) (on ys's device)
    and applies model.generator to the last position only.
    """
    tgt_mask = causal_mask(ys.size(1), device=ys.device)                  # [t, t]
    out = model.decode(ys, memory, src_mask, tgt_mask)                     # [B, t, d_model]
    return model.generator(out[:, 0])                                      # [B, V]
