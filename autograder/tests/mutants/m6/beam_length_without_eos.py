"""Mistake: beam search updates `finished` before counting the step's token, so the length n leaves out <eos>.

CATCHES: beam
DIAGNOSIS: length_without_eos

BASE: reference
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
            memory = model.encode(src, src_mask)                                # [B, Ls, d_model]
            memory_k = memory.repeat_interleave(K, dim=0)                       # [B*K, Ls, d_model]
            src_mask_k = None if src_mask is None else src_mask.repeat_interleave(K, dim=0)   # [B*K, 1, Ls]
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
                finished = was_finished | (token == eos_id)
                lengths = lengths.gather(1, beam) + (~finished).long()          # count the tokens of unfinished hypotheses
                if (finished | torch.isinf(scores)).all():
                    break
            normalised = length_penalty_score(scores, lengths.to(scores.dtype), length_penalty)   # [B, K]
            best = normalised.argmax(dim=-1)                                    # [B]
            best_tokens = tokens[torch.arange(B, device=device), best]          # [B, T]
            best_scores = normalised[torch.arange(B, device=device), best]      # [B]
    finally:
        model.train(was_training)
    return best_tokens, best_scores
