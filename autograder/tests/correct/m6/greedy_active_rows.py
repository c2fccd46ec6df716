"""Correct: greedy decodes only the unfinished rows at each step (index_copy back into the batch).

BASE: correct/m6/blind_student.py
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
            memory = model.encode(src, src_mask)                             # [B, Ls, d_model]
            B = src.size(0)
            ys = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)
            finished = torch.zeros(B, dtype=torch.bool, device=src.device)
            for _ in range(max_len):
                active = (~finished).nonzero().squeeze(-1)
                logits = _next_token_logits(model, ys[active], memory[active], src_mask[active])
                nxt = torch.full((B,), pad_id, dtype=torch.long, device=src.device)
                nxt = nxt.index_copy(0, active, logits.argmax(dim=-1))
                ys = torch.cat([ys, nxt[:, None]], dim=1)
                finished = finished | (nxt == eos_id)
                if bool(finished.all()):
                    break
            return ys
    finally:
        model.train(was_training)
