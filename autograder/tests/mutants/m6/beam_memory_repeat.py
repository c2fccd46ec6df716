"""Mistake: memory and src_mask repeated with .repeat (items mixed up).

CATCHES: beam
DIAGNOSIS: beam_items_mixed

BASE: reference
"""


def beam_search(model, src, src_mask, max_len, bos_id, eos_id, pad_id, beam_size=4, length_penalty=0.6):
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            B, K = src.size(0), beam_size
            device = src.device
            memory = model.encode(src, src_mask)                                # [B, Ls, d_model]
            memory_k = memory.repeat(K, 1, 1)                                   # [B*K, Ls, d_model]
            src_mask_k = None if src_mask is None else src_mask.repeat(K, 1, 1)   # [B*K, 1, Ls]
            tokens = torch.full((B, K, 1), bos_id, dtype=torch.long, device=device)          # [B, K, t]
            scores = torch.full((B, K), float("-inf"), dtype=memory.dtype, device=device)    # [B, K]
            scores[:, 0] = 0.0
            finished = torch.zeros(B, K, dtype=torch.bool, device=device)
            lengths = torch.zeros(B, K, dtype=torch.long, device=device)
            for _ in range(max_len):
                t = tokens.size(2)
                logits = _next_token_logits(model, tokens.reshape(B * K, t), memory_k, src_mask_k)   # [B*K, V]
                V = logits.size(-1)
                logp = torch.log_softmax(logits, dim=-1).reshape(B, K, V)       # [B, K, V]
                # A finished hypothesis: only pad, at cost 0.
                pad_only = torch.full_like(logp, float("-inf"))
                pad_only[..., pad_id] = 0.0
                logp = torch.where(finished.unsqueeze(-1), pad_only, logp)
                candidates = (scores.unsqueeze(-1) + logp).reshape(B, K * V)    # [B, K*V]
                scores, flat = candidates.topk(K, dim=-1)                       # [B, K]
                beam, token = flat // V, flat % V                               # [B, K] each
                tokens = torch.cat([tokens.gather(1, beam.unsqueeze(-1).expand(B, K, t)),
                                    token.unsqueeze(-1)], dim=2)                # [B, K, t + 1]
                was_finished = finished.gather(1, beam)
                lengths = lengths.gather(1, beam) + (~was_finished).long()      # count eos, not pads
                finished = was_finished | (token == eos_id)
                if (finished | torch.isinf(scores)).all():
                    break
            normalised = length_penalty_score(scores, lengths.to(scores.dtype), length_penalty)   # [B, K]
            best = normalised.argmax(dim=-1)                                    # [B]
            best_tokens = tokens[torch.arange(B, device=device), best]          # [B, T]
            best_scores = normalised[torch.arange(B, device=device), best]      # [B]
    finally:
        model.train(was_training)
    return best_tokens, best_scores
