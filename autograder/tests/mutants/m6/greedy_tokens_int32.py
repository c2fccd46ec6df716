"""Mistake: greedy_decode keeps the tokens in a preallocated int32 buffer, so it returns int32 instead of int64.

CATCHES: greedy
DIAGNOSIS: tokens_dtype

BASE: reference
"""


def greedy_decode(model, src, src_mask, max_len, bos_id, eos_id, pad_id):
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
