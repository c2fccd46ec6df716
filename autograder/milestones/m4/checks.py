"""Hidden checks for milestone 4: positional encoding, embeddings, stacks and the whole Transformer.

Expected values come from a composition of PyTorch's own modules (nn.TransformerEncoderLayer and
nn.TransformerDecoderLayer loaded with per-layer different random weights, nn.LayerNorm for pre-LN's
final norms, the judge's own float64 positional table and embedding lookups, a linear generator).
The judge writes its float64 table into the student's `pe` buffer for float64 parity. CATALOGUE
computes what the known mistakes return; the four parts have stand-ins, so the model is graded on
its own merits when a part is wrong (the layers themselves are milestone 3's reference).

This module holds the check groups and the helpers that run the student's modules for them; the
catalogue's computations and the paper's parameter counts are in answers.py, the mistakes in
mistakes.py, the stand-ins in stand_ins.py.
"""
from __future__ import annotations

import math
import re

import torch
import torch.nn.functional as F

from autograder.grading import diagnosis
from autograder.grading.checks import (
    TOLERANCES, ChargedAbove, CheckFailed, Tester, group, shape_str, student_error)
from autograder.milestones.reference import (
    D, D_FF, HEADS, TorchModel, TorchStack, by_student_name, model_params, pe_table, ragged_masks, stack_params)
from autograder.milestones.m4 import stand_ins as _stand_ins  # noqa: F401  (registers the stand-ins)
from autograder.milestones.m4.answers import (
    DECODE_LOG_SOFTMAX, FINAL_NORM_IN_POST_LN, FINAL_NORM_MISSING, FORWARD_VIA_DECODE_LOG_SOFTMAX, LOGITS_LOG_SOFTMAX,
    PAPER)
from autograder.milestones.m4.recipes import recipe_table_in_default
from autograder.milestones.m4.mistakes import (
    CATALOGUE, BATCH_MIXING, DECODE_ARGUMENT_ORDER, FORWARD_MASKS_SWAPPED, DROPOUT_IN_EVAL, DROPOUT_NOT_PASSED, GRAPH_CUT, INPUT_MODIFIED,
    LAYER_COUNT, LAYERS_NOT_MODULELIST, LOOKS_AHEAD, MAX_LEN_NOT_PASSED, NORMS_REINITIALISED, NOT_XAVIER,
    PADDING_NOT_IGNORED, PARAMETER_COUNT, PARAMETER_NAMES, PE_BATCH_DIM, PE_BUFFER_BATCH_DIM, PE_DROPOUT,
    PE_DROPOUT_ON_TABLE, PE_DTYPE, PE_LENGTH_ERROR, PE_LENGTH_OFF_BY_ONE, PE_MAX_LEN_IGNORED, PE_MODIFIED,
    PE_MODULE_DTYPE, PE_NOT_BUFFER, PE_ODD_ACCEPTED, PE_ODD_WRONG_ERROR, SHARED_SUBMODULE, TIE_DIFFERENT_VOCABS,
    TIED_BY_DEFAULT, TYING_BY_COPY, TYING_PARTIAL)

PARTS = ("positional_table", "positional_module", "embedding", "stacks")


def pe_tolerance(max_len):
    """Per-row tolerance: float32 arithmetic is off by up to 4e-4 at position 5000, and that is allowed."""
    return (2e-6 + 1e-7 * torch.arange(max_len, dtype=torch.float64))[:, None]


# ---- running the student's modules ----------------------------------------------------------------

# The worker's words when a buffer the judge writes has another shape than the student's (sandbox/worker.py).
PE_SHAPE = re.compile(r"buffer pos_encoding\.pe has shape \((\d+), (\d+)\), expected \((\d+), (\d+)\)")


def run_model(t: Tester, p, n, norm_first, max_len, src, tgt, src_mask=None, tgt_mask=None, *, calls=None,
              dtype=torch.float64, backward=None, record=False, dropout=0.0, train=False, table=True,
              activation="relu", pe=None, buffers=False, allow_error=False):
    """Build the student's Transformer with weights `p` (and the judge's float64 table in `pe`), run `calls`.
    `pe`: rows -> the table to write into pos_encoding.pe (default: the sinusoidal table). `allow_error`: return
    an error reply (as Tester.module) instead of failing.

    A model whose table has another number of rows than max_len (max_len not passed on: `model` says so) gets
    the judge's table with that many rows, and a generator whose weight and bias sit one level down (a module
    wrapping its Linear, e.g. generator.proj.weight: `model` says so) gets the judge's weights under those names
    (the reply's "renamed": judge's name -> theirs; gradients come back under the judge's names), so that the other
    groups judge what they check, not that."""
    src_vocab, tgt_vocab = p["src_embed.embedding.weight"].size(0), p["generator.weight"].size(0)
    calls = calls or [{"args": [src, tgt, src_mask, tgt_mask]}]
    pe = pe or (lambda rows: pe_table(rows, D))
    kwargs = {"d_model": D, "num_heads": HEADS, "num_layers": n, "d_ff": D_FF, "dropout": dropout,
              "max_len": max_len, "norm_first": norm_first, "activation": activation}

    def crash(reply):
        return CATALOGUE.raising("model", reply.get("type"), reply.get("message"), p, n, norm_first, max_len, src, tgt,
                                 src_mask, tgt_mask, activation=activation)

    def request(rows, names, allow_error=False):
        reply = t.module("Transformer", (src_vocab, tgt_vocab), kwargs, calls=calls,
                         params={names.get(k, k): v for k, v in p.items()},
                         buffers_in={"pos_encoding.pe": pe(rows).to(dtype)} if table else None,
                         dtype="float64" if dtype == torch.float64 else None, backward=backward, record=record,
                         train=train, buffers=buffers, crash=crash, allow_error=allow_error)
        if names and reply.get("ok"):
            back = {theirs: mine for mine, theirs in names.items()}
            for field in ("params", "param_grads"):
                if isinstance(reply.get(field), dict):
                    reply[field] = {back.get(k, k): v for k, v in reply[field].items()}
            reply["renamed"] = dict(names)
        return reply
    if not table:
        return request(max_len, {}, allow_error)
    rows, names = max_len, {}
    reply = request(rows, names, allow_error=True)
    if not reply.get("ok") and reply.get("kind") == "params":
        names = _generator_names(t, (src_vocab, tgt_vocab), kwargs, p)
        if names:
            reply = request(rows, names, allow_error=True)
    shape = PE_SHAPE.fullmatch(str(reply.get("message", "")))
    if reply.get("kind") == "exception" and shape and int(shape.group(2)) == D and int(shape.group(1)) > 0:
        rows = int(shape.group(1))
        reply = request(rows, names, allow_error=True)
    if reply.get("ok") or allow_error:
        return reply
    return request(rows, names)      # the same error again, reported (and explained) the usual way


def _generator_names(t: Tester, vocabs, kwargs, p) -> dict:
    """Where the student's Transformer keeps the generator's weight and bias when not as generator.weight and
    generator.bias: {"generator.weight": "generator.proj.weight", ...} when every parameter the judge loads that
    it lacks is the generator's, and each has exactly one parameter of the same kind and shape under `generator.`
    in its place; else {} (another naming problem, reported as it is)."""
    info = t.module("Transformer", vocabs, kwargs, param_values=False, allow_error=True)
    if not info.get("ok"):
        return {}
    theirs = info["params"]
    missing, extra = [k for k in p if k not in theirs], [k for k in theirs if k not in p]
    if not missing or any(k not in ("generator.weight", "generator.bias") for k in missing):
        return {}
    names = {}
    for k in missing:
        kind = k.rsplit(".", 1)[1]
        fits = [e for e in extra if e.startswith("generator.") and e.endswith("." + kind)
                and tuple(theirs[e]) == tuple(p[k].shape)]
        if len(fits) != 1:
            return {}
        names[k] = fits[0]
    return names


