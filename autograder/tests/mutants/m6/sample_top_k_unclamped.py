"""Mistake: top-k calls torch.topk(logits, top_k) as it is, so a top_k larger than the vocabulary makes
torch.topk fail instead of keeping every token.

CATCHES: sampling
DIAGNOSIS: top_k_not_clamped

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
                    top_vals, _ = torch.topk(logits, top_k, dim=-1)                      # [B, top_k]
                    logits = logits.masked_fill(logits < top_vals[:, -1:], float("-inf"))
                if top_p is not None:
                    probs = torch.softmax(logits, dim=-1)
                    sorted_probs, order = probs.sort(dim=-1, descending=True)
                    before = sorted_probs.cumsum(dim=-1) - sorted_probs
                    keep_sorted = before < top_p
                    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
                    logits = logits.masked_fill(~keep, float("-inf"))
                probs = torch.softmax(logits, dim=-1)
                next_token = torch.multinomial(probs, 1, generator=generator).squeeze(1)
                next_token = next_token.masked_fill(finished, pad_id)
                ys = torch.cat([ys, next_token.unsqueeze(1)], dim=1)
                finished = finished | (next_token == eos_id)
                if finished.all():
                    break
    finally:
        model.train(was_training)
    return ys
