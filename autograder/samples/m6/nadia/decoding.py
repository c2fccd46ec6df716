"""Milestone 6: decoding (Nadia's attempt)."""
import math

import torch

from attention import causal_mask, scaled_dot_product_attention
from multihead import merge_heads, split_heads


def _next_token_logits(model, ys, memory, src_mask):
    mask = causal_mask(ys.size(1), device=ys.device)
    h = model.decode(ys, memory, src_mask, mask)
    return model.generator(h[:, -1, :])


def greedy_decode(model, src, src_mask, max_len, bos_id, eos_id, pad_id):
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            memory = model.encode(src, src_mask)
            ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
            done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
            for _ in range(max_len):
                nxt = _next_token_logits(model, ys, memory, src_mask).argmax(-1)
                nxt = torch.where(done, torch.full_like(nxt, pad_id), nxt)
                ys = torch.cat([ys, nxt[:, None]], dim=1)
                done |= nxt == eos_id
                if done.all():
                    break
    finally:
        model.train(was_training)
    return ys


def _filter(logits, temperature, top_k, top_p):
    logits = logits / temperature
    if top_k is not None:
        k = min(top_k, logits.size(-1))
        kth_value = torch.topk(logits, k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth_value, float("-inf"))
    if top_p is not None:
        sorted_logits, idx = torch.sort(logits, dim=-1, descending=True)
        cum = torch.softmax(sorted_logits, dim=-1).cumsum(-1)
        # nucleus = the tokens that fit inside top_p
        remove = cum > top_p
        remove[:, 0] = False          # always keep the best one
        remove = remove.scatter(-1, idx, remove)
        logits = logits.masked_fill(remove, float("-inf"))
    return logits


def sample_decode(model, src, src_mask, max_len, bos_id, eos_id, pad_id, temperature=1.0, top_k=None,
                  top_p=None, generator=None):
    if temperature <= 0:
        raise ValueError("temperature must be positive")
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            memory = model.encode(src, src_mask)
            ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
            done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
            for _ in range(max_len):
                logits = _filter(_next_token_logits(model, ys, memory, src_mask), temperature, top_k, top_p)
                probs = torch.softmax(logits, dim=-1)
                nxt = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
                nxt = torch.where(done, torch.full_like(nxt, pad_id), nxt)
                ys = torch.cat([ys, nxt[:, None]], dim=1)
                done |= nxt == eos_id
                if done.all():
                    break
    finally:
        model.train(was_training)
    return ys


def length_penalty_score(sum_logprob, length, alpha):
    return sum_logprob / ((5.0 + length) / 6.0) ** alpha


def beam_search(model, src, src_mask, max_len, bos_id, eos_id, pad_id, beam_size=4, length_penalty=0.6):
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            B, K = src.shape[0], beam_size
            dev = src.device
            memory = model.encode(src, src_mask).repeat_interleave(K, dim=0)
            mask = src_mask.repeat_interleave(K, dim=0)
            seqs = torch.full((B, K, 1), bos_id, dtype=torch.long, device=dev)
            score = torch.full((B, K), float("-inf"), dtype=memory.dtype, device=dev)
            score[:, 0] = 0
            done = torch.zeros(B, K, dtype=torch.bool, device=dev)
            for _ in range(max_len):
                L = seqs.size(-1)
                logp = torch.log_softmax(_next_token_logits(model, seqs.view(B * K, L), memory, mask), -1)
                V = logp.size(-1)
                logp = logp.view(B, K, V)
                only_pad = torch.full_like(logp, float("-inf"))
                only_pad[:, :, pad_id] = 0
                logp = torch.where(done[:, :, None], only_pad, logp)
                total = (score[:, :, None] + logp).view(B, K * V)
                score, pick = total.topk(K, dim=-1)
                parent, tok = pick // V, pick % V
                seqs = torch.cat([torch.gather(seqs, 1, parent[:, :, None].expand(-1, -1, L)), tok[:, :, None]], -1)
                done = torch.gather(done, 1, parent) | (tok == eos_id)
                if (done | score.isinf()).all():
                    break
            # length of each hypothesis = its real (non-pad) tokens
            lengths = (seqs != pad_id).sum(-1).to(score.dtype)
            final = length_penalty_score(score, lengths, length_penalty)
            best = final.argmax(-1)
            rows = torch.arange(B, device=dev)
            out_tokens, out_scores = seqs[rows, best], final[rows, best]
    finally:
        model.train(was_training)
    return out_tokens, out_scores


class KVCache:
    def __init__(self, num_layers):
        self.k = [None] * num_layers
        self.v = [None] * num_layers
        self.mem_k = [None] * num_layers
        self.mem_v = [None] * num_layers

    def append_self(self, i, k, v):
        if self.k[i] is None:
            self.k[i], self.v[i] = k, v
        else:
            self.k[i] = torch.cat((self.k[i], k), dim=2)
            self.v[i] = torch.cat((self.v[i], v), dim=2)
        return self.k[i], self.v[i]


def _attend(attn, x, k, v, mask):
    q = split_heads(attn.w_q(x), attn.num_heads)
    out, _ = scaled_dot_product_attention(q, k, v, mask)
    return attn.w_o(merge_heads(out))


def _decoder_layer_step(layer, x, i, cache, src_mask):
    def sa(h):
        k = split_heads(layer.self_attn.w_k(h), layer.self_attn.num_heads)
        v = split_heads(layer.self_attn.w_v(h), layer.self_attn.num_heads)
        k, v = cache.append_self(i, k, v)
        return _attend(layer.self_attn, h, k, v, None)

    def ca(h):
        return _attend(layer.cross_attn, h, cache.mem_k[i], cache.mem_v[i], src_mask)

    if layer.norm_first:
        x = x + sa(layer.norm1(x))
        x = x + ca(layer.norm2(x))
        return x + layer.feed_forward(layer.norm3(x))
    x = layer.norm1(x + sa(x))
    x = layer.norm2(x + ca(x))
    return layer.norm3(x + layer.feed_forward(x))


def greedy_decode_cached(model, src, src_mask, max_len, bos_id, eos_id, pad_id):
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            memory = model.encode(src, src_mask)
            cache = KVCache(len(model.decoder.layers))
            for i, layer in enumerate(model.decoder.layers):
                cache.mem_k[i] = split_heads(layer.cross_attn.w_k(memory), layer.cross_attn.num_heads)
                cache.mem_v[i] = split_heads(layer.cross_attn.w_v(memory), layer.cross_attn.num_heads)
            cross_mask = src_mask[:, None]            # [B, 1, 1, Ls]
            ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
            done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
            for t in range(max_len):
                x = model.tgt_embed(ys[:, -1:]) + model.pos_encoding.pe[t]
                for i, layer in enumerate(model.decoder.layers):
                    x = _decoder_layer_step(layer, x, i, cache, cross_mask)
                if model.decoder.norm is not None:
                    x = model.decoder.norm(x)
                nxt = model.generator(x[:, -1]).argmax(-1)
                nxt = torch.where(done, torch.full_like(nxt, pad_id), nxt)
                ys = torch.cat([ys, nxt[:, None]], dim=1)
                done |= nxt == eos_id
                if done.all():
                    break
    finally:
        model.train(was_training)
    return ys
