"""Correct: top-k keeps the torch.topk indices through a scattered boolean mask; the exclusive cumulative sum of top-p is a shifted cumsum.

BASE: correct/m6/blind_student.py
"""


def sample_decode(model, src, src_mask, max_len, bos_id, eos_id, pad_id, temperature=1.0, top_k=None,
                  top_p=None, generator=None):
    if not (temperature > 0):
        raise ValueError(f"temperature must be > 0, got {temperature}")
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            memory = model.encode(src, src_mask)
            B = src.size(0)
            ys = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)
            finished = torch.zeros(B, dtype=torch.bool, device=src.device)
            for _ in range(max_len):
                logits = _next_token_logits(model, ys, memory, src_mask) / temperature   # [B, V]
                V = logits.size(-1)
                if top_k is not None and top_k < V:
                    idx = torch.topk(logits, top_k, dim=-1).indices
                    keepk = torch.zeros_like(logits, dtype=torch.bool).scatter(-1, idx, True)
                    logits = logits.masked_fill(~keepk, float("-inf"))
                if top_p is not None:
                    p = torch.softmax(logits, dim=-1)
                    sorted_p, order = p.sort(dim=-1, descending=True)
                    before = torch.cat([torch.zeros_like(sorted_p[..., :1]), torch.cumsum(sorted_p, dim=-1)[..., :-1]], dim=-1)               # total before each token
                    keep_sorted = before < top_p
                    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
                    logits = logits.masked_fill(~keep, float("-inf"))
                probs = torch.softmax(logits, dim=-1)
                nxt = torch.multinomial(probs, 1, generator=generator).squeeze(-1)   # [B]
                nxt = nxt.masked_fill(finished, pad_id)
                ys = torch.cat([ys, nxt[:, None]], dim=1)
                finished = finished | (nxt == eos_id)
                if bool(finished.all()):
                    break
            return ys
    finally:
        model.train(was_training)