def forward_mistakes(t: Tester, actual, p, n, norm_first, max_len, src, tgt, src_mask=None, tgt_mask=None,
                     activation="relu"):
    """The catalogue's answers for forward's logits. Log-probabilities can come from forward (or its generator) or
    from a decode that applies the generator and log_softmax, whose output forward returns: the two compute the same
    logits, so the student's decode tells them apart (one more request, only when the logits are log-probabilities)."""
    found = CATALOGUE.tried("model", p, n, norm_first, max_len, src, tgt, src_mask, tgt_mask, activation=activation)
    log_probs = next((v for m, v in found if m is LOGITS_LOG_SOFTMAX), None)
    if log_probs is None or not t.close(actual, log_probs, atol=1e-4):
        return found
    judge = TorchModel(p, n, norm_first, activation, p["generator.weight"].dtype, max_len)
    memory = judge.encode(src, src_mask).detach()
    reply = run_model(t, p, n, norm_first, max_len, src, tgt, activation=activation, allow_error=True,
                      calls=[{"args": [tgt, memory, src_mask, tgt_mask], "method": "decode"}])
    decoded = reply["outputs"][0] if reply.get("ok") else None
    if t.close(decoded, DECODE_LOG_SOFTMAX(p, n, norm_first, max_len, tgt, memory, src_mask, tgt_mask,
                                           activation=activation), atol=1e-4):
        return [(FORWARD_VIA_DECODE_LOG_SOFTMAX if m is LOGITS_LOG_SOFTMAX else m, v) for m, v in found]
    return found


def expect_output(t: Tester, actual, expected: torch.Tensor, what: str, mistakes):
    """t.expect_close, and for an answer of another shape, the one known mistake whose own computation gives it
    (e.g. decode returning [B, Lt, tgt_vocab] logits, forward the decoder's [B, Lt, d_model])."""
    if isinstance(actual, torch.Tensor) and tuple(actual.shape) != tuple(expected.shape):
        atol, rtol = TOLERANCES.get(expected.dtype, TOLERANCES[torch.float32])
        cause = diagnosis.reproducing(mistakes(), lambda v: diagnosis.matches(actual, v, expected, atol, rtol))
        if cause is not None:
            t.fail(f"{what} should have shape {shape_str(expected.shape)}, but it has shape "
                   f"{shape_str(actual.shape)}. Likely cause: {cause.text}", cause)
    t.expect_close(actual, expected, what, mistakes)


def _tokens(t: Tester, B, L, vocab, lengths=None):
    tokens = t.randint(1, vocab, (B, L))
    for b, n in enumerate(lengths or []):
        tokens[b, n:] = 0
    return tokens


def model_inputs(t: Tester, B=3, Ls=6, Lt=5, vocab=(11, 13)):
    src_mask, _, tgt_mask = ragged_masks(B, Lt, Ls)
    src = _tokens(t, B, Ls, vocab[0], [int(m.sum()) for m in src_mask[:, 0]])
    tgt = _tokens(t, B, Lt, vocab[1])
    return src, tgt, src_mask, tgt_mask


def _table_shape(t: Tester, max_len: int, d: int):
    """The shape of the student's own table, or None when it does not return a tensor."""
    value = t.call("sinusoidal_positional_encoding", max_len, d, allow_error=True).get("value")
    return tuple(value.shape) if isinstance(value, torch.Tensor) else None


# ---- groups ---------------------------------------------------------------------------------------

@group("m4", "positional_table", provides=("sinusoidal_positional_encoding",))
def positional_table(t: Tester):
    for max_len, d in ((50, 6), (12, 16), (5000, 64)):
        what = f"`sinusoidal_positional_encoding({max_len}, {d})`"
        got = t.call("sinusoidal_positional_encoding", max_len, d)["value"]
        if isinstance(got, torch.Tensor) and got.shape == (1, max_len, d) and t.close(got, PE_BATCH_DIM(
                pe_table(max_len, d).to(got.dtype)), atol=float(pe_tolerance(max_len).max())):
            t.fail(f"{what} has shape {shape_str(got.shape)}, not [{max_len}, {d}]. Likely cause: {PE_BATCH_DIM.text}",
                   PE_BATCH_DIM)
        got = t.expect_tensor(got, what, shape=(max_len, d))
        t.expect_close(got, pe_table(max_len, d), what, lambda m=max_len, d=d: CATALOGUE.tried("pe", m, d),
                       atol=pe_tolerance(max_len))
        if got.dtype != torch.float32:
            t.fail(f"{what} returns {str(got.dtype).replace('torch.', '')}; the table is in the default dtype "
                   f"(torch.get_default_dtype(), float32): compute in float64 and cast at the end.", PE_DTYPE)
    what = "`sinusoidal_positional_encoding(50, 6)` with torch.set_default_dtype(torch.float64)"
    got = t.expect_tensor(t.run(recipe_table_in_default, 50, 6, "float64", what=what)["value"], what, shape=(50, 6))
    if got.dtype != torch.float64:
        t.fail(f"{what} returns {str(got.dtype).replace('torch.', '')}: the table is in the default dtype, whatever "
               f"it is (torch.get_default_dtype()): build it in float64 and cast with .to(torch.get_default_dtype()), "
               f"not .float().", PE_DTYPE)
    t.expect_close(got, pe_table(50, 6).to(torch.float64), what, atol=pe_tolerance(50))
    # The student's own error, read from the reply (never from a message's wording).
    what = "`sinusoidal_positional_encoding(10, 5)`"
    reply = t.call("sinusoidal_positional_encoding", 10, 5, allow_error=True)
    if not reply.get("ok"):
        if reply.get("kind") == "exception" and reply.get("type") == "ValueError":
            return
        error = student_error(reply, what)
        if reply.get("kind") == "exception":
            t.fail(f"ValueError expected for an odd d_model: {error}\nThat error comes from computing a table "
                   f"with an odd width; the function must check d_model first and raise ValueError (sines and cosines "
                   f"come in pairs, so d_model must be even), with a message that says so.", PE_ODD_WRONG_ERROR)
        raise CheckFailed(error)
    t.fail("`sinusoidal_positional_encoding(10, 5)` should raise ValueError: d_model must be even (sines and "
           "cosines come in pairs).", PE_ODD_ACCEPTED)


