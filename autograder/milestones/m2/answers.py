"""Milestone 2's right answers, computed by the judge from the inputs alone (no Tester, no student reply):
torch.nn.MultiheadAttention(batch_first=True) loaded with the student's four projections, and CATALOGUE's
computations of what each known mistake returns (reference.py's small multi-head attention with one mistake
switched on), so that a wrong answer can be named."""
from __future__ import annotations

import functools
import math

import torch
from torch import nn

from autograder.milestones.reference import merge_from_heads, mha_variant, project, split_into_heads
from autograder.milestones.m2.mistakes import CATALOGUE


def reference_mha(params, d_model, heads, query, key, value, mask=None, grad_output=None):
    """(output, per-head weights, grads or None) from nn.MultiheadAttention.

    grads: parameter name -> gradient, plus "query", "key", "value" -> input gradient.
    """
    if grad_output is not None:
        query, key, value = (x.clone().requires_grad_(True) for x in (query, key, value))
    bias = "w_q.bias" in params
    mha = nn.MultiheadAttention(d_model, heads, bias=bias, batch_first=True, dtype=query.dtype)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([params[f"{n}.weight"] for n in ("w_q", "w_k", "w_v")]))
        mha.out_proj.weight.copy_(params["w_o.weight"])
        if bias:
            mha.in_proj_bias.copy_(torch.cat([params[f"{n}.bias"] for n in ("w_q", "w_k", "w_v")]))
            mha.out_proj.bias.copy_(params["w_o.bias"])
    attn_mask = None
    if mask is not None:
        B, Lq, Lk = query.size(0), query.size(1), key.size(1)
        full = mask.expand(B, Lq, Lk)                                 # [Lq, Lk] or [B, 1|Lq, Lk]
        attn_mask = (~full).repeat_interleave(heads, dim=0)          # [B*H, Lq, Lk], batch-major
    # Grad mode on: keeps nn.MultiheadAttention off its fused fast path (see grading notes).
    out, weights = mha(query, key, value, attn_mask=attn_mask, need_weights=True, average_attn_weights=False)
    grads = None
    if grad_output is not None:
        out.backward(grad_output)
        d = d_model
        g_in = mha.in_proj_weight.grad
        grads = {"w_q.weight": g_in[:d], "w_k.weight": g_in[d:2 * d], "w_v.weight": g_in[2 * d:],
                 "w_o.weight": mha.out_proj.weight.grad}
        grads.update(query=query.grad, key=key.grad, value=value.grad)
        if bias:
            gb = mha.in_proj_bias.grad
            grads.update({"w_q.bias": gb[:d], "w_k.bias": gb[d:2 * d], "w_v.bias": gb[2 * d:],
                          "w_o.bias": mha.out_proj.bias.grad})
    return out.detach(), weights.detach(), grads


def output_from_weights(params, heads, value, weights):
    """What forward returns when it computed with `weights` [B, H, Lq, Lk] (the weights it stored, after its
    dropout in training mode): w_o(merge_heads(weights @ v)), v = split_heads(w_v(value))."""
    v = split_into_heads(project(params, "w_v", value), heads)
    return project(params, "w_o", merge_from_heads(weights.to(v.dtype) @ v))


# ---- the catalogue: a small multi-head attention with one mistake switched on ----------------

def _variant(mid, text, **deviation):
    CATALOGUE.entry("mha", mid, text)(functools.partial(mha_variant, **deviation))


_variant("split_plain_view", "split_heads views [B, L, d_model] straight as [B, H, L, d_k], which mixes "
         "positions into heads: reshape to [B, L, H, d_k] first, then transpose(1, 2).", split="plain_view")
_variant("split_interleaved", "head h must hold features h*d_k:(h+1)*d_k (contiguous blocks), not every H-th "
         "feature: reshape to [B, L, H, d_k], not [B, L, d_k, H].", split="interleaved")
_variant("merge_no_transpose", "merge_heads flattens [B, H, L, d_k] without moving the head dimension back after "
         "the length: transpose(1, 2) first, then reshape to [B, L, H*d_k].", merge="no_transpose")
_variant("no_output_projection", "the output projection w_o is never applied: return w_o(merge_heads(...)).",
         output=False)
_variant("key_from_query", "the keys are projected from the `query` input; keys come from `key`: "
         "k = w_k(key).", k_from="query")
_variant("key_with_w_q", "the keys go through w_q; each input has its own projection: k = w_k(key).",
         k_with="w_q")
_variant("value_from_key", "the values are projected from the `key` input; values come from `value`: "
         "v = w_v(value).", v_from="key")
_variant("value_with_w_k", "the values go through w_k instead of w_v (w_v is never used): v = w_v(value).",
         v_with="w_k")
_variant("keys_values_swapped", "keys and values are swapped: k = w_k(key) and v = w_v(value).",
         k_from="value", v_from="key")
_variant("mask_inverted", "the mask is inverted: our masks mean True = may attend (the opposite of "
         "nn.MultiheadAttention's), so pass them on as they are.", invert=True)
_variant("mask_no_head_dim", "a [B, Lq, Lk] or [B, 1, Lk] mask must get a head dimension (mask.unsqueeze(-3)) "
         "before it meets the scores [B, H, Lq, Lk]; without it, the batch lines up with the heads.",
         mask_how="none")
_variant("mask_unsqueeze_always", "unsqueeze(1) turns a 2-D causal mask [Lq, Lk] into [Lq, 1, Lk], which lines "
         "the queries up with the heads: mask.unsqueeze(-3) gives [1, Lq, Lk] for it and [B, 1, Lq, Lk] for a 3-D "
         "mask.",
         mask_how="always")
_variant("mask_unsqueeze_last", "the head dimension goes just before the last two (mask.unsqueeze(-3) -> [B, 1, Lq, "
         "Lk]), not at the end.", mask_how="last")


@CATALOGUE.entry("mha", "scaled_twice", "the queries are scaled by 1/sqrt(d_k) before attention, which already "
                 "divides the scores by sqrt(d_k): scale once.")
def _scaled_twice(params, heads, query, key, value, mask=None):
    return mha_variant(params, heads, query, key, value, mask, extra_scale=1 / math.sqrt(query.size(-1) // heads))


@CATALOGUE.entry("mha", "scores_scaled_by_d_model", "the scores are divided by sqrt(d_model) instead of sqrt(d_k) "
                 "(d_k = d_model / num_heads, the width of one head): scaled_dot_product_attention already divides by "
                 "sqrt(d_k), so pass q as it is.")
def _scores_scaled_by_d_model(params, heads, query, key, value, mask=None):
    d_model = query.size(-1)
    return mha_variant(params, heads, query, key, value, mask, extra_scale=math.sqrt(d_model // heads / d_model))


@CATALOGUE.entry("mha", "scaled_by_d_model", "the queries are scaled by 1/sqrt(d_model) before attention; "
                 "attention already divides by sqrt(d_k), the width of one head.")
def _scaled_by_d_model(params, heads, query, key, value, mask=None):
    return mha_variant(params, heads, query, key, value, mask, extra_scale=1 / math.sqrt(query.size(-1)))
