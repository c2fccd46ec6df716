"""The judge's Transformer: the right answers every milestone shares, built two ways.

- Functional, with switches: `attention_weights`, `mha_variant`, `layer_norm_fn`, `feed_forward_fn`,
  `layer_fn` compute attention, multi-head attention and a layer the right way, or with one named
  deviation switched on (the milestones' mistake catalogues are these switches).
- PyTorch's own layers under the course's weight names: `torch_layer`, `TorchStack`, `TorchModel`, with
  `layer_params` / `model_params` (random weights named as the student's modules name them) and
  `by_student_name` (PyTorch's gradients under the student's names).

Every milestone imports what it needs from here and nothing from another milestone.
"""
from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F
from torch import nn

from autograder.grading.checks import Tester


def attention_weights(q, k, mask=None, scale=None, softmax_dim=-1, invert=False, fill=float("-inf"), transpose=True,
                      softmax_dtype=None):
    d_k = q.size(-1)
    kt = k.transpose(-2, -1) if transpose else k
    scores = q @ kt / (math.sqrt(d_k) if scale is None else scale)
    if mask is not None:
        scores = scores.masked_fill(mask if invert else ~mask, fill)
    weights = torch.softmax(scores.to(softmax_dtype or scores.dtype), dim=softmax_dim).to(scores.dtype)
    return torch.nan_to_num(weights, nan=0.0)


def project(params, name, x):
    return x @ params[f"{name}.weight"].T + (params[f"{name}.bias"] if f"{name}.bias" in params else 0)


