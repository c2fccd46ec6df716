"""Mistake: top-k keeps only the logits strictly greater than the k-th largest (k - 1 tokens).

CATCHES: sampling
DIAGNOSIS: top_k_minus_one

BASE: reference
"""


def sample_decode(model, src, src_mask, max_len, bos_id, eos_id, pad_id, temperature=1.0, top_k=None,
                  top_p=None, generator=None):
    """Sampling: at every step draw the next token at random from the filtered distribution.

    At each step, from the last position's logits [B, V]:
      1. divide by temperature (< 1 sharpens, > 1 flattens);
      2. top_k (if not None): keep the top_k largest logits of each row, the others become -inf
         (all of them when top_k >= V);
      3. top_p (if not None): on the softmax of what is left, keep the smallest set of most
         probable tokens whose probabilities add up to at least top_p: sort descending, keep a
         token when the total of the tokens before it is < top_p (so the token that crosses
         top_p is kept, and the most probable token always is); the others become -inf;
      4. probs = softmax of the result [B, V], then exactly ONE call per step
         torch.multinomial(probs, 1, generator=generator) for the whole batch, every row
         included (finished rows too; their draw is then replaced by pad_id). Same generator
         seed -> same tokens.

    Args:
        as greedy_decode, plus
        temperature: a float > 0.
        top_k: None or an int >= 1.
        top_p: None or a float in (0, 1].
        generator: None or a torch.Generator passed to torch.multinomial.

    Returns:
        tokens [B, T] int64, as greedy_decode.

    Raises:
        ValueError: unless temperature > 0 (checked before any work).

    With top_k=1 (or a tiny top_p) this gives greedy_decode's tokens.
    """
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
                    k = min(top_k, logits.size(-1))
                    kth = logits.sort(dim=-1, descending=True).values[:, k - 1:k]        # the k-th largest [B, 1]
                    keep = logits > kth
                    logits = logits.masked_fill(~keep, float("-inf"))
                if top_p is not None:
                    probs = torch.softmax(logits, dim=-1)
                    sorted_probs, order = probs.sort(dim=-1, descending=True)           # [B, V]
                    cumulative = sorted_probs.cumsum(dim=-1)
                    before = torch.cat([torch.zeros_like(cumulative[:, :1]), cumulative[:, :-1]], dim=-1)  # mass of the better tokens
                    keep_sorted = before < top_p
                    keep_sorted[:, 0] = True                                            # at least one token
                    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
                    logits = logits.masked_fill(~keep, float("-inf"))
                probs = torch.softmax(logits, dim=-1)                                   # [B, V]
                next_token = torch.multinomial(probs, 1, generator=generator).squeeze(1)  # [B]
                next_token = next_token.masked_fill(finished, pad_id)
                ys = torch.cat([ys, next_token.unsqueeze(1)], dim=1)
                finished = finished | (next_token == eos_id)
                if finished.all():
                    break
    finally:
        model.train(was_training)
    return ys
