"""Mistake: beam search keeps the length-normalised scores as its running scores (each step adds log p to
the normalised score of the step before and normalises again), so the normalisation is applied at every
step instead of only for the final choice.

CATCHES: beam
DIAGNOSIS: normalised_every_step

BASE: reference
"""


def beam_search(model, src, src_mask, max_len, bos_id, eos_id, pad_id, beam_size=4, length_penalty=0.6):
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            B, K = src.size(0), beam_size
            device = src.device
            memory = model.encode(src, src_mask)
            memory_k = memory.repeat_interleave(K, dim=0)
            src_mask_k = src_mask.repeat_interleave(K, dim=0)
            tokens = torch.full((B, K, 1), bos_id, dtype=torch.long, device=device)
            scores = torch.full((B, K), float("-inf"), dtype=memory.dtype, device=device)
            scores[:, 0] = 0.0
            finished = torch.zeros(B, K, dtype=torch.bool, device=device)
            lengths = torch.zeros(B, K, dtype=memory.dtype, device=device)
            for _ in range(max_len):
                t = tokens.size(2)
                logits = _next_token_logits(model, tokens.reshape(B * K, t), memory_k, src_mask_k)
                V = logits.size(-1)
                logp = torch.log_softmax(logits, dim=-1).reshape(B, K, V)
                pad_only = torch.full_like(logp, float("-inf"))
                pad_only[..., pad_id] = 0.0
                logp = torch.where(finished.unsqueeze(-1), pad_only, logp)
                new_len = (lengths + (~finished).to(lengths.dtype)).unsqueeze(-1).expand(B, K, V)
                # rank (and keep) every candidate by its length-normalised score
                normalised = length_penalty_score(scores.unsqueeze(-1) + logp, new_len, length_penalty)
                scores, flat = normalised.reshape(B, K * V).topk(K, dim=-1)
                beam, token = flat // V, flat % V
                tokens = torch.cat([tokens.gather(1, beam.unsqueeze(-1).expand(B, K, t)),
                                    token.unsqueeze(-1)], dim=2)
                was_finished = finished.gather(1, beam)
                lengths = lengths.gather(1, beam) + (~was_finished).to(lengths.dtype)
                finished = was_finished | (token == eos_id)
                if (finished | torch.isinf(scores)).all():
                    break
            best = scores.argmax(dim=-1)                                        # already normalised
            rows = torch.arange(B, device=device)
            best_tokens, best_scores = tokens[rows, best], scores[rows, best]
    finally:
        model.train(was_training)
    return best_tokens, best_scores