def split_into_heads(x, heads, how="right"):
    B, L, d = x.shape
    if how == "plain_view":
        return x.reshape(B, heads, L, d // heads)
    if how == "interleaved":
        return x.reshape(B, L, d // heads, heads).permute(0, 3, 1, 2)
    return x.reshape(B, L, heads, d // heads).transpose(1, 2)


def merge_from_heads(x, how="right"):
    B, H, L, d_k = x.shape
    return x.reshape(B, L, H * d_k) if how == "no_transpose" else x.transpose(1, 2).reshape(B, L, H * d_k)


def mha_variant(params, heads, query, key, value, mask=None, *, q_from="query", q_with="w_q", k_from="key",
                k_with="w_k", v_from="value", v_with="w_v", split="right", merge="right", output=True,
                mask_how="unsqueeze", invert=False, extra_scale=1.0):
    """(output, weights) of multi-head attention computed with the given deviations from the right way."""
    inputs = {"query": query, "key": key, "value": value}
    q = split_into_heads(project(params, q_with, inputs[q_from]), heads, split) * extra_scale
    k = split_into_heads(project(params, k_with, inputs[k_from]), heads, split)
    v = split_into_heads(project(params, v_with, inputs[v_from]), heads, split)
    if mask is not None:
        if mask_how == "unsqueeze" and mask.dim() == 3:
            mask = mask.unsqueeze(1)
        elif mask_how == "always":
            mask = mask.unsqueeze(1)
        elif mask_how == "last" and mask.dim() == 3:
            mask = mask.unsqueeze(-1)
    w = attention_weights(q, k, mask, invert=invert)
    merged = merge_from_heads(w @ v, merge)
    return (project(params, "w_o", merged) if output else merged), w


HEADS = 2


ATTENTIONS = ("self_attn", "cross_attn")


def layer_params(t: Tester, d, d_ff, decoder=False, dtype=torch.float64) -> dict:
    """Random weights for every parameter of a layer, named as the student's module names them."""
    p = {}
    for att in ATTENTIONS[: 2 if decoder else 1]:
        for proj in ("w_q", "w_k", "w_v", "w_o"):
            p[f"{att}.{proj}.weight"] = t.randn(d, d, dtype=dtype, scale=d ** -0.5)
            p[f"{att}.{proj}.bias"] = t.randn(d, dtype=dtype, scale=0.1)
    p["feed_forward.linear1.weight"] = t.randn(d_ff, d, dtype=dtype, scale=d ** -0.5)
    p["feed_forward.linear1.bias"] = t.randn(d_ff, dtype=dtype, scale=0.1)
    p["feed_forward.linear2.weight"] = t.randn(d, d_ff, dtype=dtype, scale=d_ff ** -0.5)
    p["feed_forward.linear2.bias"] = t.randn(d, dtype=dtype, scale=0.1)
    for n in range(1, 4 if decoder else 3):
        p[f"norm{n}.weight"] = 1 + t.randn(d, dtype=dtype, scale=0.3)
        p[f"norm{n}.bias"] = t.randn(d, dtype=dtype, scale=0.3)
    return p


def sub_params(p: dict, prefix: str) -> dict:
    return {k[len(prefix) + 1:]: v for k, v in p.items() if k.startswith(prefix + ".")}


def load_attention(theirs: nn.MultiheadAttention, p: dict):
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([p[f"{n}.weight"] for n in ("w_q", "w_k", "w_v")]))
        theirs.in_proj_bias.copy_(torch.cat([p[f"{n}.bias"] for n in ("w_q", "w_k", "w_v")]))
        theirs.out_proj.weight.copy_(p["w_o.weight"])
        theirs.out_proj.bias.copy_(p["w_o.bias"])


def torch_mask(mask, B, Lq, Lk):
    """Our bool mask (True = may attend, broadcastable to [B, Lq, Lk]) as PyTorch's [B*H, Lq, Lk] (True = blocked)."""
    if mask is None:
        return None
    return (~mask.expand(B, Lq, Lk)).repeat_interleave(HEADS, dim=0)


def torch_layer(p: dict, d, d_ff, decoder, norm_first, activation, dtype):
    """PyTorch's own layer with the weights `p` (dropout 0, train mode: never the fused fast path)."""
    cls = nn.TransformerDecoderLayer if decoder else nn.TransformerEncoderLayer
    layer = cls(d, HEADS, d_ff, dropout=0.0, activation=activation, batch_first=True, norm_first=norm_first,
                dtype=dtype)
    load_attention(layer.self_attn, sub_params(p, "self_attn"))
    if decoder:
        load_attention(layer.multihead_attn, sub_params(p, "cross_attn"))
    with torch.no_grad():
        for name in ("linear1", "linear2"):
            getattr(layer, name).weight.copy_(p[f"feed_forward.{name}.weight"])
            getattr(layer, name).bias.copy_(p[f"feed_forward.{name}.bias"])
        for n in range(1, 4 if decoder else 3):
            getattr(layer, f"norm{n}").weight.copy_(p[f"norm{n}.weight"])
            getattr(layer, f"norm{n}").bias.copy_(p[f"norm{n}.bias"])
    return layer.train()


def layer_norm_fn(x, w, b, eps=1e-5, *, unbiased=False, eps_outside=False, dims=(-1,), affine="right"):
    dims = tuple(range(x.dim())) if dims == "all" else dims
    mean = x.mean(dim=dims, keepdim=True)
    var = x.var(dim=dims, keepdim=True, unbiased=unbiased)
    x_hat = (x - mean) / (var.sqrt() + eps if eps_outside else torch.sqrt(var + eps))
    if affine == "none":
        return x_hat
    return x_hat * b + w if affine == "swapped" else x_hat * w + b


def feed_forward_fn(p, x, activation, *, act_after=False, no_act=False, act_swap=False, tanh_gelu=False):
    act = {"relu": F.relu, "gelu": (lambda h: F.gelu(h, approximate="tanh")) if tanh_gelu else F.gelu}
    if act_swap:
        activation = "gelu" if activation == "relu" else "relu"
    h = x @ p["linear1.weight"].T + p["linear1.bias"]
    if not (no_act or act_after):
        h = act[activation](h)
    y = h @ p["linear2.weight"].T + p["linear2.bias"]
    return act[activation](y) if act_after else y


def attention_fn(p, prefix, q, k, v, mask):
    return mha_variant(sub_params(p, prefix), HEADS, q, k, v, mask)[0]


def layer_fn(p, norm_first, activation, x, memory=None, src_mask=None, tgt_mask=None, *, residual_from_norm=False,
             norm_on_branch=False, invert=False, swap_norms=False, cross_kv_from_x=False, cross_q_from_memory=False,
             masks_swapped=False, tgt_mask_ignored=False, norm_memory=False, auto_causal=False,
             src_mask_ignored=False, cross_given_tgt_mask=False):
    """An encoder (memory None) or decoder layer computed the right way, or with one deviation."""
    decoder = memory is not None
    norm_first = (not norm_first) if invert else norm_first
    names = [f"norm{n}" for n in range(1, 4 if decoder else 3)]
    if swap_norms:
        names[-2], names[-1] = names[-1], names[-2]
    norms = [functools.partial(lambda h, n: layer_norm_fn(h, p[f"{n}.weight"], p[f"{n}.bias"]), n=n) for n in names]
    if decoder and masks_swapped:
        src_mask, tgt_mask = tgt_mask, src_mask
    if decoder and tgt_mask_ignored:
        tgt_mask = None
    if src_mask_ignored:
        if src_mask is None:
            return None
        src_mask = None
    if decoder and auto_causal:
        if tgt_mask is not None:
            return None
        tgt_mask = torch.ones(x.size(1), x.size(1), dtype=torch.bool).tril()
    ff = sub_params(p, "feed_forward")
    subs = [lambda h: attention_fn(p, "self_attn", h, h, h, tgt_mask if decoder else src_mask)]
    if decoder:
        def cross(h):
            mem = norms[1](memory) if norm_memory else memory
            if cross_kv_from_x:
                return attention_fn(p, "cross_attn", h, h, h, None)
            if cross_q_from_memory:
                return attention_fn(p, "cross_attn", mem, h, h, src_mask)
            return attention_fn(p, "cross_attn", h, mem, mem, tgt_mask if cross_given_tgt_mask else src_mask)
        subs.append(cross)
    subs.append(lambda h: feed_forward_fn(ff, h, activation))
    for sub, norm in zip(subs, norms):
        if norm_first:
            n = norm(x)
            x = (n if residual_from_norm is True or residual_from_norm == "first" and sub is subs[0] else x) + sub(n)
        elif norm_on_branch:
            x = x + norm(sub(x))
        else:
            x = norm(x + sub(x))
    return x


def ragged_masks(B, Lt, Ls):
    """Ragged source and target padding (every row keeps a real token), a causal mask, combined."""
    src_len = [Ls - i % (Ls - 1) for i in range(B)]
    tgt_len = [Lt - i % (Lt - 1) for i in range(B)]
    src_keep = torch.arange(Ls)[None, :] < torch.tensor(src_len)[:, None]
    tgt_keep = torch.arange(Lt)[None, :] < torch.tensor(tgt_len)[:, None]
    causal = torch.ones(Lt, Lt, dtype=torch.bool).tril()
    return src_keep[:, None, :], causal, causal & tgt_keep[:, None, :]


D, D_FF = 8, 16


def stack_params(t: Tester, side, n, norm_first, dtype=torch.float64, prefix=""):
    """Random weights for a stack: every layer different (a repeated layer or a wrong order shows)."""
    p = {}
    for i in range(n):
        for k, v in layer_params(t, D, D_FF, side == "decoder", dtype).items():
            p[f"{prefix}layers.{i}.{k}"] = v
    if norm_first:
        p[f"{prefix}norm.weight"] = 1 + t.randn(D, dtype=dtype, scale=0.3)
        p[f"{prefix}norm.bias"] = t.randn(D, dtype=dtype, scale=0.3)
    return p


def torch_stack_mask(mask, B, Lq, Lk):
    if mask is None:
        return None
    return (~mask.expand(B, Lq, Lk)).repeat_interleave(HEADS, dim=0)


def pe_table(max_len, d, *, swap=False, concat=False, exponent="2i", start=0, multiply=False, base=10000.0):
    """The sinusoidal table in float64, right or with one deviation."""
    pos = torch.arange(start, start + max_len, dtype=torch.float64)[:, None]
    i = torch.arange(d // 2, dtype=torch.float64)
    power = {"2i": 2 * i / d, "i": i / d, "column": None}[exponent]
    if exponent == "column":        # every column its own frequency: 10000^(j/d) for column j
        j = torch.arange(d, dtype=torch.float64)
        angles = pos * base ** (j / d) if multiply else pos / base ** (j / d)
        table = torch.where(j % 2 == 0, torch.sin(angles), torch.cos(angles))
        return torch.cat([table[:, 1::2], table[:, 0::2]], 1) if swap else table
    angles = pos * base ** power if multiply else pos / base ** power        # [max_len, d/2]
    first, second = (torch.cos(angles), torch.sin(angles)) if swap else (torch.sin(angles), torch.cos(angles))
    if concat:
        return torch.cat([first, second], dim=1)
    table = torch.zeros(max_len, d, dtype=torch.float64)
    table[:, 0::2], table[:, 1::2] = first, second
    return table


def model_params(t: Tester, src_vocab, tgt_vocab, n, norm_first, dtype=torch.float64):
    p = {"src_embed.embedding.weight": t.randn(src_vocab, D, dtype=dtype, scale=0.5),
         "tgt_embed.embedding.weight": t.randn(tgt_vocab, D, dtype=dtype, scale=0.5),
         "generator.weight": t.randn(tgt_vocab, D, dtype=dtype, scale=D ** -0.5),
         "generator.bias": t.randn(tgt_vocab, dtype=dtype, scale=0.1)}
    p.update(stack_params(t, "encoder", n, norm_first, dtype, "encoder."))
    p.update(stack_params(t, "decoder", n, norm_first, dtype, "decoder."))
    return p


class TorchStack(nn.Module):
    """PyTorch's layers with the student's weights, run in order, with the final norm of pre-LN."""

    def __init__(self, p, side, n, norm_first, activation, dtype, prefix=""):
        super().__init__()
        self.layers = nn.ModuleList(torch_layer(sub_params(p, f"{prefix}layers.{i}"), D, D_FF, side == "decoder",
                                                norm_first, activation, dtype) for i in range(n))
        self.norm = None
        if norm_first:
            self.norm = nn.LayerNorm(D, dtype=dtype)
            with torch.no_grad():
                self.norm.weight.copy_(p[f"{prefix}norm.weight"])
                self.norm.bias.copy_(p[f"{prefix}norm.bias"])

    def forward(self, x, memory=None, src_mask=None, tgt_mask=None, *, reverse=False, extra_norm=False,
                no_norm=False, swap_masks=False):
        B, L = x.shape[:2]
        if swap_masks:
            src_mask, tgt_mask = tgt_mask, src_mask
        layers = list(self.layers)[::-1] if reverse else self.layers
        for layer in layers:
            if memory is None:
                x = layer(x, src_mask=torch_stack_mask(src_mask, B, L, L))
            else:
                x = layer(x, memory, tgt_mask=torch_stack_mask(tgt_mask, B, L, L), memory_mask=torch_stack_mask(src_mask, B, L, memory.size(1)))
        if self.norm is not None and not no_norm:
            x = self.norm(x)
        if extra_norm:
            x = F.layer_norm(x, (D,))
        return x


class TorchModel(nn.Module):
    """The judge's Transformer: embeddings and positions computed here, PyTorch's layers in between."""

    def __init__(self, p, n, norm_first, activation, dtype, max_len):
        super().__init__()
        self.src = nn.Parameter(p["src_embed.embedding.weight"].clone())
        self.tgt = nn.Parameter(p["tgt_embed.embedding.weight"].clone())
        self.gen = nn.Linear(D, p["generator.weight"].size(0), dtype=dtype)
        with torch.no_grad():
            self.gen.weight.copy_(p["generator.weight"])
            self.gen.bias.copy_(p["generator.bias"])
        self.encoder = TorchStack(p, "encoder", n, norm_first, activation, dtype, "encoder.")
        self.decoder = TorchStack(p, "decoder", n, norm_first, activation, dtype, "decoder.")
        self.pe = pe_table(max_len, D).to(dtype)
        self.train()

    def embed(self, table, tokens, *, scale=True, positions=True):
        x = F.embedding(tokens, table) * (math.sqrt(D) if scale else 1.0)
        return x + self.pe[: tokens.size(1)] if positions else x

    def encode(self, src, src_mask=None, **dev):
        return self.encoder(self.embed(self.src, src, scale=dev.get("scale", True)), src_mask=src_mask)

    def decode(self, tgt, memory, src_mask=None, tgt_mask=None, **dev):
        tgt_mask = None if dev.get("no_tgt_mask") else tgt_mask
        table = self.src if dev.get("tgt_with_src_table") else self.tgt
        return self.decoder(self.embed(table, tgt, scale=dev.get("scale", True)), memory, src_mask, tgt_mask)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, *, memory_from_embeddings=False, **dev):
        memory = self.encode(src, src_mask, **dev)
        if memory_from_embeddings:
            memory = self.embed(self.src, src)
        return self.gen(self.decode(tgt, memory, src_mask, tgt_mask, **dev))


def by_student_name(model: TorchModel, p: dict, pick=lambda t: t.grad) -> dict:
    """The TorchModel's parameters (pick=detach) or gradients (pick=grad) under the student's names."""
    g = {"src_embed.embedding.weight": pick(model.src), "tgt_embed.embedding.weight": pick(model.tgt),
         "generator.weight": pick(model.gen.weight), "generator.bias": pick(model.gen.bias)}
    for side in ("encoder", "decoder"):
        stack = getattr(model, side)
        for i, layer in enumerate(stack.layers):
            theirs = dict(layer.named_parameters())
            for att, mine in (("self_attn", "self_attn"), ("multihead_attn", "cross_attn")):
                if f"{att}.in_proj_weight" not in theirs:
                    continue
                gw, gb = pick(theirs[f"{att}.in_proj_weight"]), pick(theirs[f"{att}.in_proj_bias"])
                for j, proj in enumerate(("w_q", "w_k", "w_v")):
                    g[f"{side}.layers.{i}.{mine}.{proj}.weight"] = gw[j * D:(j + 1) * D]
                    g[f"{side}.layers.{i}.{mine}.{proj}.bias"] = gb[j * D:(j + 1) * D]
                g[f"{side}.layers.{i}.{mine}.w_o.weight"] = pick(theirs[f"{att}.out_proj.weight"])
                g[f"{side}.layers.{i}.{mine}.w_o.bias"] = pick(theirs[f"{att}.out_proj.bias"])
            for name in ("linear1", "linear2"):
                for kind in ("weight", "bias"):
                    g[f"{side}.layers.{i}.feed_forward.{name}.{kind}"] = pick(theirs[f"{name}.{kind}"])
            for n in (1, 2, 3):
                for kind in ("weight", "bias"):
                    if f"norm{n}.{kind}" in theirs:
                        g[f"{side}.layers.{i}.norm{n}.{kind}"] = pick(theirs[f"norm{n}.{kind}"])
        if stack.norm is not None:
            g[f"{side}.norm.weight"], g[f"{side}.norm.bias"] = pick(stack.norm.weight), pick(stack.norm.bias)
    return {k: v for k, v in g.items() if k in p}
