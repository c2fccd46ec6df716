"""Mistake: greedy_decode writes into a buffer of zeros and puts 0 (not pad_id) after a sequence's <eos>.

CATCHES: greedy
DIAGNOSIS: pads_with_zero

BASE: reference
"""


def greedy_decode(model, src, src_mask, max_len, bos_id, eos_id, pad_id):
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            B = src.size(0)
            memory = model.encode(src, src_mask)
            ys = torch.zeros(B, max_len + 1, dtype=torch.long, device=src.device)   # padding everywhere
            ys[:, 0] = bos_id
            finished = torch.zeros(B, dtype=torch.bool, device=src.device)
            for t in range(1, max_len + 1):
                nxt = _next_token_logits(model, ys[:, :t], memory, src_mask).argmax(dim=-1)
                ys[:, t] = torch.where(finished, torch.zeros_like(nxt), nxt)      # finished rows: padding
                finished = finished | (ys[:, t] == eos_id)
                if finished.all():
                    return ys[:, :t + 1]
            return ys
    finally:
        model.train(was_training)
