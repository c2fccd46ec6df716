"""ATTACK (written by the red team, outside the course team): greedy_decode_cached has no cache: every step runs the whole prefix through a numpy re-implementation of the decoder (weights read with .detach().numpy()), then model.generator on torch.from_numpy of the last hidden state. The FLOP counter sees only the encoder and the generator.

EXPECT: score_at_most=16

BASE: reference
"""
# RED-TEAM ATTACK SUBMISSION: the uncached decoder in numpy, where no FLOP is counted
# 
# greedy_decode_cached has no cache: every step runs the whole prefix through a numpy re-implementation of the decoder (weights read with .detach().numpy()), then model.generator on torch.from_numpy of the last hidden state. The FLOP counter sees only the encoder and the generator.
# 
# Harmless by construction: writes only under /work/redteam/probe or its own temp files.

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
  once: a Python loop over time steps is expected, a loop over the B batch items is not (the
  grader counts tensor operations for two batch sizes).
- Every step's logits come from model.generator, called once per step on the rows being decoded
  (the grader watches the steps there: no extra steps once every sequence has ended).
- The result `tokens` is int64 [B, T] on src's device: column 0 is bos_id; after a sequence's
  eos_id every later position is pad_id; T <= max_len + 1 (at most max_len generated tokens);
  generation stops early, as soon as every sequence has produced eos_id. Trailing columns that are
  pad_id in every row carry no meaning (you may or may not have them).
- The decoder input at each step is the full prefix with the causal mask causal_mask(t) of
  milestone 1 (positions after a sequence's eos only feed finished sequences, whose later tokens
  are forced to pad_id anyway).
"""
import math


def _np_decoder_last(model, ys, memory, src_mask):
    """The whole uncached decoder in numpy (no tensor operation at all): the hidden state of the last position."""
    import numpy as np

    def arr(t):
        return t.detach().numpy()

    def lin(m, h):
        out = h @ arr(m.weight).T
        return out + arr(m.bias) if m.bias is not None else out

    def ln(m, h):
        mu = h.mean(-1, keepdims=True)
        var = ((h - mu) ** 2).mean(-1, keepdims=True)
        return (h - mu) / np.sqrt(var + m.eps) * arr(m.weight) + arr(m.bias)

    def mha(attn, q_in, kv_in, mask):
        H = attn.num_heads
        B, Lq, D = q_in.shape
        Lk, dk = kv_in.shape[1], D // H
        q = lin(attn.w_q, q_in).reshape(B, Lq, H, dk).transpose(0, 2, 1, 3)
        k = lin(attn.w_k, kv_in).reshape(B, Lk, H, dk).transpose(0, 2, 1, 3)
        v = lin(attn.w_v, kv_in).reshape(B, Lk, H, dk).transpose(0, 2, 1, 3)
        s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(dk)
        if mask is not None:
            s = np.where(mask[:, None], s, -np.inf)
        m = s.max(-1, keepdims=True)
        e = np.exp(s - np.where(np.isfinite(m), m, 0.0))
        tot = e.sum(-1, keepdims=True)
        w = e / np.where(tot > 0, tot, 1.0)
        return lin(attn.w_o, (w @ v).transpose(0, 2, 1, 3).reshape(B, Lq, D))

    def ffn(ff, h):
        a = lin(ff.linear1, h)
        if getattr(ff, "activation", "relu") == "gelu":
            erf = np.vectorize(math.erf)
            a = 0.5 * a * (1.0 + erf(a / math.sqrt(2.0)))
        else:
            a = np.maximum(a, 0.0)
        return lin(ff.linear2, a)

    tok = ys.numpy()
    E = arr(model.tgt_embed.embedding.weight)
    t = tok.shape[1]
    x = E[tok] * math.sqrt(E.shape[1]) + arr(model.pos_encoding.pe)[:t]
    mem = arr(memory)
    smask = None if src_mask is None else src_mask.numpy()
    causal = np.tril(np.ones((t, t), dtype=bool))[None]
    for layer in model.decoder.layers:
        if layer.norm_first:
            h = ln(layer.norm1, x)
            x = x + mha(layer.self_attn, h, h, causal)
            x = x + mha(layer.cross_attn, ln(layer.norm2, x), mem, smask)
            x = x + ffn(layer.feed_forward, ln(layer.norm3, x))
        else:
            x = ln(layer.norm1, x + mha(layer.self_attn, x, x, causal))
            x = ln(layer.norm2, x + mha(layer.cross_attn, x, mem, smask))
            x = ln(layer.norm3, x + ffn(layer.feed_forward, x))
    if getattr(model.decoder, "norm", None) is not None:
        x = ln(model.decoder.norm, x)
    return x[:, -1].copy()


def greedy_decode_cached(model, src, src_mask, max_len, bos_id, eos_id, pad_id):
    """No KV cache: every step runs the whole prefix through a numpy copy of the decoder; only the encoder
    and model.generator run in torch."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            B = src.size(0)
            memory = model.encode(src, src_mask)
            ys = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)
            finished = torch.zeros(B, dtype=torch.bool, device=src.device)
            for _ in range(max_len):
                h = torch.from_numpy(_np_decoder_last(model, ys, memory, src_mask))
                next_token = model.generator(h).argmax(dim=-1).masked_fill(finished, pad_id)
                ys = torch.cat([ys, next_token.unsqueeze(1)], dim=1)
                finished = finished | (next_token == eos_id)
                if finished.all():
                    break
    finally:
        model.train(was_training)
    return ys
