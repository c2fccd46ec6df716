"""Milestone 6: generating output sequences with a trained Transformer.

The model of milestone 4 predicts one token at a time: feed it the tokens generated so far,
take the logits of the last position, choose the next token, append it, repeat. The ways of
choosing:
- greedy_decode:        the most likely token (argmax) at every step.
- sample_decode:        a random draw, shaped by temperature, top-k and top-p (nucleus) filtering.
- beam_search:          keep the beam_size most likely partial sequences, not just one.
- greedy_decode_cached: greedy, but each step only runs the decoder on the newest position,
                        reusing the keys and values computed at earlier steps (a KV cache).

Common rules for every function here:
- `model` is a Transformer of milestone 4 (encode, decode, generator). It runs in eval mode (no
  dropout) under torch.no_grad() (or torch.inference_mode()); the mode the model was in (train or
  eval) is put back before returning.
- src [B, Ls] int64, src_mask bool [B, 1, Ls] (True = real token). Work on the whole batch at
  once: a Python loop over time steps is expected, a loop over the B batch items is not, nor one
  over the rows inside a step such as sample_decode's filters (the grader counts tensor operations
  for two batch sizes, sample_decode's with top_k and top_p set too).
- Every step's logits come from model.generator, called once per step (the grader watches the
  steps there: no extra steps once every sequence has ended). Either all B rows (B * beam_size in
  beam_search) or only the unfinished ones may go through it: both are accepted, as long as the
  finished rows end up with pad_id.
- The result `tokens` is int64 [B, T] on src's device: column 0 is bos_id; after a sequence's
  eos_id every later position is pad_id; T <= max_len + 1 (at most max_len generated tokens);
  generation stops early, as soon as every sequence has produced eos_id. Trailing columns that are
  pad_id in every row carry no meaning (you may or may not have them).
- The decoder input at each step is the full prefix with the causal mask causal_mask(t) of
  milestone 1 (positions after a sequence's eos only feed finished sequences, whose later tokens
  are forced to pad_id anyway).
"""
import math

import torch

from attention import causal_mask, scaled_dot_product_attention
from multihead import merge_heads, split_heads


def _next_token_logits(model, ys, memory, src_mask):
    """A helper for the functions below (optional): the logits [B, V] of the token that follows
    the prefix ys [B, t], from memory [B, Ls, d_model] and src_mask [B, 1, Ls].

    Runs model.decode on the whole prefix with the causal mask causal_mask(t) (on ys's device)
    and applies model.generator to the last position only.
    """
    ### BEGIN SOLUTION
    ### TODO: causal mask [t, t] -> model.decode -> the last position [B, d_model] -> model.generator.
    tgt_mask = causal_mask(ys.size(1), device=ys.device)                  # [t, t]
    out = model.decode(ys, memory, src_mask, tgt_mask)                     # [B, t, d_model]
    return model.generator(out[:, -1])                                     # [B, V]
    ### END SOLUTION


def greedy_decode(model, src, src_mask, max_len, bos_id, eos_id, pad_id):
    """Greedy decoding: at every step append the argmax of the last position's logits.

    Args:
        model: a Transformer of milestone 4.
        src: [B, Ls] int64 source tokens; src_mask: [B, 1, Ls] bool.
        max_len: the most tokens to generate after bos_id.
        bos_id, eos_id, pad_id: special token ids.

    Returns:
        tokens [B, T] int64 (see the module docstring: starts with bos_id, pad_id after eos_id,
        T <= max_len + 1, stops once every sequence has ended).

    Example: if item 0 produces a, b, <eos> and item 1 produces c, d, e, <eos>, the result is
        [[<bos>, a, b, <eos>, <pad>], [<bos>, c, d, e, <eos>]].
    """
    ### BEGIN SOLUTION
    ### TODO: remember model.training and switch to eval; under torch.no_grad(): encode once, start from
    ### TODO: a [B, 1] column of bos_id and a [B] "finished" flag; for up to max_len steps: logits of
    ### TODO: the last position -> argmax -> pad_id for finished rows -> append -> update finished
    ### TODO: -> stop when all are finished. Restore the mode (try/finally).
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            B = src.size(0)
            memory = model.encode(src, src_mask)                               # [B, Ls, d_model]
            ys = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)
            finished = torch.zeros(B, dtype=torch.bool, device=src.device)
            for _ in range(max_len):
                next_token = _next_token_logits(model, ys, memory, src_mask).argmax(dim=-1)   # [B]
                next_token = next_token.masked_fill(finished, pad_id)
                ys = torch.cat([ys, next_token.unsqueeze(1)], dim=1)          # [B, t + 1]
                finished = finished | (next_token == eos_id)
                if finished.all():
                    break
    finally:
        model.train(was_training)
    return ys
    ### END SOLUTION


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
    ### BEGIN SOLUTION
    ### TODO: check temperature. Then the greedy loop, but the next token comes from:
    ### TODO: logits / temperature -> top-k mask (torch.topk) -> top-p mask (softmax, sort descending,
    ### TODO: keep a token while the total before it is < top_p, scatter the mask back to vocabulary
    ### TODO: order) -> softmax -> torch.multinomial(probs, 1, generator=generator).
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
                    top_idx = logits.topk(k, dim=-1).indices                            # [B, k]
                    keep = torch.zeros_like(logits, dtype=torch.bool).scatter(-1, top_idx, True)
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
    ### END SOLUTION


