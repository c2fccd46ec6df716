"""Milestone 6: decoding (Priya's attempt)."""
import math

import torch

from attention import causal_mask, scaled_dot_product_attention
from multihead import merge_heads, split_heads


def _next_token_logits(model, ys, memory, src_mask):
    dec = model.decode(ys, memory, src_mask, causal_mask(ys.size(1), device=ys.device))   # [B, t, d]
    return model.generator(dec[:, -1, :])                                                 # [B, V]


def greedy_decode(model, src, src_mask, max_len, bos_id, eos_id, pad_id):
    mode = model.training
    model.eval()
    try:
        with torch.no_grad():
            memory = model.encode(src, src_mask)
            out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
            has_eos = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
            for _ in range(max_len):
                best = _next_token_logits(model, out, memory, src_mask).argmax(dim=-1)
                out = torch.cat((out, best.unsqueeze(-1)), dim=-1)
                has_eos = has_eos | (best == eos_id)
                if has_eos.all():          # everyone is done
                    break
    finally:
        model.train(mode)
    return out


def sample_decode(model, src, src_mask, max_len, bos_id, eos_id, pad_id, temperature=1.0, top_k=None,
                  top_p=None, generator=None):
    if temperature <= 0:
        raise ValueError("temperature has to be > 0")
    mode = model.training
    model.eval()
    try:
        with torch.no_grad():
            memory = model.encode(src, src_mask)
            out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
            has_eos = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
            for _ in range(max_len):
                logits = _next_token_logits(model, out, memory, src_mask) / temperature
                if top_k is not None and top_k < logits.size(-1):
                    kth = logits.topk(top_k, dim=-1).values[:, -1].unsqueeze(-1)
                    logits = torch.where(logits >= kth, logits, torch.full_like(logits, -math.inf))
                if top_p is not None:
                    p_sorted, order = torch.softmax(logits, dim=-1).sort(dim=-1, descending=True)
                    keep_sorted = (p_sorted.cumsum(dim=-1) - p_sorted) < top_p
                    keep_sorted[:, 0] = True
                    keep = torch.zeros_like(keep_sorted)
                    keep.scatter_(-1, order, keep_sorted)
                    logits = torch.where(keep, logits, torch.full_like(logits, -math.inf))
                probs = torch.softmax(logits, dim=-1)
                drawn = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
                drawn = drawn.masked_fill(has_eos, pad_id)        # finished rows only get padding
                out = torch.cat((out, drawn.unsqueeze(-1)), dim=-1)
                has_eos = has_eos | (drawn == eos_id)
                if has_eos.all():
                    break
    finally:
        model.train(mode)
    return out


def length_penalty_score(sum_logprob, length, alpha):
    return sum_logprob / ((5.0 + length) / 6.0) ** alpha


def _beam_one(model, memory, mask, max_len, bos_id, eos_id, pad_id, K, alpha):
    """Beam search for ONE source item: memory [1, Ls, d], mask [1, 1, Ls]."""
    hyps = torch.full((1, 1), bos_id, dtype=torch.long, device=memory.device)   # [n_hyps, t]
    scores = torch.zeros(1, dtype=memory.dtype, device=memory.device)
    done = torch.zeros(1, dtype=torch.bool, device=memory.device)
    lengths = torch.zeros(1, dtype=torch.long, device=memory.device)
    for _ in range(max_len):
        n = hyps.size(0)
        logp = torch.log_softmax(_next_token_logits(model, hyps, memory.expand(n, -1, -1),
                                                    mask.expand(n, -1, -1)), dim=-1)      # [n, V]
        V = logp.size(-1)
        # a finished hypothesis can only be followed by <pad> (free)
        pad_only = torch.full_like(logp, -math.inf)
        pad_only[:, pad_id] = 0.0
        logp = torch.where(done.unsqueeze(-1), pad_only, logp)
        cand = (scores.unsqueeze(-1) + logp).flatten()
        k = min(K, cand.numel())
        scores, idx = cand.topk(k)
        parent, tok = idx // V, idx % V
        hyps = torch.cat((hyps[parent], tok.unsqueeze(-1)), dim=-1)
        lengths = lengths[parent] + (~done[parent]).long()
        done = done[parent] | (tok == eos_id)
        if done[~torch.isinf(scores)].all():
            break
    final = length_penalty_score(scores, lengths.to(scores.dtype), alpha)
    best = int(final.argmax())
    return hyps[best], final[best]


