"""Mistake: greedy_decode encodes the source before entering torch.no_grad(), so the encoder runs with
gradients enabled and builds an autograd graph.

CATCHES: modes
DIAGNOSIS: grad_enabled

BASE: reference
"""


def greedy_decode(model, src, src_mask, max_len, bos_id, eos_id, pad_id):
    was_training = model.training
    model.eval()
    try:
        B = src.size(0)
        memory = model.encode(src, src_mask)                                   # [B, Ls, d_model]
        ys = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)
        finished = torch.zeros(B, dtype=torch.bool, device=src.device)
        with torch.no_grad():                                                  # the decoding loop
            for _ in range(max_len):
                next_token = _next_token_logits(model, ys, memory, src_mask).argmax(dim=-1)   # [B]
                next_token = next_token.masked_fill(finished, pad_id)
                ys = torch.cat([ys, next_token.unsqueeze(1)], dim=1)
                finished = finished | (next_token == eos_id)
                if finished.all():
                    break
    finally:
        model.train(was_training)
    return ys
