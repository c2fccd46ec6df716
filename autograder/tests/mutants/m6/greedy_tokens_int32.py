"""Mistake: greedy_decode keeps the tokens in a preallocated int32 buffer, so it returns int32 instead of int64.

CATCHES: greedy
DIAGNOSIS: tokens_dtype

BASE: reference
"""


def greedy_decode(model, src, src_mask, max_len, bos_id, eos_id, pad_id):
    """Greedy decoding: at every step append the argmax of the last position's logits.

    Args:
        model: a Transformer of milestone 4.
        src: [B, Ls] int64 source tokens; src_mask: [B, 1, Ls] bool.
        max_len: the most tokens to generate after bos_id.
        bos_id, eos_id, pad_id: special token ids.

    Returns:
        tokens [B, T] int64 (see the module docstring: starts with bos_id, pad_id after eos_id,
        T <= max_len + 1, stops once every sequence has ended).

    Example: if item 0 produces a, b, <eos> and item 1 produces c, d, e, <eos>, the result is
        [[<bos>, a, b, <eos>, <pad>], [<bos>, c, d, e, <eos>]].
    """
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            B = src.size(0)
            memory = model.encode(src, src_mask)                               # [B, Ls, d_model]
            ys = torch.full((B, max_len + 1), pad_id, dtype=torch.int32, device=src.device)   # int32 is enough for ids
            ys[:, 0] = bos_id
            finished = torch.zeros(B, dtype=torch.bool, device=src.device)
            t = 0
            for t in range(1, max_len + 1):
                next_token = _next_token_logits(model, ys[:, :t], memory, src_mask).argmax(dim=-1)   # [B]
                next_token = next_token.masked_fill(finished, pad_id)
                ys[:, t] = next_token
                finished = finished | (next_token == eos_id)
                if finished.all():
                    break
            ys = ys[:, :t + 1]
    finally:
        model.train(was_training)
    return ys
