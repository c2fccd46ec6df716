"""Correct: top-k with torch.kthvalue on k = min(top_k, V) (a top_k beyond the vocabulary keeps every token),
filtered logits masked with the most negative number of the logits' own dtype (float32 models included), and
finished rows set to pad_id (the argument) with torch.where.

BASE: correct/m6/blind_student.py
"""


def sample_decode(model, src, src_mask, max_len, bos_id, eos_id, pad_id, temperature=1.0, top_k=None,
                  top_p=None, generator=None):
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            memory = model.encode(src, src_mask)
            B = src.size(0)
            ys = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)
            done = torch.zeros(B, dtype=torch.bool, device=src.device)
            for _ in range(max_len):
                logits = _next_token_logits(model, ys, memory, src_mask) / temperature
                V = logits.size(-1)
                lowest = torch.finfo(logits.dtype).min
                if top_k is not None:
                    k = min(top_k, V)
                    kth = torch.kthvalue(logits, V - k + 1, dim=-1, keepdim=True).values   # the k-th largest
                    logits = logits.masked_fill(logits < kth, lowest)
                if top_p is not None:
                    probs = torch.softmax(logits, dim=-1)
                    sorted_p, order = torch.sort(probs, dim=-1, descending=True)
                    exclusive = torch.cumsum(sorted_p, dim=-1) - sorted_p
                    keep = torch.empty_like(exclusive, dtype=torch.bool).scatter_(-1, order, exclusive < top_p)
                    logits = logits.masked_fill(~keep, lowest)
                nxt = torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator).squeeze(1)
                nxt = torch.where(done, torch.full_like(nxt, pad_id), nxt)
                ys = torch.cat([ys, nxt.unsqueeze(1)], dim=1)
                done |= nxt == eos_id
                if bool(done.all()):
                    break
            return ys
    finally:
        model.train(was_training)
