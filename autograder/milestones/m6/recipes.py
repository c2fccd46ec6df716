"""Milestone 6's recipes: code the judge sends to the worker as source, to run beside the student's
decoding.py. PRELUDE (the imports the sent code relies on), the oracle (OracleHead, OracleModel: a
scripted model whose logits are a fixed function of the source, the prefix and the position; the judge
builds the same class on its side), make_model (an oracle, or the course's Transformer with given
weights), and the recipes that run the student's decoding functions. HELPERS is what each recipe needs
sent before it."""
from __future__ import annotations

import torch
from torch import nn

PRELUDE = "import math\nimport torch\nfrom torch import nn\n"


# ---- the oracle: a scripted model (this source also runs in the worker) ---------------------------

class OracleHead(nn.Module):
    """The oracle's generator: features [..., 4] (source hash, source length, prefix hash, position)
    -> logits [..., V], computed in float64 and returned in the model's dtype. <pad> and <bos> get -1e4
    (never chosen), and so does every id of `banned` (e.g. a pad_id other than 0); <eos> gets a bonus once
    the position reaches the item's source length + eos_after, so items end at different steps."""

    def __init__(self, vocab, seed, scale, src_weight, prefix_weight, eos_after, eos_boost, eos_bias, len_weight,
                 banned=(), dtype="float64"):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.register_buffer("freq", torch.rand(vocab, generator=g, dtype=torch.float64) * 3 + 1)
        self.register_buffer("phase", torch.rand(vocab, generator=g, dtype=torch.float64) * 6.283)
        self.register_buffer("pos_freq", torch.rand(vocab, generator=g, dtype=torch.float64) * 2 + 0.5)
        ban = torch.zeros(vocab, dtype=torch.bool)
        ban[list(banned)] = True
        self.register_buffer("ban", ban)
        self.scale, self.src_weight, self.prefix_weight = scale, src_weight, prefix_weight
        self.eos_after, self.eos_boost, self.eos_bias, self.len_weight = eos_after, eos_boost, eos_bias, len_weight
        self.out_dtype = getattr(torch, dtype)

    def forward(self, h):
        src_hash, src_len, prefix_hash, pos = h.to(torch.float64).unbind(-1)
        s = self.src_weight * src_hash + self.prefix_weight * prefix_hash
        angle = s[..., None] * self.freq + pos[..., None] * self.pos_freq + self.phase
        logits = self.scale * torch.sin(angle)
        ends = (pos + 1 >= self.len_weight * src_len + self.eos_after).to(logits.dtype)
        eos = logits[..., 2:3] + self.eos_bias + self.eos_boost * ends[..., None]
        logits = torch.cat([torch.full_like(logits[..., :2], -1e4), eos, logits[..., 3:]], dim=-1)
        return logits.masked_fill(self.ban, -1e4).to(self.out_dtype)


class OracleModel(nn.Module):
    """encode / decode / generator / forward as milestone 4's Transformer has them, in `dtype` (its one
    parameter, memory, decoder output and logits; the features are computed in float64 and then rounded,
    the same way in the worker and in the judge). memory carries the source's hash and length; decode's
    position i carries a hash of the tokens 0..i and i itself."""

    def __init__(self, vocab=9, seed=0, scale=2.0, src_weight=1.0, prefix_weight=1.0, eos_after=0,
                 eos_boost=0.0, eos_bias=0.0, len_weight=1.0, banned=(), dtype="float64"):
        super().__init__()
        g = torch.Generator().manual_seed(seed + 7919)
        self.register_buffer("src_w", torch.rand(64, generator=g, dtype=torch.float64) + 0.5)
        self.register_buffer("pos_w", torch.rand(64, generator=g, dtype=torch.float64) + 0.5)
        self.generator = OracleHead(vocab, seed, scale, src_weight, prefix_weight, eos_after, eos_boost, eos_bias,
                                    len_weight, banned, dtype)
        self.model_dtype = getattr(torch, dtype)
        # A weight of exactly 1, used by encode and decode: decoding (or encoding) with gradients on builds an
        # autograd graph, as a real model's would.
        self.gain = nn.Parameter(torch.ones((), dtype=self.model_dtype))

    def encode(self, src, src_mask=None):
        keep = torch.ones_like(src, dtype=torch.bool) if src_mask is None else src_mask[:, 0, :]
        w = self.src_w[: src.size(1)]
        src_hash = ((src + 1).to(w.dtype) * w * keep).sum(-1) * self.gain      # [B]
        length = keep.sum(-1).to(w.dtype)                                        # [B]
        memory = torch.stack([src_hash, length], -1)[:, None, :].expand(src.size(0), src.size(1), 2).clone()
        return memory.to(self.model_dtype)

    def decode(self, tgt, memory, src_mask=None, tgt_mask=None):
        B, t = tgt.shape
        if src_mask is not None:
            src_mask.expand(B, 1, memory.size(1))                               # as a real model would need
        w = self.pos_w[:t]
        prefix = torch.cumsum((tgt + 1).to(w.dtype) * w, dim=1) * self.gain      # [B, t]
        pos = torch.arange(t, dtype=w.dtype, device=tgt.device).expand(B, t)
        features = torch.cat([memory[:, :1, :].to(w.dtype).expand(B, t, 2), prefix[..., None], pos[..., None]], dim=-1)
        return features.to(self.model_dtype)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        return self.generator(self.decode(tgt, self.encode(src, src_mask), src_mask, tgt_mask))