@group("m4", "positional_module", depends=("positional_table",), provides=("PositionalEncoding",))
def positional_module(t: Tester):
    d, max_len = 6, 20
    reply = t.module("PositionalEncoding", (d,), {"max_len": max_len}, buffers=True, dtype="float64")
    buffers = reply.get("buffers") or {}
    if "pe" not in buffers:
        where = "a parameter" if "pe" in reply["params"] else "missing"
        t.fail(f"PositionalEncoding({d}, max_len={max_len}) should register its table as a buffer named `pe` "
               f"(self.register_buffer('pe', ...)); `pe` is {where}.", PE_NOT_BUFFER)
    if "pe" in reply["params"]:
        t.fail("`pe` is a parameter: register it as a buffer so it is not trained.", PE_NOT_BUFFER)
    # A student whose table (theirs: no stand-in here) has a batch dimension [1, max_len, d] builds the buffer from
    # it, as the docstring says: that mistake is positional_table's; the module is judged with that layout.
    batched = (not t.patches and isinstance(buffers["pe"], torch.Tensor) and buffers["pe"].shape == (1, max_len, d)
               and _table_shape(t, max_len, d) == (1, max_len, d))
    layout = (lambda tab: tab.unsqueeze(0)) if batched else (lambda tab: tab)
    rows = buffers["pe"].size(0) if isinstance(buffers["pe"], torch.Tensor) and buffers["pe"].dim() == 2 else None
    if rows is not None and rows != max_len and buffers["pe"].size(1) == d:
        t.fail(f"PositionalEncoding({d}, max_len={max_len}) made a table of {rows} rows: " +
               ("max_len is not used (5000 is its default). " if rows == 5000 else f"it needs max_len = {max_len}. ") +
               "The buffer holds one row per position: sinusoidal_positional_encoding(max_len, d_model).",
               PE_MAX_LEN_IGNORED if rows == 5000 else None)
    own = buffers["pe"]
    if (not batched and isinstance(own, torch.Tensor) and own.shape == (1, max_len, d)
            and t.close(own[0], pe_table(max_len, d).to(own.dtype), atol=float(pe_tolerance(max_len).max()))):
        t.fail(f"PositionalEncoding({d}, max_len={max_len}).pe has shape {shape_str(own.shape)}: the table with a "
               f"batch dimension in front (as pe.unsqueeze(0) gives, the Annotated Transformer's layout), where the "
               f"docstring's buffer is [max_len, d_model]. Register sinusoidal_positional_encoding(max_len, d_model) "
               f"as it is and add self.pe[:L]: its rows broadcast over the batch.", PE_BUFFER_BATCH_DIM)
    pe = t.expect_tensor(own, f"PositionalEncoding({d}, max_len={max_len}).pe", shape=(1, max_len, d) if batched else (max_len, d))
    if pe.dtype != torch.float64:
        t.fail("After .double(), the `pe` buffer is still " + str(pe.dtype).replace("torch.", "") + ": register it "
               "with register_buffer so it follows the module's dtype and device.", PE_NOT_BUFFER)
    table = pe_table(max_len, d)
    x = t.randn(3, 7, d)
    reply = t.module("PositionalEncoding", (d,), {"max_len": max_len}, buffers_in={"pe": layout(table)}, dtype="float64",
                     calls=[{"args": [x]}], attrs=("pe",))
    what = f"PositionalEncoding({d}, max_len={max_len}) on x [3, 7, {d}] (eval mode)"
    t.expect_close(reply["outputs"][0], x + table[:7], what, lambda: CATALOGUE.tried("positional", x, table))
    # Inputs and the table stay as they are.
    back = reply["args_after"][0][0]
    if not (isinstance(back, torch.Tensor) and back.shape == x.shape and torch.equal(back, x)):
        t.fail(f"{what} changed its input x in place: the caller's tensor came back with the positions added. "
               f"Return a new tensor: self.dropout(x + self.pe[:L]), not x += self.pe[:L] (or x.add_).",
               INPUT_MODIFIED)
    after = reply["attrs"][0].get("pe")
    if isinstance(after, torch.Tensor) and not (after.shape == layout(table).shape and torch.equal(after, layout(table))):
        t.fail(f"{what} changed its buffer `pe` in place: the table must stay as it was built (an in-place operation "
               f"on self.pe or on a slice of it, e.g. self.pe[:L] += x, writes into the table).", PE_MODIFIED)
    # The default dtype (float32): the table follows the module, so float32 in gives float32 out.
    x32 = t.randn(3, 7, d, dtype=torch.float32)
    reply = t.module("PositionalEncoding", (d,), {"max_len": max_len}, buffers=True, calls=[{"args": [x32]}])
    what = f"PositionalEncoding({d}, max_len={max_len}) on a float32 x [3, 7, {d}] (a float32 module, eval mode)"
    got = t.expect_tensor(reply["outputs"][0], what, shape=x32.shape)
    if got.dtype != torch.float32:
        own = (reply.get("buffers") or {}).get("pe")
        why = (f"its buffer `pe` is {str(own.dtype).replace('torch.', '')} in a float32 module, so x + pe is promoted. "
               f"Register the table in the default dtype, as sinusoidal_positional_encoding returns it (no .double()): "
               f"model.double() converts the buffer when float64 is wanted"
               if isinstance(own, torch.Tensor) and own.dtype != torch.float32 else "keep the input's dtype")
        t.fail(f"{what} returns {str(got.dtype).replace('torch.', '')}: {why}.", PE_MODULE_DTYPE)
    t.expect_close(got, x32 + table[:7].float(), what, lambda: CATALOGUE.tried("positional", x32, table.float()))
    full = t.randn(2, max_len, d)
    reply = t.module("PositionalEncoding", (d,), {"max_len": max_len}, buffers_in={"pe": layout(table)}, dtype="float64",
                     calls=[{"args": [full]}], allow_error=True)
    if not reply.get("ok"):
        t.fail(f"PositionalEncoding({d}, max_len={max_len}) on a sequence of exactly {max_len} positions raised "
               f"{reply.get('type')}: {reply.get('message')}; only L > max_len is too long (L == max_len uses the whole "
               f"table).", PE_LENGTH_OFF_BY_ONE)
    t.expect_close(reply["outputs"][0], full + table, f"PositionalEncoding({d}, max_len={max_len}) on x [2, {max_len}, {d}]")
    reply = t.module("PositionalEncoding", (d,), {"max_len": max_len}, calls=[{"args": [t.randn(1, 21, d)]}],
                     allow_error=True, dtype="float64")
    message = str(reply.get("message", ""))
    if reply.get("ok") or reply.get("type") != "ValueError" or "21" not in message or "20" not in message:
        t.fail(f"PositionalEncoding({d}, max_len=20) on a sequence of length 21 should raise ValueError naming "
               f"both numbers (21 and 20); it {'returned' if reply.get('ok') else 'raised ' + str(reply.get('type')) + ': ' + message}.",
               PE_LENGTH_ERROR)
    p = 0.5
    ev = t.module("PositionalEncoding", (d,), {"max_len": max_len, "dropout": p}, buffers_in={"pe": layout(table)},
                  dtype="float64", calls=[{"args": [x], "seed": 4}])["outputs"][0]
    if not t.close(ev, x + table[:7]):
        t.fail("PositionalEncoding(dropout=0.5) in eval mode should return x + pe[:L] unchanged: dropout acts in "
               "training mode only (nn.Dropout follows .eval(); F.dropout needs training=self.training).",
               DROPOUT_IN_EVAL)
    out = t.module("PositionalEncoding", (d,), {"max_len": max_len, "dropout": p}, buffers_in={"pe": layout(table)},
                   dtype="float64", train=True, calls=[{"args": [x], "seed": 4}])["outputs"][0]
    zero = out == 0
    ok = 0.25 < zero.double().mean().item() < 0.75 and torch.allclose(out[~zero], ((x + table[:7]) / (1 - p))[~zero])
    if not ok:
        what = ("PositionalEncoding(dropout=0.5) in training mode should apply dropout to x + pe[:L] (about half of "
                "the entries 0, the rest divided by 1 - p)")
        if _dropout_on_table(out, x, table[:7], p):
            t.fail(f"{what}. Here the output minus x is pe[:L] with each entry either 0 or divided by 1 - p: x itself "
                   f"is never dropped, only the positions are. Likely cause: {PE_DROPOUT_ON_TABLE.text}",
                   PE_DROPOUT_ON_TABLE)
        t.fail(f"{what}.", PE_DROPOUT)
    if batched:   # right with its own layout; the groups below get the course's PositionalEncoding (ours fits ours)
        raise ChargedAbove("Your PositionalEncoding is right for the table your sinusoidal_positional_encoding returns "
                           "([1, max_len, d_model]); that shape is the mistake charged in `positional_table`. The "
                           "groups below use the course's PositionalEncoding.", "positional_table")


