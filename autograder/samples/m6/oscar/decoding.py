"""Milestone 6: decoding (Oscar's attempt)."""
import contextlib
import math

import torch

from attention import causal_mask, scaled_dot_product_attention
from multihead import merge_heads, split_heads


@contextlib.contextmanager
def _inference(model):
    """eval mode + no_grad while decoding, then back to the mode the model was in."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


def _next_token_logits(model, ys, memory, src_mask):
    t = ys.shape[1]
    out = model.decode(ys, memory, src_mask, causal_mask(t, device=ys.device))
    return model.generator(out[:, -1])


def greedy_decode(model, src, src_mask, max_len, bos_id, eos_id, pad_id):
    with _inference(model):
        B = src.shape[0]
        memory = model.encode(src, src_mask)
        ys = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)
        finished = torch.zeros(B, dtype=torch.bool, device=src.device)
        for step in range(max_len):
            logits = _next_token_logits(model, ys, memory, src_mask)
            next_tok = logits.argmax(dim=-1)
            next_tok[finished] = pad_id
            ys = torch.cat([ys, next_tok.unsqueeze(1)], dim=1)
            finished = finished | (next_tok == eos_id)
            if finished.all():
                break
    return ys


def sample_decode(model, src, src_mask, max_len, bos_id, eos_id, pad_id, temperature=1.0, top_k=None,
                  top_p=None, generator=None):
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0 (got {temperature})")
    with _inference(model):
        B = src.shape[0]
        memory = model.encode(src, src_mask)
        ys = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)
        finished = torch.zeros(B, dtype=torch.bool, device=src.device)
        for step in range(max_len):
            logits = _next_token_logits(model, ys, memory, src_mask)
            # filter first, then the temperature reshapes whatever is left
            if top_k is not None:
                k = min(top_k, logits.shape[-1])
                values, _ = torch.topk(logits, k)
                logits[logits < values[:, [-1]]] = float("-inf")
            if top_p is not None:
                sorted_logits, sorted_idx = torch.sort(logits, descending=True)
                sorted_probs = torch.softmax(sorted_logits, dim=-1)
                mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
                drop_sorted = mass_before >= top_p
                drop = torch.zeros_like(drop_sorted).scatter(1, sorted_idx, drop_sorted)
                logits[drop] = float("-inf")
            probs = torch.softmax(logits / temperature, dim=-1)
            next_tok = torch.multinomial(probs, 1, generator=generator).squeeze(1)
            next_tok[finished] = pad_id
            ys = torch.cat([ys, next_tok.unsqueeze(1)], dim=1)
            finished = finished | (next_tok == eos_id)
            if finished.all():
                break
    return ys


def length_penalty_score(sum_logprob, length, alpha):
    return sum_logprob / ((5.0 + length) / 6.0) ** alpha


def beam_search(model, src, src_mask, max_len, bos_id, eos_id, pad_id, beam_size=4, length_penalty=0.6):
    with _inference(model):
        B, K = src.shape[0], beam_size
        memory = model.encode(src, src_mask)
        memory = memory.repeat_interleave(K, dim=0)               # [B*K, Ls, d]
        beam_mask = src_mask.repeat_interleave(K, dim=0)          # [B*K, 1, Ls]
        hyps = torch.full((B * K, 1), bos_id, dtype=torch.long, device=src.device)
        scores = torch.zeros(B, K, dtype=memory.dtype, device=src.device)
        scores[:, 1:] = float("-inf")
        finished = torch.zeros(B * K, dtype=torch.bool, device=src.device)
        lengths = torch.zeros(B * K, dtype=torch.long, device=src.device)
        for step in range(max_len):
            logp = torch.log_softmax(_next_token_logits(model, hyps, memory, beam_mask), dim=-1)   # [B*K, V]
            V = logp.shape[-1]
            # finished hypotheses: only <pad>, free
            logp[finished] = float("-inf")
            logp[finished, pad_id] = 0.0
            cand = scores.unsqueeze(-1) + logp.view(B, K, V)
            scores, flat_idx = cand.view(B, K * V).topk(K, dim=-1)
            src_beam = (flat_idx // V + torch.arange(B, device=src.device).unsqueeze(1) * K).view(-1)   # rows in [B*K]
            new_tok = (flat_idx % V).view(-1)
            hyps = torch.cat([hyps[src_beam], new_tok.unsqueeze(1)], dim=1)
            lengths = lengths[src_beam] + (~finished[src_beam]).long()
            finished = finished[src_beam] | (new_tok == eos_id)
            alive = ~finished & ~torch.isinf(scores.view(-1))
            if not alive.any():
                break
        norm = length_penalty_score(scores, lengths.view(B, K).to(scores.dtype), length_penalty)
        best = norm.argmax(dim=1)
        idx = torch.arange(B, device=src.device)
        tokens = hyps.view(B, K, -1)[idx, best]
        best_scores = norm[idx, best]
    return tokens, best_scores


class KVCache:
    def __init__(self, num_layers):
        self.keys = [None] * num_layers
        self.values = [None] * num_layers

    def append_self(self, i, k, v):
        if self.keys[i] is not None:
            k = torch.cat([self.keys[i], k], dim=2)
            v = torch.cat([self.values[i], v], dim=2)
        self.keys[i], self.values[i] = k, v
        return k, v


def _attend(attn, x, k, v, mask):
    q = split_heads(attn.w_q(x), attn.num_heads)
    out, _ = scaled_dot_product_attention(q, k, v, mask)
    return attn.w_o(merge_heads(out))


def _decoder_layer_step(layer, x, i, cache, memory, src_mask):
    sa, ca = layer.self_attn, layer.cross_attn

    def self_block(h):
        k, v = cache.append_self(i, split_heads(sa.w_k(h), sa.num_heads), split_heads(sa.w_v(h), sa.num_heads))
        return _attend(sa, h, k, v, None)

    def cross_block(h):
        mk = split_heads(ca.w_k(memory), ca.num_heads)
        mv = split_heads(ca.w_v(memory), ca.num_heads)
        return _attend(ca, h, mk, mv, src_mask)

    if layer.norm_first:
        x = x + self_block(layer.norm1(x))
        x = x + cross_block(layer.norm2(x))
        x = x + layer.feed_forward(layer.norm3(x))
    else:
        x = layer.norm1(x + self_block(x))
        x = layer.norm2(x + cross_block(x))
        x = layer.norm3(x + layer.feed_forward(x))
    return x


def greedy_decode_cached(model, src, src_mask, max_len, bos_id, eos_id, pad_id):
    with _inference(model):
        B = src.shape[0]
        memory = model.encode(src, src_mask)
        layers = model.decoder.layers
        cache = KVCache(len(layers))
        mask4 = src_mask.unsqueeze(1)
        ys = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)
        finished = torch.zeros(B, dtype=torch.bool, device=src.device)
        for t in range(max_len):
            x = model.tgt_embed(ys[:, t:t + 1]) + model.pos_encoding.pe[t]
            for i, layer in enumerate(layers):
                x = _decoder_layer_step(layer, x, i, cache, memory, mask4)
            if model.decoder.norm is not None:
                x = model.decoder.norm(x)
            next_tok = model.generator(x[:, -1]).argmax(dim=-1)
            next_tok[finished] = pad_id
            ys = torch.cat([ys, next_tok.unsqueeze(1)], dim=1)
            finished = finished | (next_tok == eos_id)
            if finished.all():
                break
    return ys
