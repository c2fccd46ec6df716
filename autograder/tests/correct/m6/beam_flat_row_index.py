"""Correct: beam prefixes reordered by indexing the flattened [B * K] rows instead of torch.gather on [B, K, t].

BASE: correct/m6/blind_student.py
"""


def beam_search(model, src, src_mask, max_len, bos_id, eos_id, pad_id, beam_size=4, length_penalty=0.6):
    """Beam search, batched: all B items and their beam_size hypotheses at once, as B * beam_size
    rows (no Python loop over the items; none is needed over the hypotheses either).

    Every item keeps beam_size hypotheses (token prefixes), each with the sum of the
    log-probabilities (log softmax of the generator's logits) of its tokens after bos_id.
      - Start: hypothesis 0 is [bos_id] with score 0; the other beam_size - 1 slots start with
        score -inf (they never win, and they do not count as unfinished).
      - Each step: every unfinished hypothesis is extended by every token of the vocabulary,
        score + log p(token); a finished hypothesis (one that has produced eos_id) can only be
        extended by pad_id, at no cost (score unchanged). Of these beam_size x V candidates the
        beam_size with the largest summed log-probability are kept (torch.topk over the flattened
        beam x vocabulary axis).
      - Stop when every hypothesis is finished (ignoring the -inf slots), or after max_len steps.
      - Result per item: the hypothesis with the best length-normalised score
        length_penalty_score(sum_logprob, n, length_penalty), n = tokens after bos_id up to and
        including its first eos_id, or max_len for a hypothesis still unfinished at the end
        (such a hypothesis can win).

    Args:
        as greedy_decode, plus
        beam_size: hypotheses per item (>= 1).
        length_penalty: alpha of the GNMT penalty ((5 + n) / 6) ** alpha; 0 = no normalisation.

    Returns:
        (tokens [B, T] int64, scores [B]): tokens as in greedy_decode (bos_id first, pad_id after
        eos_id, T <= max_len + 1); scores are the winners' normalised scores, in the model's
        floating dtype. With beam_size=1 the tokens are greedy_decode's tokens. An item's result
        does not depend on the other items of the batch.
    """
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