def _dropout_on_table(out, x, pe, p) -> bool:
    """Is `out` x + dropout(pe) (each entry of out - x either 0 or pe / (1 - p)), with at least one nonzero entry of
    the table dropped and one kept? That is the evidence of dropout applied to the table before the add."""
    if not (isinstance(out, torch.Tensor) and out.shape == x.shape):
        return False
    added, pe = out.to(torch.float64) - x, pe.expand_as(x)
    dropped = added.abs() <= 1e-10
    kept = (added - pe / (1 - p)).abs() <= 1e-10 * (1 + pe.abs())
    real = pe.abs() > 1e-6
    return bool((dropped | kept).all() and (dropped & real).any() and (kept & real & ~dropped).any())


@group("m4", "embedding", provides=("TokenEmbedding",))
def embedding(t: Tester):
    vocab, d = 13, 8
    reply = t.module("TokenEmbedding", (vocab, d))
    if reply["children"].get("embedding") != "Embedding":
        t.fail(f"TokenEmbedding should hold an nn.Embedding named `embedding`; its submodules are "
               f"{reply['children'] or 'none'}.", PARAMETER_NAMES)
    weight = t.randn(vocab, d)
    tokens = t.randint(0, vocab, (3, 5))
    got = t.module("TokenEmbedding", (vocab, d), params={"embedding.weight": weight}, dtype="float64",
                   calls=[{"args": [tokens]}])["outputs"][0]
    t.expect_close(got, F.embedding(tokens, weight) * math.sqrt(d), f"TokenEmbedding({vocab}, {d}) on tokens [3, 5]",
                   lambda: CATALOGUE.tried("embedding", weight, tokens))
    w32 = weight.float()
    what = f"TokenEmbedding({vocab}, {d}) on tokens [3, 5] (float32, the default dtype)"
    got = t.module("TokenEmbedding", (vocab, d), params={"embedding.weight": w32},
                   calls=[{"args": [tokens]}])["outputs"][0]
    t.expect_close(got, F.embedding(tokens, w32) * math.sqrt(d), what, lambda: CATALOGUE.tried("embedding", w32, tokens))
    t.expect_tensor(got, what, dtype=torch.float32)


# ---- dropout seen through a final LayerNorm ---------------------------------------------------------

def dropout_rate_seen(out, z, w, b, p):
    """The dropout rate r that explains `out` [..., d]: every position is LayerNorm(w, b) of the judge's `z` with
    its entries dropped by some 0/1 mask and the survivors divided by 1 - r (all 2^d masks are tried). 0.0:
    nothing is ever dropped (out is LayerNorm(z) everywhere); p, or 0.1 (the default of Transformer); None when
    no rate fits. `z` is small (its variance near LayerNorm's eps), so the scale 1 / (1 - r) shows."""
    d = z.size(-1)
    zz, yy = z.reshape(-1, d), out.reshape(-1, d).to(z.dtype)
    if torch.allclose(yy, F.layer_norm(zz, (d,), w, b), atol=1e-8, rtol=0):
        return 0.0
    masks = torch.tensor([[(k >> j) & 1 for j in range(d)] for k in range(2 ** d)], dtype=z.dtype)    # [2^d, d]
    for r in dict.fromkeys((p, 0.1)):
        cand = F.layer_norm(masks[None] * zz[:, None] / (1 - r), (d,), w, b)                       # [N, 2^d, d]
        if bool(((cand - yy[:, None]).abs().amax(-1) < 1e-8).any(-1).all()):
            return r
    return None


def silenced(p: dict, prefix: str, n: int) -> dict:
    """`p` with every sub-layer of the `n` layers under `prefix` outputting exactly 0 (last weights and biases 0)."""
    q = dict(p)
    for i in range(n):
        for name in ("self_attn.w_o", "cross_attn.w_o", "feed_forward.linear2"):
            key = f"{prefix}layers.{i}.{name}"
            if f"{key}.weight" in q:
                q[f"{key}.weight"], q[f"{key}.bias"] = torch.zeros_like(q[f"{key}.weight"]), torch.zeros_like(q[f"{key}.bias"])
    return q


def dropout_said(rate, p):
    return "never drop (dropout 0)" if rate == 0.0 else f"drop with p = {rate:g} (not the {p:g} asked for)"


def _check_stack(t: Tester, side, n, norm_first, activation="relu", dtype=torch.float64, label=""):
    cls = "Encoder" if side == "encoder" else "Decoder"
    p = stack_params(t, side, n, norm_first, dtype)
    B, Lt, Ls = 3, 4, 6
    src_mask, _, tgt_mask = ragged_masks(B, Lt, Ls)
    x = t.randn(B, Ls if side == "encoder" else Lt, D, dtype=dtype)
    memory = t.randn(B, Ls, D, dtype=dtype) if side == "decoder" else None
    args = [x, src_mask] if side == "encoder" else [x, memory, src_mask, tgt_mask]
    what = f"{cls}({n} layers, {'pre' if norm_first else 'post'}-LN{label}) on x {shape_str(x.shape)}"
    def crash(reply):
        return CATALOGUE.raising("stack", reply.get("type"), reply.get("message"), p, side, n, norm_first, activation,
                                 x, memory, src_mask, tgt_mask)
    reply = t.module(cls, (n, D, HEADS, D_FF), {"norm_first": norm_first, "activation": activation},
                     calls=[{"args": args}], params=p, dtype="float64" if dtype == torch.float64 else None,
                     attrs=("norm",), crash=crash)
    kids = reply["children"]
    if kids.get("layers") != "ModuleList":
        t.fail(f"{cls}.layers should be an nn.ModuleList of layers (a plain Python list hides their parameters "
               f"from the model); it is {kids.get('layers') or 'missing'}.", LAYERS_NOT_MODULELIST)
    want = TorchStack(p, side, n, norm_first, activation, dtype)(x, memory, src_mask, tgt_mask).detach()
    t.expect_close(reply["outputs"][0], want, f"The output of {what}",
                   lambda: CATALOGUE.tried("stack", p, side, n, norm_first, activation, x, memory, src_mask, tgt_mask))


