"""Mistake: greedy_decode returns only the generated tokens, dropping the <bos> column.

CATCHES: greedy
DIAGNOSIS: bos_missing

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
            ys = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)
            finished = torch.zeros(B, dtype=torch.bool, device=src.device)
            for _ in range(max_len):
                next_token = _next_token_logits(model, ys, memory, src_mask).argmax(dim=-1)   # [B]
                next_token = next_token.masked_fill(finished, pad_id)
                ys = torch.cat([ys, next_token.unsqueeze(1)], dim=1)          # [B, t + 1]
                finished = finished | (next_token == eos_id)
                if finished.all():
                    break
    finally:
        model.train(was_training)
    return ys[:, 1:]                                                           # the generated tokens
