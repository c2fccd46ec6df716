"""Mistake: top-k reads the k-th largest logit as sorted[:, top_k - 1] without clamping top_k to the
vocabulary, so a top_k larger than the vocabulary indexes past the end instead of keeping every token.

CATCHES: sampling
DIAGNOSIS: top_k_not_clamped

BASE: correct/m6/blind_student.py
"""


def sample_decode(model, src, src_mask, max_len, bos_id, eos_id, pad_id, temperature=1.0, top_k=None,
                  top_p=None, generator=None):
    if temperature <= 0:
        raise ValueError("temperature must be positive")
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            memory = model.encode(src, src_mask)
            B = src.size(0)
            ys = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)
            finished = torch.zeros(B, dtype=torch.bool, device=src.device)
            for _ in range(max_len):
                logits = _next_token_logits(model, ys, memory, src_mask) / temperature
                if top_k is not None:
                    kth = logits.sort(dim=-1, descending=True).values[:, top_k - 1].unsqueeze(-1)
                    logits = logits.masked_fill(logits < kth, float("-inf"))
                if top_p is not None:
                    probs = torch.softmax(logits, dim=-1)
                    sp, idx = torch.sort(probs, dim=-1, descending=True)
                    mass_before = torch.cumsum(sp, dim=-1) - sp
                    keep_sorted = mass_before < top_p
                    keep = torch.zeros_like(keep_sorted).scatter(-1, idx, keep_sorted)
                    logits = logits.masked_fill(~keep, float("-inf"))
                probs = torch.softmax(logits, dim=-1)
                nxt = torch.multinomial(probs, 1, generator=generator).squeeze(1)
                nxt = torch.where(finished, torch.full_like(nxt, pad_id), nxt)
                ys = torch.cat([ys, nxt[:, None]], dim=1)
                finished = finished | (nxt == eos_id)
                if bool(finished.all()):
                    break
            return ys
    finally:
        model.train(was_training)
