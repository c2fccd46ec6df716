"""Correct: beam prefixes reordered by indexing the flattened [B * K] rows instead of torch.gather on [B, K, t].

BASE: correct/m6/blind_student.py
"""


def beam_search(model, src, src_mask, max_len, bos_id, eos_id, pad_id, beam_size=4, length_penalty=0.6):
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            B, K = src.size(0), beam_size
            device = src.device
            memory = model.encode(src, src_mask)                             # [B, Ls, d_model]
            memory = memory.repeat_interleave(K, dim=0)                      # [B*K, Ls, d_model]
            mask_k = src_mask.repeat_interleave(K, dim=0)                    # [B*K, 1, Ls]
            dtype = memory.dtype
            tokens = torch.full((B, K, 1), bos_id, dtype=torch.long, device=device)
            scores = torch.full((B, K), float("-inf"), dtype=dtype, device=device)
            scores[:, 0] = 0.0
            finished = torch.zeros(B, K, dtype=torch.bool, device=device)
            lengths = torch.zeros(B, K, dtype=dtype, device=device)
            for _ in range(max_len):
                t = tokens.size(-1)
                logits = _next_token_logits(model, tokens.reshape(B * K, t), memory, mask_k)  # [B*K, V]
                logp = torch.log_softmax(logits, dim=-1)
                V = logp.size(-1)
                logp = logp.reshape(B, K, V)
                pad_only = torch.full((V,), float("-inf"), dtype=dtype, device=device)
                pad_only[pad_id] = 0.0
                logp = torch.where(finished[..., None], pad_only, logp)
                cand = (scores[..., None] + logp).reshape(B, K * V)             # [B, K*V]
                top_scores, top_idx = cand.topk(K, dim=-1)                      # [B, K]
                beam = top_idx // V
                tok = top_idx % V
                flat = (beam + torch.arange(B, device=device)[:, None] * K).reshape(-1)
                tokens = tokens.reshape(B * K, t)[flat].reshape(B, K, t)
                tokens = torch.cat([tokens, tok[..., None]], dim=-1)
                prev_finished = torch.gather(finished, 1, beam)
                lengths = torch.gather(lengths, 1, beam) + (~prev_finished).to(dtype)
                finished = prev_finished | (tok == eos_id)
                scores = top_scores
                if bool((finished | torch.isinf(scores)).all()):
                    break
            # Unfinished hypotheses (only possible after max_len steps) have length max_len.
            lengths = torch.where(finished, lengths, torch.full_like(lengths, float(max_len)))
            norm = length_penalty_score(scores, lengths, length_penalty)       # [B, K]
            best = norm.argmax(dim=-1)                                          # [B]
            T = tokens.size(-1)
            best_tokens = torch.gather(tokens, 1, best[:, None, None].expand(B, 1, T)).squeeze(1)
            best_scores = torch.gather(norm, 1, best[:, None]).squeeze(1)
            return best_tokens, best_scores
    finally:
        model.train(was_training)