@group("m4", "stacks", provides=("Encoder", "Decoder"))
def stacks(t: Tester):
    for side in ("encoder", "decoder"):
        cls = "Encoder" if side == "encoder" else "Decoder"
        for norm_first in (False, True):
            reply = t.module(cls, (3, D, HEADS, D_FF), {"norm_first": norm_first})
            kids = reply["children"]
            if kids.get("layers") != "ModuleList":
                t.fail(f"{cls}.layers should be an nn.ModuleList of layers (a plain Python list hides their "
                       f"parameters from the model: they are not trained, not moved, not counted); it is "
                       f"{kids.get('layers') or 'not a submodule'}.", LAYERS_NOT_MODULELIST)
            shared = {k: v for k, v in reply["shared_with"].items()       # a layer reached twice in `layers`
                      if re.fullmatch(r"layers\.\d+", k) and re.fullmatch(r"layers\.\d+", v)}
            if shared:
                t.fail(f"In {cls}(3, ...), {', '.join(f'{k} is the same layer object as {v}' for k, v in shared.items())}"
                       f": each layer needs its own weights (build a new layer for each, not [layer] * num_layers).",
                       SHARED_SUBMODULE)
            layers = [k for k, v in kids.items() if k.startswith("layers.") and k.count(".") == 1]
            if len(layers) != 3:
                t.fail(f"{cls}(num_layers=3, ...) should hold 3 layers in `layers`; it has {len(layers)}.",
                       LAYER_COUNT)
            has_norm = kids.get("norm") == "LayerNorm"
            if norm_first and not has_norm:
                t.fail(f"{cls}(..., norm_first=True) needs a final `norm` = LayerNorm(d_model) (of blocks.py); it "
                       f"has {kids.get('norm') or 'none'}.", FINAL_NORM_MISSING)
            if not norm_first and "norm" in kids:
                t.fail(f"{cls}(..., norm_first=False) should have norm = None: post-LN layers already end with a "
                       f"norm.", FINAL_NORM_IN_POST_LN)
        for norm_first in (False, True):
            _check_stack(t, side, 3, norm_first)
        _check_stack(t, side, 2, True, "gelu", torch.float32, ", float32")
        _check_stack(t, side, 2, False, "relu", torch.float32, ", float32")
    for side in ("encoder", "decoder"):
        _stack_dropout(t, side, 0.3)


def _stack_dropout(t: Tester, side, p):
    """Encoder / Decoder(1 layer, pre-LN, dropout=p) in training mode on x = 0, the first sub-layer outputting a
    small constant b and the others 0: the output is the final norm of drop(b) at every position."""
    cls = "Encoder" if side == "encoder" else "Decoder"
    B, L = 3, 4
    q = silenced(stack_params(t, side, 1, True), "", 1)
    b = 3e-3 * (1 + t.randn(D).abs())
    q["layers.0.self_attn.w_o.bias"] = b
    x = torch.zeros(B, L, D, dtype=torch.float64)
    args = [x] if side == "encoder" else [x, t.randn(B, L + 1, D)]
    out = t.module(cls, (1, D, HEADS, D_FF), {"dropout": p, "norm_first": True}, params=q, dtype="float64", train=True,
                   calls=[{"args": args, "seed": 3}])["outputs"][0]
    what = f"{cls}(1 layer, pre-LN, dropout={p:g}) in training mode"
    out = t.expect_tensor(out, f"The output of {what}", shape=x.shape)
    rate = dropout_rate_seen(out, b.expand(B, L, D), q["norm.weight"], q["norm.bias"], p)
    if rate == p:
        return
    if rate is not None:
        t.fail(f"{what}: its layers {dropout_said(rate, p)}: each layer gets the stack's dropout: "
               f"{'EncoderLayer' if side == 'encoder' else 'DecoderLayer'}(d_model, num_heads, d_ff, dropout, activation, "
               f"norm_first).", DROPOUT_NOT_PASSED)
    t.fail(f"{what}, the first layer's self-attention outputting a constant and every other sub-layer 0: the output is "
           f"not the final norm of that constant under dropout {p:g} (about a third of its entries 0, the rest divided "
           f"by 1 - p) at every position.")


def _renamed_text(renamed: dict) -> str:
    return (f"`generator` keeps its weights as {' and '.join(renamed.values())}, not generator.weight and "
            f"generator.bias: a module wrapping its own nn.Linear (as the Annotated Transformer's Generator wraps "
            f"`proj`) adds a level to the names. The docstring's generator is the nn.Linear(d_model, tgt_vocab_size) "
            f"itself, and the checks load weights by the stub's names: self.generator = nn.Linear(d_model, "
            f"tgt_vocab_size).")


@group("m4", "model", depends=PARTS)
def model(t: Tester):
    """The model's values, then the generator's names: weights the judge had to load under the student's own names
    (a wrapped generator, see run_model) are charged here, once, and said beside any other failure here."""
    found = {}
    try:
        _model_values(t, found)
    except CheckFailed as e:
        if found.get("renamed") and type(e) is CheckFailed:
            raise CheckFailed(f"{e}\nAlso: {_renamed_text(found['renamed'])}", e.mistake) from None
        raise
    if found.get("renamed"):
        t.fail(_renamed_text(found["renamed"]) + " With the weights loaded under your names, the values are right.",
               PARAMETER_NAMES)


