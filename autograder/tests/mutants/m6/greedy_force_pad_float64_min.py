"""Mistake: greedy_decode forces pad_id for finished rows through the logits, filling every other logit with
torch.finfo(torch.float64).min: fine on the float64 models of the public tests, but the value does not fit in
a float32 tensor.

CATCHES: greedy
DIAGNOSIS: fill_value_overflows

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
                logits = _next_token_logits(model, ys, memory, src_mask)       # [B, V]
                # a finished row can only continue with pad_id
                only_pad = torch.ones_like(logits, dtype=torch.bool)
                only_pad[:, pad_id] = False
                logits = logits.masked_fill(finished[:, None] & only_pad, torch.finfo(torch.float64).min)
                next_token = logits.argmax(dim=-1)
                ys = torch.cat([ys, next_token.unsqueeze(1)], dim=1)
                finished = finished | (next_token == eos_id)
                if finished.all():
                    break
    finally:
        model.train(was_training)
    return ys