# ---- recipes: run in the worker beside the student's decoding.py ---------------------------------

def make_model(spec):
    """The model a spec describes: an oracle, or the course's Transformer (milestone 4) with given weights, in
    the spec's dtype (float64 unless it says float32)."""
    if spec["kind"] == "oracle":
        return OracleModel(**spec["options"])
    from model import Transformer
    table = spec["table"]
    model = Transformer(spec["vocab"], spec["vocab"], d_model=table.size(1), num_heads=spec["heads"],
                        num_layers=spec["layers"], d_ff=spec["d_ff"], dropout=spec["dropout"],
                        max_len=table.size(0), norm_first=spec["norm_first"]).to(getattr(torch, spec.get("dtype", "float64")))
    with torch.no_grad():
        own = dict(model.named_parameters())
        for k, v in spec["params"].items():
            own[k].copy_(v)
        model.pos_encoding.pe.copy_(table)
    return model


def recipe_decode(spec, func, src, src_mask, max_len, kwargs, train=True, gen_seed=None, logits=False, ids=(1, 2, 0)):
    """Run the student's `func` on the model of `spec` (in train mode unless `train` is False), with the
    special ids `ids` = (bos_id, eos_id, pad_id). What is seen
    goes to the grader's ledger, never into anything the student's code can reach: each call of
    model.generator, seen in its own forward (its rows, whether any module was in training mode, whether
    gradients were on, with `logits` the logits; the ledger adds the matrix-multiply FLOPs so far), each
    torch.multinomial call, and for the whole run the ops (dropout ops, ops that built an autograd graph)."""
    import sys
    import decoding
    model = make_model(spec)
    model.train(train)
    head = model.generator
    base = type(head)

    def forward(self, x):
        out = base.forward(self, x)
        sys.audit("course.event", {"kind": "generator", "rows": out.size(0) if out.dim() >= 2 else 1,
                                   "mode": any(m.training for m in model.modules()), "grad": torch.is_grad_enabled(),
                                   "logits": (out.detach().reshape(-1, out.size(-1)).clone()
                                              if logits and out.dim() >= 2 else None)})
        return out
    head.__class__ = type(base.__name__, (base,), {"forward": forward, "__module__": base.__module__})
    real, real_method = torch.multinomial, torch.Tensor.multinomial

    given = torch.Generator().manual_seed(gen_seed) if gen_seed is not None else None

    def counted(probs, num_samples, *args, **kw):
        used = kw.get("generator")                                  # keyword-only in torch.multinomial
        sys.audit("course.event", {"kind": "multinomial", "shape": list(probs.shape), "samples": num_samples,
                                   "given_generator": given is not None and used is given})
        return real(probs, num_samples, *args, **kw)
    torch.multinomial = counted
    torch.Tensor.multinomial = lambda self, num_samples, *args, **kw: counted(self, num_samples, *args, **kw)
    if given is not None:
        kwargs = dict(kwargs, generator=given)
    try:
        result = getattr(decoding, func)(model, src, src_mask, max_len, *ids, **kwargs)
    finally:
        torch.multinomial, torch.Tensor.multinomial = real, real_method
    return {"result": result, "modes_after": [m.training for m in model.modules()]}


def recipe_raises(spec, func, src, src_mask, kwargs):
    """The name of the exception the student's `func` raises with `kwargs` (None when it returns)."""
    import decoding
    model = make_model(spec).eval()
    try:
        getattr(decoding, func)(model, src, src_mask, 3, 1, 2, 0, **kwargs)
    except Exception as e:
        return {"raised": type(e).__name__, "message": str(e)[:200]}
    return {"raised": None}


def recipe_next_token_logits(spec, src, src_mask, ys):
    """The student's optional helper `_next_token_logits(model, ys, memory, src_mask)`, if it can be called
    with the stub's arguments."""
    import decoding
    fn = getattr(decoding, "_next_token_logits", None)
    if fn is None:
        return {"status": "missing"}
    model = make_model(spec).eval()
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        try:
            return {"status": "ok", "logits": fn(model, ys, memory, src_mask)}
        except NotImplementedError:
            return {"status": "not_implemented"}
        except Exception as e:
            return {"status": type(e).__name__}


HELPERS = (PRELUDE, OracleHead, OracleModel, make_model)