def _model_values(t: Tester, found: dict):
    for norm_first, activation in ((False, "relu"), (True, "gelu")):
        p = model_params(t, 11, 13, 2, norm_first)
        src, tgt, src_mask, tgt_mask = model_inputs(t)
        label = (f"Transformer(11, 13, d_model={D}, num_layers=2, {'pre' if norm_first else 'post'}-LN"
                 f"{', activation=' + repr(activation) if activation != 'relu' else ''})")
        calls = [{"args": [src, tgt, src_mask, tgt_mask]}, {"args": [src, src_mask], "method": "encode"}]
        judge = TorchModel(p, 2, norm_first, activation, torch.float64, 30)
        memory = judge.encode(src, src_mask).detach()
        first = run_model(t, p, 2, norm_first, 30, src, tgt, src_mask, tgt_mask, calls=calls[:1], activation=activation,
                          allow_error=True)
        if not first.get("ok"):
            _forward_masks_swapped(t, label, p, norm_first, activation, src, tgt, memory, src_mask, tgt_mask, first)
        reply = run_model(t, p, 2, norm_first, 30, src, tgt, src_mask, tgt_mask, calls=calls, activation=activation,
                          buffers=True)
        t.expect_close(reply["outputs"][1], memory, f"`{label}.encode(src, src_mask)`",
                       lambda: CATALOGUE.tried("encode", p, 2, norm_first, 30, src, src_mask, activation=activation))
        want = judge(src, tgt, src_mask, tgt_mask).detach()
        found["renamed"] = found.get("renamed") or reply.get("renamed")
        expect_output(t, reply["outputs"][0], want, f"The logits of {label} (padding and causal masks)",
                      lambda: forward_mistakes(t, reply["outputs"][0], p, 2, norm_first, 30, src, tgt, src_mask,
                                               tgt_mask, activation))
        table = (reply.get("buffers") or {}).get("pos_encoding.pe")
        if isinstance(table, torch.Tensor) and table.dim() == 2 and table.size(0) != 30:
            rows = table.size(0)
            t.fail(f"In {label[:-1]}, max_len=30), pos_encoding.pe has {rows} rows, where PositionalEncoding(d_model, "
                   f"max_len=30) makes a table of 30: " + ("max_len is not used (5000 is PositionalEncoding's "
                                                           "default). " if rows == 5000 else "max_len does not reach "
                                                           "it. ") +
                   "Pass it on: PositionalEncoding(d_model, max_len, dropout).", MAX_LEN_NOT_PASSED)
        # decode (and forward) follow tgt_mask as given: causal, padding only [B, 1, Lt], or None (no mask at all);
        # a 2-D [Lt, Lt] mask broadcasts over the batch.
        pad = tgt_mask[:, -1:, :].clone()                # the last row of a causal mask hides only the padding
        causal = torch.ones(tgt.size(1), tgt.size(1), dtype=torch.bool).tril()
        cases = [("decode", tgt_mask, "tgt_mask (causal and padding)")]
        if not norm_first:
            cases += [("decode", pad, f"a padding-only tgt_mask {shape_str(pad.shape)} (not causal)"),
                      ("decode", None, "tgt_mask=None (no mask: every position sees every other)"),
                      ("forward", pad, f"a padding-only tgt_mask {shape_str(pad.shape)} (not causal)"),
                      ("forward", causal, f"a 2-D causal tgt_mask {shape_str(causal.shape)}")]
        calls = [{"args": [tgt, memory, src_mask, m], "method": "decode"} if how == "decode" else
                 {"args": [src, tgt, src_mask, m]} for how, m, _ in cases]
        reply = run_model(t, p, 2, norm_first, 30, src, tgt, calls=calls, activation=activation, allow_error=True)
        if not reply.get("ok"):
            _decode_order(t, label, p, norm_first, activation, src, tgt, memory, src_mask, tgt_mask)
            run_model(t, p, 2, norm_first, 30, src, tgt, calls=calls, activation=activation)   # its error, as usual
        for out, (how, m, said) in zip(reply["outputs"], cases):
            if how == "decode":
                expect_output(t, out, judge.decode(tgt, memory, src_mask, m).detach(),
                              f"`{label}.decode(tgt, memory, src_mask, tgt_mask)` with {said}",
                              lambda m=m: CATALOGUE.tried("decode", p, 2, norm_first, 30, tgt, memory, src_mask, m,
                                                          activation=activation))
            else:
                expect_output(t, out, judge(src, tgt, src_mask, m).detach(), f"The logits of {label} with {said}",
                              lambda m=m, out=out: forward_mistakes(t, out, p, 2, norm_first, 30, src, tgt, src_mask,
                                                                    m, activation))
    for norm_first in (True, False):
        p32 = {k: v.float() for k, v in model_params(t, 11, 13, 2, norm_first).items()}
        src, tgt, src_mask, tgt_mask = model_inputs(t)
        reply = run_model(t, p32, 2, norm_first, 30, src, tgt, src_mask, tgt_mask, dtype=torch.float32)
        want = TorchModel(p32, 2, norm_first, "relu", torch.float32, 30)(src, tgt, src_mask, tgt_mask).detach()
        t.expect_close(reply["outputs"][0], want, f"The logits of a float32 Transformer ({'pre' if norm_first else 'post'}-LN)")
    _model_dropout(t, 0.3)


def _forward_masks_swapped(t: Tester, label, p, norm_first, activation, src, tgt, memory, src_mask, tgt_mask, reply):
    """forward raised: if the student's own decode is right with the masks in order, and raises that very error with
    them swapped, forward hands decode its masks in the wrong order."""
    want = TorchModel(p, 2, norm_first, activation, torch.float64, 30).decode(tgt, memory, src_mask, tgt_mask).detach()
    right = run_model(t, p, 2, norm_first, 30, src, tgt, activation=activation, allow_error=True,
                      calls=[{"args": [tgt, memory, src_mask, tgt_mask], "method": "decode"}])
    swapped = run_model(t, p, 2, norm_first, 30, src, tgt, activation=activation, allow_error=True,
                        calls=[{"args": [tgt, memory, tgt_mask, src_mask], "method": "decode"}])
    if (right.get("ok") and t.close(right["outputs"][0], want) and not swapped.get("ok")
            and swapped.get("type") == reply.get("type") and swapped.get("message") == reply.get("message")):
        t.fail(f"`{label}(src, tgt, src_mask, tgt_mask)` raised {reply.get('type')}: {reply.get('message')}\nYour "
               f"decode is right when given (tgt, memory, src_mask, tgt_mask), and raises this very error when given "
               f"the two masks the other way round. Likely cause: {FORWARD_MASKS_SWAPPED.text}", FORWARD_MASKS_SWAPPED)


def _decode_order(t: Tester, label, p, norm_first, activation, src, tgt, memory, src_mask, tgt_mask):
    """decode(tgt, memory, src_mask, tgt_mask) raised: a decode written with the Annotated Transformer's order,
    decode(memory, src_mask, tgt, tgt_mask), gives the right values when called that way."""
    want = TorchModel(p, 2, norm_first, activation, torch.float64, 30).decode(tgt, memory, src_mask, tgt_mask).detach()
    reply = run_model(t, p, 2, norm_first, 30, src, tgt, activation=activation, allow_error=True,
                      calls=[{"args": [memory, src_mask, tgt, tgt_mask], "method": "decode"}])
    if reply.get("ok") and t.close(reply["outputs"][0], want):
        t.fail(f"`{label}.decode(tgt, memory, src_mask, tgt_mask)` raised an error, and called as "
               f"decode(memory, src_mask, tgt, tgt_mask) it gives the right values: your decode takes its arguments in "
               f"the Annotated Transformer's order. Keep the stub's signature, decode(self, tgt, memory, src_mask=None, "
               f"tgt_mask=None): the checks and milestone 6's decoders call it so.", DECODE_ARGUMENT_ORDER)


def _model_dropout(t: Tester, p):
    """Transformer(1 layer, pre-LN, dropout=p) in training mode: the rate must reach pos_encoding and both stacks.
    1. Every sub-layer silenced, small embeddings and a small table: encode is the encoder's final norm of
       drop(emb * sqrt(d) + pe) -- pos_encoding's dropout alone.
    2. Zero embeddings and table, the first self-attention of each stack outputting a small constant: encode and
       decode are their final norm of drop(constant) -- each stack's dropout alone."""
    B, Ls, Lt = 3, 6, 5
    label = f"Transformer(11, 13, d_model={D}, num_layers=1, pre-LN, dropout={p:g}) in training mode"
    src, tgt = _tokens(t, B, Ls, 11), _tokens(t, B, Lt, 13)
    base = silenced(silenced(model_params(t, 11, 13, 1, True), "encoder.", 1), "decoder.", 1)
    q = dict(base, **{"src_embed.embedding.weight": t.randn(11, D, scale=1e-3)})
    small = lambda rows: 2e-3 * pe_table(rows, D)                                      # noqa: E731
    out = run_model(t, q, 1, True, 30, src, tgt, dropout=p, train=True, pe=small,
                    calls=[{"args": [src], "method": "encode", "seed": 5}])["outputs"][0]
    out = t.expect_tensor(out, f"`{label}.encode(src)`", shape=(B, Ls, D))
    z = F.embedding(src, q["src_embed.embedding.weight"]) * math.sqrt(D) + small(30)[:Ls]
    rate = dropout_rate_seen(out, z, q["encoder.norm.weight"], q["encoder.norm.bias"], p)
    if rate != p:
        t.fail(f"{label}, every layer silenced: encode(src) is the final norm of the embeddings plus positions, which "
               + (f"{dropout_said(rate, p)}. The model's dropout goes to its PositionalEncoding too: "
                  f"PositionalEncoding(d_model, max_len, dropout)." if rate is not None else
                  f"should pass through dropout {p:g} once (about a third of the entries 0, the rest divided by 1 - p); "
                  f"they do not fit that."), DROPOUT_NOT_PASSED if rate is not None else None)
    q = dict(base, **{"src_embed.embedding.weight": torch.zeros(11, D, dtype=torch.float64),
                      "tgt_embed.embedding.weight": torch.zeros(13, D, dtype=torch.float64)})
    consts = {}
    for side in ("encoder", "decoder"):
        consts[side] = q[f"{side}.layers.0.self_attn.w_o.bias"] = 3e-3 * (1 + t.randn(D).abs())
    memory = t.randn(B, Ls, D)
    outs = run_model(t, q, 1, True, 30, src, tgt, dropout=p, train=True, pe=lambda rows: torch.zeros(rows, D),
                     calls=[{"args": [src], "method": "encode", "seed": 6},
                            {"args": [tgt, memory], "method": "decode", "seed": 7}])["outputs"]
    for side, out, L in zip(("encoder", "decoder"), outs, (Ls, Lt)):
        how = "encode(src)" if side == "encoder" else "decode(tgt, memory)"
        out = t.expect_tensor(out, f"`{label}.{how}`", shape=(B, L, D))
        rate = dropout_rate_seen(out, consts[side].expand(B, L, D), q[f"{side}.norm.weight"], q[f"{side}.norm.bias"], p)
        if rate != p:
            cls = "Encoder" if side == "encoder" else "Decoder"
            t.fail(f"{label}, zero embeddings and positions, the {side}'s first self-attention outputting a constant: "
                   + (f"the {side}'s layers {dropout_said(rate, p)}. The model's dropout goes to both stacks: "
                      f"{cls}(num_layers, d_model, num_heads, d_ff, dropout, activation, norm_first)."
                      if rate is not None else
                      f"{how} should be the final norm of that constant under dropout {p:g} (about a third of its "
                      f"entries 0, the rest divided by 1 - p); it does not fit that."),
                   DROPOUT_NOT_PASSED if rate is not None else None)