def beam_search(model, src, src_mask, max_len, bos_id, eos_id, pad_id, beam_size=4, length_penalty=0.6):
    mode = model.training
    model.eval()
    try:
        with torch.no_grad():
            memory = model.encode(src, src_mask)
            results = [_beam_one(model, memory[b:b + 1], src_mask[b:b + 1], max_len, bos_id, eos_id, pad_id,
                                 beam_size, length_penalty) for b in range(src.size(0))]
            T = max(r[0].numel() for r in results)
            tokens = torch.full((src.size(0), T), pad_id, dtype=torch.long, device=src.device)
            for b, (row, _) in enumerate(results):
                tokens[b, :row.numel()] = row
            scores = torch.stack([s for _, s in results])
    finally:
        model.train(mode)
    return tokens, scores


class KVCache:
    def __init__(self, num_layers):
        self.layers = [{"k": None, "v": None, "mk": None, "mv": None} for _ in range(num_layers)]

    def append_self(self, i, k, v):
        c = self.layers[i]
        c["k"] = k if c["k"] is None else torch.cat([c["k"], k], dim=2)
        c["v"] = v if c["v"] is None else torch.cat([c["v"], v], dim=2)
        return c["k"], c["v"]


def _attend(attn, x, k, v, mask):
    q = split_heads(attn.w_q(x), attn.num_heads)
    ctx, _ = scaled_dot_product_attention(q, k, v, mask)
    return attn.w_o(merge_heads(ctx))


def _decoder_layer_step(layer, x, i, cache, src_mask):
    H = layer.self_attn.num_heads

    def self_att(h):
        k, v = cache.append_self(i, split_heads(layer.self_attn.w_k(h), H), split_heads(layer.self_attn.w_v(h), H))
        return _attend(layer.self_attn, h, k, v, None)

    def cross_att(h):
        c = cache.layers[i]
        return _attend(layer.cross_attn, h, c["mk"], c["mv"], src_mask)

    if layer.norm_first:
        x = x + self_att(layer.norm1(x))
        x = x + cross_att(layer.norm2(x))
        x = x + layer.feed_forward(layer.norm3(x))
    else:
        x = layer.norm1(x + self_att(x))
        x = layer.norm2(x + cross_att(x))
        x = layer.norm3(x + layer.feed_forward(x))
    return x


def greedy_decode_cached(model, src, src_mask, max_len, bos_id, eos_id, pad_id):
    mode = model.training
    model.eval()
    try:
        with torch.no_grad():
            memory = model.encode(src, src_mask)
            cache = KVCache(len(model.decoder.layers))
            for i, layer in enumerate(model.decoder.layers):
                H = layer.cross_attn.num_heads
                cache.layers[i]["mk"] = split_heads(layer.cross_attn.w_k(memory), H)
                cache.layers[i]["mv"] = split_heads(layer.cross_attn.w_v(memory), H)
            out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
            has_eos = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
            for pos in range(max_len):
                x = model.tgt_embed(out[:, -1:]) + model.pos_encoding.pe[pos]
                for i, layer in enumerate(model.decoder.layers):
                    x = _decoder_layer_step(layer, x, i, cache, src_mask.unsqueeze(1))
                if model.decoder.norm is not None:
                    x = model.decoder.norm(x)
                best = model.generator(x[:, -1]).argmax(dim=-1)
                best = best.masked_fill(has_eos, pad_id)
                out = torch.cat((out, best.unsqueeze(-1)), dim=-1)
                has_eos = has_eos | (best == eos_id)
                if has_eos.all():
                    break
    finally:
        model.train(mode)
    return out
