"""Mistake: beam search keeps its prefixes as [B * beam_size, t] rows and reorders them with the beam index
alone (tokens[beam.view(-1)]), forgetting the item's offset b * beam_size: every item continues item 0's
prefixes. A batch of one is right.

CATCHES: beam, batched
DIAGNOSIS: none

BASE: reference
"""


def beam_search(model, src, src_mask, max_len, bos_id, eos_id, pad_id, beam_size=4, length_penalty=0.6):
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            B, K = src.size(0), beam_size
            device = src.device
            memory = model.encode(src, src_mask).repeat_interleave(K, dim=0)        # [B*K, Ls, d_model]
            src_mask_k = src_mask.repeat_interleave(K, dim=0)                       # [B*K, 1, Ls]
            tokens = torch.full((B * K, 1), bos_id, dtype=torch.long, device=device)  # [B*K, t]
            scores = torch.full((B, K), float("-inf"), dtype=memory.dtype, device=device)
            scores[:, 0] = 0.0
            finished = torch.zeros(B, K, dtype=torch.bool, device=device)
            lengths = torch.zeros(B, K, dtype=torch.long, device=device)
            for _ in range(max_len):
                logits = _next_token_logits(model, tokens, memory, src_mask_k)     # [B*K, V]
                V = logits.size(-1)
                logp = torch.log_softmax(logits, dim=-1).reshape(B, K, V)
                pad_only = torch.full_like(logp, float("-inf"))
                pad_only[..., pad_id] = 0.0
                logp = torch.where(finished.unsqueeze(-1), pad_only, logp)
                scores, flat = (scores.unsqueeze(-1) + logp).reshape(B, K * V).topk(K, dim=-1)
                beam, token = flat // V, flat % V                                   # [B, K]
                tokens = torch.cat([tokens[beam.reshape(-1)], token.reshape(-1, 1)], dim=1)
                was_finished = finished.gather(1, beam)
                lengths = lengths.gather(1, beam) + (~was_finished).long()
                finished = was_finished | (token == eos_id)
                if (finished | torch.isinf(scores)).all():
                    break
            normalised = length_penalty_score(scores, lengths.to(scores.dtype), length_penalty)
            best = normalised.argmax(dim=-1)
            rows = torch.arange(B, device=device)
            return tokens[rows * K + best], normalised[rows, best]
    finally:
        model.train(was_training)
