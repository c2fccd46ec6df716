"""Mistake: greedy_decode returns only the generated tokens, dropping the <bos> column.

CATCHES: greedy
DIAGNOSIS: bos_missing

BASE: reference
"""


def greedy_decode(model, src, src_mask, max_len, bos_id, eos_id, pad_id):
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