@group("m4", "gradients", depends=PARTS)
def gradients(t: Tester):
    p = model_params(t, 11, 13, 2, True)
    src, tgt, src_mask, tgt_mask = model_inputs(t)
    # Token 0 as a real token too (position 0 is never padding): every row of both tables that is used, the row of
    # the tokenizer's pad id 0 included, gets its gradient.
    src[:, 0], tgt[:, 0] = 0, 0
    judge = TorchModel(p, 2, True, "relu", torch.float64, 30)
    logits = judge(src, tgt, src_mask, tgt_mask)
    g = t.randn(*logits.shape)
    logits.backward(g)
    want = by_student_name(judge, p)
    first = run_model(t, p, 2, True, 30, src, tgt, src_mask, tgt_mask, allow_error=True)
    if not first.get("ok"):
        _forward_masks_swapped(t, f"Transformer(11, 13, d_model={D}, num_layers=2, pre-LN)", p, True, "relu", src, tgt,
                               judge.encode(src, src_mask).detach(), src_mask, tgt_mask, first)
    reply = run_model(t, p, 2, True, 30, src, tgt, src_mask, tgt_mask, backward=[g])
    expect_output(t, reply["outputs"][0], logits.detach(), "The logits of Transformer (pre-LN)",
                  lambda: forward_mistakes(t, reply["outputs"][0], p, 2, True, 30, src, tgt, src_mask, tgt_mask))
    grads = reply.get("param_grads")
    if grads is None:
        t.fail(f"No gradient reached the model's parameters: {reply.get('grad_problem')}.", GRAPH_CUT)
    for name in ("src_embed.embedding.weight", "tgt_embed.embedding.weight"):
        if grads.get(name) is not None:
            t.expect_close(grads[name], want[name], f"The gradient of `{name}` (token 0 is a real, unmasked token of "
                           f"src and tgt here)", lambda w=want[name]: CATALOGUE.tried("embedding_grad", w))
    t.expect_grads(grads, want, "the path from it to the logits is cut (.detach(), .data or torch.no_grad() on the "
                                "way), or it is not used.", GRAPH_CUT)


def _small_model_works(t: Tester):
    """A style group of the whole model judges only a Transformer that works: one layer, post-LN, vocabularies of 11."""
    p = model_params(t, 11, 11, 1, False)
    src, tgt, src_mask, tgt_mask = model_inputs(t, vocab=(11, 11))
    reply = run_model(t, p, 1, False, 30, src, tgt, src_mask, tgt_mask)
    t.works(reply["outputs"][0], TorchModel(p, 1, False, "relu", torch.float64, 30)(src, tgt, src_mask, tgt_mask).detach(),
            "`Transformer`")


@group("m4", "size_tying", depends=PARTS, style=True)
def size_tying(t: Tester):
    _small_model_works(t)
    for (kwargs, want) in (({"tie_embeddings": True}, PAPER[0]), ({"tie_embeddings": True, "norm_first": True}, PAPER[1]),
                           ({}, PAPER[2])):
        reply = t.module("Transformer", (37000, 37000), kwargs, param_values=False, device="meta")
        label = "Transformer(37000, 37000" + "".join(f", {k}={v}" for k, v in kwargs.items()) + ")"
        tied = [set(g) for g in reply["tied"]]
        shared = "; ".join(" = ".join(sorted(g)) for g in tied)     # sorted: the same words every run
        # the generator's weight is generator.weight, or one level down in a module wrapping it (charged in `model`)
        def has_generator(g):
            return "generator.weight" in g or any(re.fullmatch(r"generator\.\w+\.weight", k) for k in g)
        two = {"src_embed.embedding.weight", "tgt_embed.embedding.weight"}
        if kwargs.get("tie_embeddings") and not any(two <= g and has_generator(g) for g in tied):
            how = ("tied only in part: " + shared if tied else "three separate Parameter objects (a copy of the "
                   "values, or a new nn.Parameter around the same tensor, is another object)")
            t.fail(f"In {label}, src_embed.embedding.weight, tgt_embed.embedding.weight and generator.weight should be "
                   f"one and the same Parameter (assign it: self.generator.weight = self.tgt_embed.embedding.weight); "
                   f"they are {how}.", TYING_PARTIAL if tied else TYING_BY_COPY)
        if not kwargs.get("tie_embeddings") and tied:
            t.fail(f"{label} without tie_embeddings shares {shared}: the three tables are separate unless tying is asked.",
                   TIED_BY_DEFAULT)
        if reply["param_count"] != want:
            t.fail(f"{label} has {reply['param_count']:,} parameters; the architecture of the paper has {want:,} "
                   f"(a final norm in post-LN, a missing one in pre-LN, `pe` as a parameter, a shared or missing "
                   f"layer, or copied instead of shared tables change the count).", PARAMETER_COUNT)
    reply = t.module("Transformer", (50, 60), {"tie_embeddings": True, "d_model": D, "num_heads": HEADS,
                                                "num_layers": 1, "d_ff": D_FF}, allow_error=True)
    if reply.get("ok") or reply.get("type") != "ValueError":
        t.fail("Transformer(50, 60, tie_embeddings=True) should raise ValueError (one table cannot serve two "
               f"vocabularies of different sizes); it {'was created' if reply.get('ok') else 'raised ' + str(reply.get('type'))}.",
               TIE_DIFFERENT_VOCABS)


