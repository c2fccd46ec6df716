"""Mistake: sample_decode sets the finished rows' draws to 0 (not pad_id).

CATCHES: sampling
DIAGNOSIS: pads_with_zero

BASE: reference
"""


def sample_decode(model, src, src_mask, max_len, bos_id, eos_id, pad_id, temperature=1.0, top_k=None,
                  top_p=None, generator=None):
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            B = src.size(0)
            memory = model.encode(src, src_mask)
            ys = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)
            finished = torch.zeros(B, dtype=torch.bool, device=src.device)
            for _ in range(max_len):
                logits = _next_token_logits(model, ys, memory, src_mask) / temperature   # [B, V]
                if top_k is not None:
                    k = min(top_k, logits.size(-1))
                    top_idx = logits.topk(k, dim=-1).indices
                    keep = torch.zeros_like(logits, dtype=torch.bool).scatter(-1, top_idx, True)
                    logits = logits.masked_fill(~keep, float("-inf"))
                if top_p is not None:
                    probs = torch.softmax(logits, dim=-1)
                    sorted_probs, order = probs.sort(dim=-1, descending=True)
                    before = sorted_probs.cumsum(dim=-1) - sorted_probs
                    keep = torch.zeros_like(before, dtype=torch.bool).scatter(-1, order, before < top_p)
                    logits = logits.masked_fill(~keep, float("-inf"))
                probs = torch.softmax(logits, dim=-1)
                next_token = torch.multinomial(probs, 1, generator=generator).squeeze(1)
                next_token[finished] = 0                                        # padding
                ys = torch.cat([ys, next_token.unsqueeze(1)], dim=1)
                finished = finished | (next_token == eos_id)
                if finished.all():
                    break
    finally:
        model.train(was_training)
    return ys
