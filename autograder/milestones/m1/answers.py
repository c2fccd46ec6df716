"""Milestone 1's right answers, computed by the judge from the inputs alone (no Tester, no student reply):
attention as PyTorch defines it, its gradients, and CATALOGUE's computations of what each known mistake
returns on the same inputs (@CATALOGUE.entry), so that a wrong answer can be named."""
from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F

from autograder.milestones.reference import attention_weights
from autograder.milestones.m1.mistakes import CATALOGUE


def expected_attention(q, k, v, mask=None):
    """(output, weights) as PyTorch defines them; fully masked rows give zeros."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask), attention_weights(q, k, mask)


# ---- the catalogue: what each known mistake returns ----------------------------------------

def _pair(w, v):
    return w @ v, w


# Float64 inputs through a float32 softmax; it also fits, to float32 precision, any other float32 step (a float32
# scale), so its sentence claims only that. Its gradients too: the gradients check charges it once with the values.
@CATALOGUE.entry("attention", "lower_precision", "part of the attention is computed in float32 and converted back "
                 "(the result agrees with the right one only to float32 precision, as with softmax(scores.float())"
                 ".type_as(scores) or a float32 scale factor): keep float64 inputs in float64 throughout.")
def _weights_in_float32(q, k, v, mask=None, **_):
    return _pair(attention_weights(q, k, mask, softmax_dtype=torch.float32), v) if q.dtype == torch.float64 else None


@CATALOGUE.entry("attention", "no_sqrt", "the scores are not divided by sqrt(d_k): divide q @ k^T by "
                 "math.sqrt(d_k).", home="parity")
def _no_sqrt(q, k, v, mask=None, **_):
    return _pair(attention_weights(q, k, mask, scale=1.0), v)


@CATALOGUE.entry("attention", "scale_from_dim_1", "d_k is read from q's dimension 1 (q.shape[1]), which is d_k only "
                 "for 2-D inputs [L, d_k]: with leading dims it is a length or the number of heads. Read it from the "
                 "last dimension: d_k = q.size(-1).", home="parity")
def _scale_dim_1(q, k, v, mask=None, **_):
    return _pair(attention_weights(q, k, mask, scale=math.sqrt(q.size(1))), v) if q.dim() > 2 else None


# (The number of queries q.size(-2) is q.shape[1] for 3-D inputs: that one is scale_from_dim_1's.)
@CATALOGUE.entry("attention", "scale_from_length", "the scores are divided by the square root of the number of keys "
                 "(k.size(-2)), not of d_k, the width of q and k: d_k = q.size(-1).", home="parity")
def _scale_keys(q, k, v, mask=None, **_):
    return _pair(attention_weights(q, k, mask, scale=math.sqrt(k.size(-2))), v) if k.size(-2) != q.size(-1) else None


@CATALOGUE.entry("attention", "divide_by_dk", "the scores are divided by d_k instead of sqrt(d_k).", home="parity")
def _divide_by_dk(q, k, v, mask=None, **_):
    return _pair(attention_weights(q, k, mask, scale=float(q.size(-1))), v)


@CATALOGUE.entry("attention", "sqrt_dv", "the scores are divided by sqrt(d_v) (the last dimension of v); "
                 "the scale comes from the keys' width: sqrt(d_k) = sqrt(q.size(-1)).", home="parity")
def _sqrt_dv(q, k, v, mask=None, **_):
    return _pair(attention_weights(q, k, mask, scale=math.sqrt(v.size(-1))), v) if v.size(-1) != q.size(-1) else None


@CATALOGUE.entry("attention", "scale_after_softmax", "the weights are divided by sqrt(d_k) after the softmax; "
                 "the scaling belongs to the scores, before the softmax (weights must sum to 1).", home="parity")
def _scale_after_softmax(q, k, v, mask=None, **_):
    return _pair(attention_weights(q, k, mask, scale=1.0) / math.sqrt(q.size(-1)), v)


@CATALOGUE.entry("attention", "softmax_dim", "the softmax runs over the wrong dimension: each query's weights "
                 "must sum to 1 over the keys (dim=-1).")
def _softmax_dim(q, k, v, mask=None, **_):
    return _pair(attention_weights(q, k, mask, softmax_dim=-2), v)


@CATALOGUE.entry("attention", "mask_ignored", "the mask is ignored: block the keys where the mask is False "
                 "(scores.masked_fill(~mask, float('-inf'))).")
def _mask_ignored(q, k, v, mask=None, **_):
    return None if mask is None else expected_attention(q, k, v)


@CATALOGUE.entry("attention", "mask_inverted", "the mask is inverted: True means 'may attend', so block the keys "
                 "where the mask is False.")
def _mask_inverted(q, k, v, mask=None, **_):
    return None if mask is None else _pair(attention_weights(q, k, mask, invert=True), v)


@CATALOGUE.entry("attention", "fill_large_negative", "masked scores are filled with a large negative number "
                 "instead of -inf, so a query row whose keys are all masked averages v instead of giving zeros; "
                 "fill with -inf and let your softmax return zeros for an all -inf row.")
def _fill_large_negative(q, k, v, mask=None, **_):
    if mask is None:
        return None
    d_k = q.size(-1)
    w = torch.softmax((q @ k.transpose(-2, -1) / math.sqrt(d_k)).masked_fill(~mask, -1e9), -1)
    return _pair(w, v)


@CATALOGUE.entry("attention", "mask_added", "the mask is added to the scores as 0/1 numbers; use it to block "
                 "keys instead: scores.masked_fill(~mask, float('-inf')).")
def _mask_added(q, k, v, mask=None, **_):
    if mask is None:
        return None
    return _pair(torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)) + mask.to(q.dtype), -1), v)


@CATALOGUE.entry("attention", "mask_after_softmax", "the mask is applied after the softmax, so the remaining "
                 "weights no longer sum to 1: mask the scores (with -inf) before the softmax.")
def _mask_after_softmax(q, k, v, mask=None, **_):
    if mask is None:
        return None
    return _pair(torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), -1).masked_fill(~mask, 0.0), v)


# Equal to the right answer up to rounding, except where a blocked key's score is far above the allowed ones (the
# masking group has such an input): there the allowed keys' weights underflow to 0 before the mask is applied.
@CATALOGUE.entry("attention", "mask_after_softmax_renormalised", "the mask is applied after a softmax over all the "
                 "keys, and the rows are renormalised (softmax(scores) * mask, divided by the row sums): where a "
                 "blocked key's score is far above the allowed ones, the allowed keys' weights underflow to 0 in "
                 "that softmax, so the row comes out all zeros instead of a softmax over the allowed keys. Set the "
                 "blocked scores to -inf before the softmax (scores.masked_fill(~mask, float('-inf'))).")
def _mask_after_softmax_renormalised(q, k, v, mask=None, **_):
    if mask is None:
        return None
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), -1) * mask
    total = w.sum(-1, keepdim=True)
    return _pair(w / torch.where(total > 0, total, torch.ones_like(total)), v)


@CATALOGUE.entry("attention", "k_not_transposed", "the scores are q @ k without transposing k; use "
                 "q @ k.transpose(-2, -1) so each query meets each key.")
def _k_not_transposed(q, k, v, mask=None, **_):
    return _pair(attention_weights(q, k, mask, transpose=False), v)


@CATALOGUE.entry("attention", "k_dot_T", "k.T reverses ALL dimensions of a batched tensor; use "
                 "k.transpose(-2, -1), which swaps only the last two.")
def _k_dot_t(q, k, v, mask=None, **_):
    kt = k.permute(*reversed(range(k.dim())))
    scores = q @ kt / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return _pair(torch.nan_to_num(torch.softmax(scores, -1), nan=0.0), v)


@CATALOGUE.entry("attention", "transpose_1_2", "k.transpose(1, 2) swaps the last two dimensions only for 3-D "
                 "inputs; use k.transpose(-2, -1), right for any number of leading dimensions.")
def _transpose_1_2(q, k, v, mask=None, **_):
    scores = q @ k.transpose(1, 2) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return _pair(torch.nan_to_num(torch.softmax(scores, -1), nan=0.0), v)


@CATALOGUE.entry("attention", "mask_unsqueezed", "a 3-D mask gets an extra dimension inside attention; masks "
                 "only have to broadcast to the scores, so leave the mask as it is given (a per-head mask "
                 "[H, Lq, Lk] then no longer lines up).")
def _mask_unsqueezed(q, k, v, mask=None, **_):
    if mask is None or mask.dim() != 3:
        return None
    return _pair(attention_weights(q, k, mask.unsqueeze(1)), v)


@CATALOGUE.entry("attention", "keys_values_swapped", "keys and values are swapped: the scores use k "
                 "(q @ k^T) and the output uses v (weights @ v).")
def _keys_values_swapped(q, k, v, mask=None, **_):
    w = attention_weights(q, v, mask)           # raises, like the student's code, when d_v != d_k
    return w @ k, w


@CATALOGUE.entry("softmax", "softmax_ignores_dim", "the softmax is taken over the last dimension whatever `dim` "
                 "says: reduce over `dim` (amax and sum with dim=dim, keepdim=True).")
def _softmax_ignores_dim(x, dim=-1):
    return torch.softmax(x, -1) if dim not in (-1, x.dim() - 1) else None


@CATALOGUE.entry("softmax", "lower_precision", "the exponentials are computed in float32 and converted back "
                 "(e.g. torch.exp((x - max).float())): keep float64 inputs in float64 throughout.")
def _softmax_exp_in_float32(x, dim=-1):
    if x.dtype != torch.float64:
        return None
    m = x.amax(dim, keepdim=True)
    e = torch.exp((x - torch.where(torch.isfinite(m), m, torch.zeros_like(m))).float()).to(x.dtype)
    s = e.sum(dim, keepdim=True)
    return e / torch.where(s > 0, s, torch.ones_like(s))


@CATALOGUE.entry("softmax", "softmax_global_sum", "each entry is divided by the sum over the whole tensor; divide "
                 "by the sum along `dim` only (keepdim=True).")
def _softmax_global_sum(x, dim=-1):
    e = torch.exp(x - x.amax())
    return e / e.sum()


@CATALOGUE.entry("softmax", "softmax_max_wrong_dim", "the max is taken over the last dimension but the exponentials "
                 "are summed along `dim`: the shift is then not constant along each softmax slice, which changes the "
                 "result. Take the max along `dim` too (x.amax(dim=dim, keepdim=True)).")
def _softmax_max_last(x, dim=-1):
    if dim in (-1, x.dim() - 1):
        return None
    e = torch.exp(x - x.amax(-1, keepdim=True))
    return e / e.sum(dim, keepdim=True)


def _softmax_eps(x, dim=-1, eps=1e-6):
    """A small constant added to the sum, instead of a guard for the all -inf slices."""
    e = torch.exp(x - _finite_or_zero(x.amax(dim, keepdim=True)))
    return e / (e.sum(dim, keepdim=True) + eps)


for _eps in (1e-5, 1e-6, 1e-7, 1e-8, 1e-9):
    CATALOGUE.mistake(f"softmax_eps_{_eps:g}", f"the sum is increased by a small constant ({_eps:g}) before the division, "
                      f"so no row sums to exactly 1 and the values differ from the formula by about {_eps:g} relative: "
                      "divide by the sum itself, and guard only the all -inf slices (a sum of 0: divide by 1 there).",
                      kind="softmax", reproduce=functools.partial(_softmax_eps, eps=_eps))


def _finite_or_zero(y):
    return torch.nan_to_num(y, nan=0.0, posinf=0.0, neginf=0.0)


@CATALOGUE.entry("softmax", "softmax_overflow", "exp of a large score overflows to inf (exp(710) in float64, "
                 "exp(89) in float32), and inf / inf is NaN: subtract each slice's max before exp "
                 "(softmax(x) == softmax(x - max)).")
def _softmax_naive(x, dim=-1):
    e = torch.exp(x)
    return _finite_or_zero(e / e.sum(dim, keepdim=True))


SOFTMAX_OVERFLOW = _softmax_naive


@CATALOGUE.entry("softmax", "softmax_global_max", "one max of the whole tensor is subtracted; subtract each "
                 "slice's own max along `dim` (x.amax(dim=dim, keepdim=True)), or slices far below the global "
                 "max underflow to 0.")
def _softmax_global_max(x, dim=-1):
    e = torch.exp(x - x.amax())
    s = e.sum(dim, keepdim=True)
    return torch.where(s > 0, e / s, torch.zeros_like(e))


@CATALOGUE.entry("softmax", "softmax_sum_wrong_dim", "the max is taken along `dim` but the sum along the last "
                 "dimension: every reduction must use dim=dim.")
def _softmax_sum_last(x, dim=-1):
    if dim in (-1, x.dim() - 1):
        return None
    e = torch.exp(x - x.amax(dim, keepdim=True))
    return e / e.sum(-1, keepdim=True)


# ---- gradients ------------------------------------------------------------------------------

def output_grads(fn, inputs, mask, g):
    """Gradients of fn(q, k, v, mask)[0] (the output) with respect to q, k, v; None where fn does not apply."""
    leaves = [x.clone().requires_grad_(True) for x in inputs]
    try:
        result = fn(*leaves, mask)
    except Exception:
        return None
    if result is None or not result[0].requires_grad or result[0].shape != g.shape:
        return None
    return torch.autograd.grad(result[0], leaves, g, allow_unused=True)
