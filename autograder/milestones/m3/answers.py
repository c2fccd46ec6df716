"""Milestone 3's right answers, computed by the judge from the inputs alone (no Tester, no student reply):
PyTorch's own layers (nn.TransformerEncoderLayer/DecoderLayer, batch_first=True, via reference.py) loaded with
the same random weights as the student's, and CATALOGUE's computations of what each known mistake returns
(reference.py's functional layers with one known mistake switched on at a time), so that a wrong answer can
be named."""
from __future__ import annotations

import functools

import torch

from autograder.milestones.reference import (
    attention_fn, feed_forward_fn, layer_fn, layer_norm_fn, sub_params, torch_layer, torch_mask)
from autograder.milestones.m3.mistakes import CATALOGUE


def expected_layer(p, d, d_ff, norm_first, activation, x, memory=None, src_mask=None, tgt_mask=None, grad=None,
                   norm_eps=None):
    """(output, grads or None) of PyTorch's layer; grads: parameter name (ours) -> gradient, and "x", "memory".
    `norm_eps`: the eps of the layer's norms, when not LayerNorm's default 1e-5 (a known mistake)."""
    decoder = memory is not None
    layer = torch_layer(p, d, d_ff, decoder, norm_first, activation, x.dtype)
    if norm_eps is not None:
        for n in range(1, 4 if decoder else 3):
            getattr(layer, f"norm{n}").eps = norm_eps
    B, L = x.shape[:2]
    if grad is not None:
        x = x.clone().requires_grad_(True)
        memory = memory.clone().requires_grad_(True) if decoder else None
    if decoder:
        out = layer(x, memory, tgt_mask=torch_mask(tgt_mask, B, L, L),
                    memory_mask=torch_mask(src_mask, B, L, memory.size(1)))
    else:
        out = layer(x, src_mask=torch_mask(src_mask, B, L, L))
    if grad is None:
        return out.detach(), None
    out.backward(grad)
    grads = {"x": x.grad}
    if decoder:
        grads["memory"] = memory.grad
    theirs = dict(layer.named_parameters())
    for att, mine in (("self_attn", "self_attn"), ("multihead_attn", "cross_attn")):
        if f"{att}.in_proj_weight" not in theirs or (mine == "cross_attn" and not decoder):
            continue
        gw, gb = theirs[f"{att}.in_proj_weight"].grad, theirs[f"{att}.in_proj_bias"].grad
        for i, proj in enumerate(("w_q", "w_k", "w_v")):
            grads[f"{mine}.{proj}.weight"] = gw[i * d:(i + 1) * d]
            grads[f"{mine}.{proj}.bias"] = gb[i * d:(i + 1) * d]
        grads[f"{mine}.w_o.weight"] = theirs[f"{att}.out_proj.weight"].grad
        grads[f"{mine}.w_o.bias"] = theirs[f"{att}.out_proj.bias"].grad
    for name in ("linear1", "linear2"):
        grads[f"feed_forward.{name}.weight"] = theirs[f"{name}.weight"].grad
        grads[f"feed_forward.{name}.bias"] = theirs[f"{name}.bias"].grad
    for n in range(1, 4 if decoder else 3):
        grads[f"norm{n}.weight"] = theirs[f"norm{n}.weight"].grad
        grads[f"norm{n}.bias"] = theirs[f"norm{n}.bias"].grad
    return out.detach(), grads


# ---- the catalogue: the layers written out, with one known mistake at a time ------------------


for _id, _text, _dev, _ in CATALOGUE.table("layer_norm", layer_norm_fn):     # deviations.yaml
    CATALOGUE.entry("layer_norm", _id, _text)(
        lambda x, w, b, eps=1e-5, _dev=_dev: layer_norm_fn(x, w, b, eps, **_dev) if _dev.get("dims") == "all" or max(
            map(abs, _dev.get("dims", (-1,)))) <= x.dim() else None)