@group("m4", "init", depends=PARTS, style=True)
def init(t: Tester):
    _small_model_works(t)
    reply = t.module("Transformer", (300, 400), {"d_model": 32, "num_heads": 4, "num_layers": 2, "d_ff": 64}, seed=7)
    for name, w in reply["params"].items():
        if w.dim() > 1:
            fan_out, fan_in = w.shape[0], w[0].numel()
            bound = math.sqrt(6 / (fan_in + fan_out))
            if w.abs().max().item() > bound * (1 + 1e-6) or w.std().item() < 0.8 * bound / math.sqrt(3):
                t.fail(f"`{name}` {shape_str(w.shape)} is not Xavier-uniform initialised: its values should fill "
                       f"[-{bound:.4f}, {bound:.4f}] (sqrt(6 / (fan_in + fan_out))). Apply nn.init.xavier_uniform_ to "
                       f"every parameter with more than one dimension, after tying.", NOT_XAVIER)
        elif name.endswith(("norm1.weight", "norm2.weight", "norm3.weight", "norm.weight")) and not torch.all(w == 1):
            t.fail(f"`{name}` should keep its default (ones): only parameters with more than one dimension are "
                   f"re-initialised.", NORMS_REINITIALISED)


@group("m4", "behaviour", depends=PARTS, style=True)
def behaviour(t: Tester):
    p = model_params(t, 11, 13, 2, False)
    src, tgt, src_mask, tgt_mask = model_inputs(t)
    judge = TorchModel(p, 2, False, "relu", torch.float64, 30)
    base = run_model(t, p, 2, False, 30, src, tgt, src_mask, tgt_mask)["outputs"][0]
    t.works(base, judge(src, tgt, src_mask, tgt_mask).detach(), "`Transformer`")
    later = tgt.clone()
    later[:, 3:] = (later[:, 3:] % 12) + 1
    out = run_model(t, p, 2, False, 30, src, later, src_mask, tgt_mask)["outputs"][0]
    if not torch.allclose(out[:, :3], base[:, :3], atol=1e-10):
        t.fail("Changing target tokens at positions 3 and later changed the logits at positions 0..2: with a causal "
               "tgt_mask no position may see later ones (pass tgt_mask down to every decoder layer).", LOOKS_AHEAD)
    padded = src.clone()
    padded[~src_mask[:, 0, :]] = 5
    out = run_model(t, p, 2, False, 30, padded, tgt, src_mask, tgt_mask)["outputs"][0]
    if not torch.allclose(out, base, atol=1e-10):
        t.fail("Changing padded source tokens changed the logits: the source padding mask must reach every "
               "encoder layer and every cross-attention.", PADDING_NOT_IGNORED)
    alone = run_model(t, p, 2, False, 30, src[1:2], tgt[1:2], src_mask[1:2], tgt_mask[1:2])["outputs"][0]
    if not torch.allclose(alone, base[1:2], atol=1e-10):
        t.fail("Batch item 1 gets different logits alone than inside the batch: batch items must not mix.",
               BATCH_MIXING)
    ev = run_model(t, p, 2, False, 30, src, tgt, src_mask, tgt_mask, dropout=0.5,
                   calls=[{"args": [src, tgt, src_mask, tgt_mask], "seed": s} for s in (1, 2)])["outputs"]
    if not torch.equal(ev[0], ev[1]):
        t.fail("Transformer(dropout=0.5) in eval mode gives different logits for the same input: dropout must act in "
               "training mode only.", DROPOUT_IN_EVAL)


@group("m4", "vectorization", depends=PARTS, style=True, observes=True)
def vectorization(t: Tester):
    # The table: one batched computation whatever max_len (a loop over positions grows with it).
    def table_ops(max_len):
        reply = t.call("sinusoidal_positional_encoding", max_len, 8, record=True)
        t.works(reply["value"], pe_table(max_len, 8).to(torch.get_default_dtype()), "`sinusoidal_positional_encoding`",
                atol=float(pe_tolerance(max_len).max()))
        return reply["record"]["op_count"]

    rows = t.grown(10, 30, 60)
    t.expect_constant_ops({"base": table_ops(10), f"max_len grew from 10 to {rows}": table_ops(rows)},
                          "smaller table (max_len 10)",
                          "sinusoidal_positional_encoding", "Compute every position at once: positions [max_len, 1] "
                          "times the frequencies [d_model/2] broadcast to the angles [max_len, d_model/2].", limit=60)
    # Every form of mask forward takes (a loop may hide behind one only, e.g. over the batch for 3-D masks).
    forms = ("no masks", "src_mask [B, 1, Ls] and tgt_mask [Lt, Lt]", "src_mask [B, 1, Ls] and tgt_mask [B, Lt, Lt]")

    def count(B, Ls, Lt, pick=None):
        p = model_params(t, 11, 13, 2, True)
        src, tgt = _tokens(t, B, Ls, 11), _tokens(t, B, Lt, 13)
        src_mask, causal, combined = ragged_masks(B, Lt, Ls)
        masks = [(None, None), (src_mask, causal), (src_mask, combined)]
        masks = masks if pick is None else [masks[pick]]
        reply = run_model(t, p, 2, True, 30, src, tgt, record=True,
                          calls=[{"args": [src, tgt, s, m]} for s, m in masks])
        judge = TorchModel(p, 2, True, "relu", torch.float64, 30)
        for out, (s, m) in zip(reply["outputs"], masks):
            t.works(out, judge(src, tgt, s, m).detach(), "`Transformer`")
        return reply["record"]["op_count"]

    b, ls, lt = t.grown(2, 9, 25), t.grown(3, 9, 25), t.grown(4, 9, 25)     # beyond any small padded count
    advice = "Work on whole [B, L, ...] tensors, whatever the masks' form; the only loop expected is the one over the layers."

    every = {"base": count(2, 3, 4), f"the batch grew from 2 to {b}": count(b, 3, 4),
             f"the source grew from 3 to {ls}": count(2, ls, 4), f"the target grew from 4 to {lt}": count(2, 3, lt)}
    if len(set(every.values())) == 1 and every["base"] <= 700 * len(forms):
        return
    # Which form: name it (at the base size and the first size whose count changed).
    grew = next((k for k, v in every.items() if v != every["base"]), None)
    sizes = {"base": (2, 3, 4), f"the batch grew from 2 to {b}": (b, 3, 4), f"the source grew from 3 to {ls}": (2, ls, 4),
             f"the target grew from 4 to {lt}": (2, 3, lt)}
    for i, label in enumerate(forms):
        t.expect_constant_ops({k: count(*sizes[k], i) for k in ("base", grew) if k is not None}, "base size",
                              f"Transformer.forward (with {label})", advice, limit=700)
    t.expect_constant_ops(every, "base size", "Transformer.forward", advice, limit=700 * len(forms))



@group("m4", "from_scratch", depends=PARTS, style=True, observes=True)
def from_scratch(t: Tester):
    p = model_params(t, 11, 13, 2, True)
    src, tgt, src_mask, tgt_mask = model_inputs(t)
    reply = run_model(t, p, 2, True, 30, src, tgt, src_mask, tgt_mask, record=True)
    t.works(reply["outputs"][0], TorchModel(p, 2, True, "relu", torch.float64, 30)(src, tgt, src_mask, tgt_mask).detach(),
            "`Transformer`")
    record = dict(reply["record"])
    record["functions"] = record["functions"] + reply.get("submodules", [])
    t.expect_allowed(record, "Transformer")