def length_penalty_score(sum_logprob, length, alpha):
    """The GNMT length-normalised score sum_logprob / ((5 + length) / 6) ** alpha.

    `length` counts the tokens after bos_id up to and including the first eos_id (max_len for a
    hypothesis that never produced eos). Works on tensors (element-wise) and on Python numbers.
    Example: ((5 + 10) / 6) ** 0.6 = 1.733, so a 10-token hypothesis with sum -3.466 scores -2.0.
    """
    return sum_logprob / ((5.0 + length) / 6.0) ** alpha


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
        eos_id, T <= max_len + 1); scores are the winners' normalised scores, in the dtype of the
        logits model.generator returns (float64 for a model.double(), else float32): take it from
        those logits (or their log_softmax), not from the model's parameters, which the checks'
        scripted models may not have. With beam_size=1 the tokens are
        greedy_decode's tokens. An item's result does not depend on the other items of the batch.
    """
    ### BEGIN SOLUTION
    ### TODO: encode once; repeat memory and src_mask beam_size times per item ([B*K, ...], repeat_interleave).
    ### TODO: state: tokens [B, K, t], scores [B, K] (0 for slot 0, -inf for the others), finished [B, K],
    ### TODO: lengths [B, K]. Each step: log_softmax of the last position's logits -> [B, K, V]; finished
    ### TODO: rows: 0 at pad_id and -inf elsewhere; candidates = scores[..., None] + logp -> [B, K*V];
    ### TODO: topk(K) -> beam index (// V) and token (% V); gather tokens/finished/lengths of the chosen
    ### TODO: beams, append the tokens, update finished and lengths. At the end pick the best normalised score.
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
    ### END SOLUTION


class KVCache:
    """Keys and values kept between the steps of greedy_decode_cached, for every decoder layer.

    Your own design: nothing about this class is graded, only greedy_decode_cached's tokens and
    the work it does per step. One possible layout, per decoder layer i:
        self_k[i], self_v[i]:   [B, H, t, d_k] self-attention keys/values of positions 0..t-1,
                                growing by one position per step
        cross_k[i], cross_v[i]: [B, H, Ls, d_k] cross-attention keys/values of memory, computed
                                once before the first step
    """

    def __init__(self, num_layers):
        ### BEGIN SOLUTION
        ### TODO: create the per-layer storage.
        self.self_k = [None] * num_layers
        self.self_v = [None] * num_layers
        self.cross_k = [None] * num_layers
        self.cross_v = [None] * num_layers
        ### END SOLUTION

    def append_self(self, i, k, v):
        """Add the keys/values [B, H, 1, d_k] of the newest position to layer i; return all of them
        so far, [B, H, t, d_k] each."""
        ### BEGIN SOLUTION
        ### TODO: concatenate along the position dimension (or store the first one).
        if self.self_k[i] is None:
            self.self_k[i], self.self_v[i] = k, v
        else:
            self.self_k[i] = torch.cat([self.self_k[i], k], dim=2)
            self.self_v[i] = torch.cat([self.self_v[i], v], dim=2)
        return self.self_k[i], self.self_v[i]
        ### END SOLUTION


def _attend(attn, x, k, v, mask):
    """One MultiHeadAttention of milestone 2 for the query positions x [B, Lq, d_model], with keys and
    values already projected and split into heads ([B, H, Lk, d_k]). mask: None or bool
    broadcastable to [B, H, Lq, Lk], e.g. [B, 1, 1, Lk]. Returns [B, Lq, d_model], as attn(x, ., .) would.
    """
    ### BEGIN SOLUTION
    ### TODO: project and split the queries with attn.w_q, attend (milestone 1), merge heads, attn.w_o.
    q = split_heads(attn.w_q(x), attn.num_heads)                              # [B, H, Lq, d_k]
    out, _ = scaled_dot_product_attention(q, k, v, mask)                      # [B, H, Lq, d_k]
    return attn.w_o(merge_heads(out))                                         # [B, Lq, d_model]
    ### END SOLUTION


def _decoder_layer_step(layer, x, i, cache, src_mask):
    """One DecoderLayer of milestone 3 for the newest position only: x [B, 1, d_model] -> [B, 1, d_model].

    Eval mode only (no dropout). The newest position may attend to every cached position, so the
    self-attention needs no mask; src_mask [B, 1, 1, Ls] (or None) masks the cross-attention.
    """
    ### BEGIN SOLUTION
    ### TODO: the same sub-layers, norms and residuals as DecoderLayer.forward (both norm_first cases),
    ### TODO: but self-attention projects keys/values of the new position only, appends them to the cache
    ### TODO: and attends to all cached ones; cross-attention uses the cached memory keys/values.
    def self_attention(h):
        k = split_heads(layer.self_attn.w_k(h), layer.self_attn.num_heads)    # [B, H, 1, d_k]
        v = split_heads(layer.self_attn.w_v(h), layer.self_attn.num_heads)
        k_all, v_all = cache.append_self(i, k, v)                             # [B, H, t, d_k]
        return _attend(layer.self_attn, h, k_all, v_all, None)

    def cross_attention(h):
        return _attend(layer.cross_attn, h, cache.cross_k[i], cache.cross_v[i], src_mask)

    if layer.norm_first:
        x = x + self_attention(layer.norm1(x))
        x = x + cross_attention(layer.norm2(x))
        x = x + layer.feed_forward(layer.norm3(x))
    else:
        x = layer.norm1(x + self_attention(x))
        x = layer.norm2(x + cross_attention(x))
        x = layer.norm3(x + layer.feed_forward(x))
    return x
    ### END SOLUTION


def greedy_decode_cached(model, src, src_mask, max_len, bos_id, eos_id, pad_id):
    """greedy_decode with a KV cache: the same tokens, far less work per step.

    Before the first step, compute every decoder layer's cross-attention keys and values of
    `memory` once (layer.cross_attn.w_k / w_v, split into heads). Each step then runs the decoder
    on the newest position only ([B, 1, d_model]: its token embedding plus the positional encoding
    row of its position, model.pos_encoding.pe[t]), layer by layer: self-attention projects the
    new position's keys and values, appends them to the cache and attends over all cached
    positions; cross-attention uses the cached memory keys and values, masked with src_mask given
    a head dimension, [B, 1, 1, Ls] (src_mask.unsqueeze(1): _attend's mask must broadcast to
    [B, H, 1, Ls]). After the last layer comes
    the decoder's final norm (when there is one), then model.generator gives the logits whose
    argmax is the next token.

    Build it from the existing modules as they are: the layer's submodules (self_attn and
    cross_attn with w_q, w_k, w_v, w_o and num_heads; norm1..norm3; feed_forward; norm_first),
    split_heads / merge_heads of milestone 2 and scaled_dot_product_attention of milestone 1. Do
    not edit the earlier milestones' files. Works for post-LN and pre-LN models.

    Graded: the tokens, the logits given to model.generator at each step (those of the uncached
    decoder), and the work per step: the grader counts each step's matrix-multiply FLOPs
    (torch.utils.flop_counter), which must be those of the newest position alone (its projections,
    attention over the cached positions and memory, feed-forward, generator), not growing with the
    prefix and with no projection of memory after the first step.

    Args and return value: as greedy_decode (same rules: eval mode restored, no_grad, batched,
    stops once every sequence has ended).
    """
    ### BEGIN SOLUTION
    ### TODO: eval + no_grad as before; encode; fill the cross-attention part of a KVCache.
    ### TODO: loop: x = tgt_embed(last token) + pe row of its position; run _decoder_layer_step for each
    ### TODO: layer; final norm if any; generator; argmax; same finishing logic as greedy_decode.
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            B = src.size(0)
            memory = model.encode(src, src_mask)                                # [B, Ls, d_model]
            layers = model.decoder.layers
            cache = KVCache(len(layers))
            for i, layer in enumerate(layers):
                cache.cross_k[i] = split_heads(layer.cross_attn.w_k(memory), layer.cross_attn.num_heads)  # [B, H, Ls, d_k]
                cache.cross_v[i] = split_heads(layer.cross_attn.w_v(memory), layer.cross_attn.num_heads)
            cross_mask = None if src_mask is None else src_mask.unsqueeze(1)   # [B, 1, 1, Ls]
            pe = model.pos_encoding.pe                                          # [max_positions, d_model]
            ys = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)
            finished = torch.zeros(B, dtype=torch.bool, device=src.device)
            for t in range(max_len):
                if t >= pe.size(0):
                    raise ValueError(f"position {t} is beyond the positional encoding's max_len {pe.size(0)}")
                x = model.tgt_embed(ys[:, -1:]) + pe[t]                         # [B, 1, d_model]
                for i, layer in enumerate(layers):
                    x = _decoder_layer_step(layer, x, i, cache, cross_mask)
                if model.decoder.norm is not None:
                    x = model.decoder.norm(x)
                next_token = model.generator(x[:, -1]).argmax(dim=-1)           # [B]
                next_token = next_token.masked_fill(finished, pad_id)
                ys = torch.cat([ys, next_token.unsqueeze(1)], dim=1)
                finished = finished | (next_token == eos_id)
                if finished.all():
                    break
    finally:
        model.train(was_training)
    return ys
    ### END SOLUTION