@CATALOGUE.entry("layer_norm", "eps_ignored", "the `eps` given to the constructor is not used (1e-5 is used "
                 "whatever eps says): store it (self.eps = eps) and add self.eps inside the square root.")
def _ln_eps_ignored(x, w, b, eps=1e-5):
    return layer_norm_fn(x, w, b, 1e-5) if eps != 1e-5 else None


@CATALOGUE.entry("layer_norm", "variance_by_moments", "the variance is computed as E[x^2] - E[x]^2: when the "
                 "mean is large compared with the spread, the two terms are nearly equal and their difference "
                 "keeps few correct digits (catastrophic cancellation), even in float64. Compute it as the mean of "
                 "the squared deviations: ((x - mean) ** 2).mean(-1, keepdim=True).")
def _ln_variance_by_moments(x, w, b, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    var = (x * x).mean(-1, keepdim=True) - mean * mean
    return (x - mean) / torch.sqrt(var + eps) * w + b


@CATALOGUE.entry("layer_norm", "rms_norm", "this is RMSNorm (LLaMA's, T5's), not LayerNorm: x is divided by the root "
                 "mean square of its features, sqrt(mean(x ** 2) + eps), without subtracting the mean first. LayerNorm "
                 "centres each position, then divides by its standard deviation: (x - mean) / sqrt(var + eps), with "
                 "var = ((x - mean) ** 2).mean(-1, keepdim=True).")
def _ln_rms_norm(x, w, b, eps=1e-5):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w + b


@CATALOGUE.entry("layer_norm", "normalised_in_float32", "the normalisation runs in float32 (x.float(), cast back "
                 "after): float64 inputs keep only about 7 correct digits. Keep the input's dtype throughout (the "
                 "mixed-precision idiom is for float16 models, not for a LayerNorm that must match float64).")
def _ln_in_float32(x, w, b, eps=1e-5):
    if x.dtype != torch.float64:
        return None
    return layer_norm_fn(x.float(), torch.ones_like(w, dtype=torch.float32), torch.zeros_like(b, dtype=torch.float32),
                         eps).to(x.dtype) * w + b


for _id, _text, _dev, _ in CATALOGUE.table("feed_forward", feed_forward_fn):
    CATALOGUE.entry("feed_forward", _id, _text)(lambda p, x, activation, _dev=_dev: feed_forward_fn(p, x, activation, **_dev))


@CATALOGUE.entry("feed_forward", "ffn_own_residual", "FeedForward adds its own residual connection (it returns x + "
                 "linear2(...)); it must return linear2(dropout(activation(linear1(x)))) alone. The layers add the "
                 "residual around it (x + drop(feed_forward(...))), so with yours x would be added twice.")
def _ffn_own_residual(p, x, activation):
    return x + feed_forward_fn(p, x, activation)


DECODER_ROWS = CATALOGUE.table("decoder", layer_fn)    # deviations.yaml


@CATALOGUE.entry("encoder", "activation_not_passed", "the layer builds its feed_forward without `activation`, "
                 "so it always uses FeedForward's default relu: FeedForward(d_model, d_ff, dropout, activation).")
def _encoder_activation_not_passed(p, norm_first, activation, x, memory=None, src_mask=None, tgt_mask=None):
    return layer_fn(p, norm_first, "relu", x, memory, src_mask, tgt_mask) if activation != "relu" else None


CATALOGUE.entry("decoder", "activation_not_passed", _encoder_activation_not_passed.text)(
    _encoder_activation_not_passed.reproduce)


@CATALOGUE.entry("decoder", "cross_kv_from_decoder", next(r.text for r in DECODER_ROWS if r.id == "cross_kv_from_decoder"))
def _cross_kv_from_decoder_masked(p, norm_first, activation, x, memory=None, src_mask=None, tgt_mask=None):
    """The same mistake written with the source mask kept, cross_attn(x, x, x, src_mask): a source mask of
    length Ls cannot mask Lt keys, so it raises inside the attention when Ls != Lt (see Catalogue.raising)."""
    if memory is None or src_mask is None:
        return None               # without a source mask: the row of the decoder table
    ff = sub_params(p, "feed_forward")
    subs = (lambda h: attention_fn(p, "self_attn", h, h, h, tgt_mask),
            lambda h: attention_fn(p, "cross_attn", h, h, h, src_mask),
            lambda h: feed_forward_fn(ff, h, activation))
    for n, sub in enumerate(subs, 1):
        def norm(h, n=n):
            return layer_norm_fn(h, p[f"norm{n}.weight"], p[f"norm{n}.bias"])
        x = x + sub(norm(x)) if norm_first else norm(x + sub(x))
    return x


@CATALOGUE.entry("decoder", "cross_q_from_layer_input", "the cross-attention takes its queries from the layer's "
                 "input x, not from the stream after the self-attention sub-layer. Post-LN: x = norm1(x + "
                 "drop(self_attn(x, x, x, tgt_mask))), then cross_attn(x, memory, memory, src_mask) with that new x; "
                 "pre-LN: x = x + drop(self_attn(...)), then cross_attn(norm2(x), memory, memory, src_mask) with that "
                 "new x.")
def _cross_q_from_layer_input(p, norm_first, activation, x, memory=None, src_mask=None, tgt_mask=None):
    """The self-attention sub-layer is computed and added, but the cross-attention's queries are taken from the
    layer's input (post-LN: x itself; pre-LN: norm2 of it)."""
    if memory is None:
        return None
    ff = sub_params(p, "feed_forward")

    def norm(h, n):
        return layer_norm_fn(h, p[f"norm{n}.weight"], p[f"norm{n}.bias"])
    queries = norm(x, 2) if norm_first else x
    subs = (lambda h: attention_fn(p, "self_attn", h, h, h, tgt_mask),
            lambda h: attention_fn(p, "cross_attn", queries, memory, memory, src_mask),
            lambda h: feed_forward_fn(ff, h, activation))
    for n, sub in enumerate(subs, 1):
        x = x + sub(norm(x, n)) if norm_first else norm(x + sub(x), n)
    return x


# The layers' norms built with another eps than LayerNorm's default 1e-5 (LayerNorm(d_model, eps=...)): PyTorch's
# layer with that eps. Named only when it reproduces the answer to float64 accuracy (see STRICT_ONLY): to float32
# accuracy (the loose match) the eps of 1e-6 and below look alike, and like a computation partly in float32.
# Below about 1e-10 an eps cannot be told from none at all in float64 at unit scale (measured: 1e-10, 1e-12 and 0
# give the same answers to 1e-9): one entry stands for them all.
NORM_EPS = {1e-6: ("1e-6", "1e-6 (the Annotated Transformer's value)"), 1e-7: ("1e-7", "1e-7"),
            1e-8: ("1e-8", "1e-8"), 1e-9: ("1e-9", "1e-9"), 1e-12: ("1e-12", "1e-10 or less (1e-12 is common)"),
            1e-4: ("1e-4", "1e-4"), 1e-3: ("1e-3", "1e-3")}
STRICT_ONLY = {"layer_norms_eps", "layer_norm_default_eps"}


def _register_norm_eps():
    for kind in ("encoder", "decoder"):
        for eps, (literal, said) in NORM_EPS.items():
            text = (f"the layer's norms use eps = {said}, not LayerNorm's default 1e-5 (for example "
                    f"LayerNorm(d_model, eps={literal})): build them as LayerNorm(d_model), as the docstring says, so "
                    f"that eps is 1e-5, that of PyTorch's layers.")

            def fn(p, norm_first, activation, x, memory=None, src_mask=None, tgt_mask=None, _eps=eps):
                d, d_ff = x.size(-1), p["feed_forward.linear1.weight"].size(0)
                return expected_layer(p, d, d_ff, norm_first, activation, x, memory, src_mask, tgt_mask,
                                      norm_eps=_eps)[0]
            CATALOGUE.entry(kind, "layer_norms_eps", text)(fn)


_register_norm_eps()


def _register_default_eps():
    """LayerNorm itself with another default eps (def __init__(self, d_model, eps=1e-6)): seen when the check gives
    no eps (1e-5, the default, is meant)."""
    for eps, (literal, said) in NORM_EPS.items():
        text = (f"LayerNorm's default eps is {said}, not 1e-5 (def __init__(self, d_model, eps={literal})): keep the "
                f"stub's default, eps=1e-5, that of nn.LayerNorm.")
        CATALOGUE.entry("layer_norm", "layer_norm_default_eps", text)(
            lambda x, w, b, eps=1e-5, _eps=eps: layer_norm_fn(x, w, b, _eps) if eps == 1e-5 else None)


_register_default_eps()


# Pre-LN, the feed-forward reading a stale value instead of the stream that holds the attention output(s): the
# normalised input of the sub-layer before it, normalised again (n = norm1(x); ...; feed_forward(norm2(n))), or the
# layer's own input (feed_forward(norm2(x_in))).
STALE_FF = {
    ("encoder", "previous_normed"): "norm2 of the attention's normalised input (norm2(norm1(x)))",
    ("encoder", "layer_input"): "norm2 of the layer's input (the x the layer was called with)",
    ("decoder", "previous_normed"): "norm3 of the cross-attention's normalised input (norm3(norm2(x)))",
    ("decoder", "layer_input"): "norm3 of the layer's input (the x the layer was called with)",
}


def ff_from_stale(p, norm_first, activation, x, memory=None, src_mask=None, tgt_mask=None, *, reads):
    """A pre-LN layer whose feed-forward reads `reads` ("previous_normed" or "layer_input") through its norm."""
    if not norm_first:
        return None
    decoder = memory is not None

    def norm(h, n):
        return layer_norm_fn(h, p[f"norm{n}.weight"], p[f"norm{n}.bias"])
    x_in, n = x, norm(x, 1)
    x = x + attention_fn(p, "self_attn", n, n, n, tgt_mask if decoder else src_mask)
    if decoder:
        n = norm(x, 2)
        x = x + attention_fn(p, "cross_attn", n, memory, memory, src_mask)
    stale = n if reads == "previous_normed" else x_in
    return x + feed_forward_fn(sub_params(p, "feed_forward"), norm(stale, 3 if decoder else 2), activation)


def _register_stale_ff():
    for (kind, reads), said in STALE_FF.items():
        last = "norm3" if kind == "decoder" else "norm2"
        text = (f"in pre-LN the feed-forward must read the stream that already holds the attention "
                f"output{'s' if kind == 'decoder' else ''}: x = x + drop(feed_forward({last}(x))) with the updated x; "
                f"yours reads {said}, so the attention's result never reaches the feed-forward.")
        CATALOGUE.entry(kind, "pre_ln_ff_stale_input", text)(functools.partial(ff_from_stale, reads=reads))


_register_stale_ff()


def _register_layers():
    for kind in ("encoder", "decoder"):
        rows = CATALOGUE.table("layer", layer_fn, layouts=True) + (DECODER_ROWS if kind == "decoder" else [])
        for mid, text, dev, mode in rows:
            def fn(p, norm_first, activation, x, memory=None, src_mask=None, tgt_mask=None, _dev=dev, _mode=mode):
                if _mode == "pre" and not norm_first or _mode == "post" and norm_first:
                    return None
                return layer_fn(p, norm_first, activation, x, memory, src_mask, tgt_mask, **_dev)
            CATALOGUE.entry(kind, mid, text)(fn)


_register_layers()


# ---- a post-LN layer's residual stream ---------------------------------------------------------

def through_norms(z, norm_weights):
    """`z` through the LayerNorms `norm_weights` ((weight, bias) pairs), one after the other."""
    for w, b in norm_weights:
        z = layer_norm_fn(z, w, b)
    return z
