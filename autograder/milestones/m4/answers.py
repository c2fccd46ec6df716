"""Milestone 4's right answers, as the judge computes them, and the known mistakes it recomputes.

The expected values themselves come from the judge's shared reference (autograder/milestones/reference.py:
PyTorch's own layers composed into stacks and a Transformer, the float64 positional table). This module
holds what goes with them: the CATALOGUE entries that reproduce each known mistake of the positional
table, the positional module, the embedding, the stacks and the model (each the right computation with
one thing changed), and the parameter counts of the paper's architecture.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from autograder.milestones.reference import D, TorchModel, TorchStack, layer_fn, pe_table, sub_params
from autograder.milestones.m4.mistakes import CATALOGUE


# ---- the positional table -------------------------------------------------------------------


CATALOGUE.deviations("pe", pe_table)


# ---- catalogue entries for stacks and the model ---------------------------------------------------

def _stack_variant(**dev):
    def fn(p, side, n, norm_first, activation, x, memory=None, src_mask=None, tgt_mask=None):
        if dev.get("extra_norm") and norm_first or dev.get("no_norm") and not norm_first:
            return None
        if dev.get("swap_masks"):
            if memory is None:
                return None
            # written out with milestone 3's functional layers, so that it fails the way the student's code
            # (the course's DecoderLayer) fails when the masks are swapped
            for i in range(n):
                x = layer_fn(sub_params(p, f"layers.{i}"), norm_first, activation, x, memory, tgt_mask, src_mask)
            return F.layer_norm(x, (D,), p["norm.weight"], p["norm.bias"]) if norm_first else x
        stack = TorchStack(p, side, n, norm_first, activation, x.dtype)
        return stack(x, memory, src_mask, tgt_mask, **dev).detach()
    return fn


CATALOGUE.entry("stack", "layers_reversed", "the layers run in reverse order; run them in order (layers[0] first).")(
    _stack_variant(reverse=True))
FINAL_NORM_IN_POST_LN = CATALOGUE.entry("stack", "final_norm_in_post_ln", "post-LN layers already end with a norm: the stack's final "
                "LayerNorm belongs to pre-LN only (norm = LayerNorm(d_model) if norm_first else None).")(
    _stack_variant(extra_norm=True))
CATALOGUE.entry("stack", "stack_masks_swapped", "src_mask and tgt_mask reach the layers swapped: each "
                "DecoderLayer takes (x, memory, src_mask, tgt_mask) in that order.")(_stack_variant(swap_masks=True))
FINAL_NORM_MISSING = CATALOGUE.entry("stack", "final_norm_missing", "pre-LN needs a final LayerNorm after the last layer "
                "(norm = LayerNorm(d_model) when norm_first), applied in forward.")(_stack_variant(no_norm=True))


@CATALOGUE.entry("stack", "norm_first_not_passed", "the layers are built without `norm_first`, so they are always "
                 "post-LN (with pre-LN's final norm after them): build each layer with it, e.g. "
                 "EncoderLayer(d_model, num_heads, d_ff, dropout, activation, norm_first), DecoderLayer likewise.")
def _stack_layers_post_ln(p, side, n, norm_first, activation, x, memory=None, src_mask=None, tgt_mask=None):
    if not norm_first:
        return None
    layers = {k: v for k, v in p.items() if not k.startswith("norm.")}
    out = TorchStack(layers, side, n, False, activation, x.dtype)(x, memory, src_mask, tgt_mask).detach()
    return F.layer_norm(out, (D,), p["norm.weight"], p["norm.bias"])


@CATALOGUE.entry("stack", "stack_activation_not_passed", "the layers are built without `activation`, so they "
                 "always use the default relu: build each layer with it, e.g. EncoderLayer(d_model, num_heads, "
                 "d_ff, dropout, activation, norm_first).")
def _stack_relu(p, side, n, norm_first, activation, x, memory=None, src_mask=None, tgt_mask=None):
    if activation == "relu":
        return None
    return TorchStack(p, side, n, norm_first, "relu", x.dtype)(x, memory, src_mask, tgt_mask).detach()


def _model_variant(**dev):
    def fn(p, n, norm_first, max_len, src, tgt, src_mask=None, tgt_mask=None, activation="relu"):
        model = TorchModel(p, n, norm_first, activation, p["generator.weight"].dtype, max_len)
        return model(src, tgt, src_mask, tgt_mask, **dev).detach()
    return fn


CATALOGUE.entry("model", "memory_from_embeddings", "the decoder's memory is the source embeddings; it is the "
                "encoder's output: memory = encoder(pos_encoding(src_embed(src)), src_mask).")(
    _model_variant(memory_from_embeddings=True))
CATALOGUE.entry("model", "tgt_mask_dropped", "tgt_mask does not reach the decoder, so each position sees later "
                "ones: pass it on, decoder(x, memory, src_mask, tgt_mask).")(_model_variant(no_tgt_mask=True))
CATALOGUE.entry("model", "tgt_with_src_embed", "the target tokens are embedded with src_embed; they use tgt_embed "
                "(the two vocabularies can differ).")(_model_variant(tgt_with_src_table=True))
CATALOGUE.entry("model", "embeddings_not_scaled", "the embeddings are not multiplied by sqrt(d_model) before the "
                "positions are added (TokenEmbedding: embedding(tokens) * math.sqrt(d_model)).")(
    _model_variant(scale=False))

ACTIVATION_NOT_PASSED = ("`activation` does not reach the layers of the {sides} (they use the default relu): "
                         "Transformer passes it on, Encoder(num_layers, d_model, num_heads, d_ff, dropout, activation, "
                         "norm_first) and the same for Decoder.")


def _relu_in(p, n, norm_first, max_len, activation, sides):
    """The judge's model whose stacks `sides` use relu whatever `activation` says (None where that changes nothing)."""
    if activation == "relu":
        return None
    dtype = p["generator.weight"].dtype
    model = TorchModel(p, n, norm_first, activation, dtype, max_len)
    for side in sides:
        setattr(model, side, TorchStack(p, side, n, norm_first, "relu", dtype, f"{side}."))
    return model


def _register_relu_in(sides, words):
    text = ACTIVATION_NOT_PASSED.format(sides=words)

    @CATALOGUE.entry("model", "activation_not_passed", text)
    def logits(p, n, norm_first, max_len, src, tgt, src_mask=None, tgt_mask=None, activation="relu"):
        model = _relu_in(p, n, norm_first, max_len, activation, sides)
        return None if model is None else model(src, tgt, src_mask, tgt_mask).detach()

    if sides == ("encoder",):
        @CATALOGUE.entry("encode", "activation_not_passed", text)
        def encode(p, n, norm_first, max_len, src, src_mask=None, activation="relu"):
            model = _relu_in(p, n, norm_first, max_len, activation, sides)
            return None if model is None else model.encode(src, src_mask).detach()

    if sides == ("decoder",):
        @CATALOGUE.entry("decode", "activation_not_passed", text)
        def decode(p, n, norm_first, max_len, tgt, memory, src_mask=None, tgt_mask=None, activation="relu"):
            model = _relu_in(p, n, norm_first, max_len, activation, sides)
            return None if model is None else model.decode(tgt, memory, src_mask, tgt_mask).detach()


for _sides, _words in ((("encoder",), "encoder"), (("decoder",), "decoder"),
                       (("encoder", "decoder"), "encoder and decoder")):
    _register_relu_in(_sides, _words)


def _own_table(p, n, norm_first, max_len, activation):
    """The judge's model whose positions are the table rounded to float32, as a float32 tensor the model keeps
    itself (not a buffer: .double() leaves it float32) adds them."""
    dtype = p["generator.weight"].dtype
    model = TorchModel(p, n, norm_first, activation, dtype, max_len)
    model.pe = pe_table(max_len, D).to(torch.float32).to(dtype)
    return model


SECOND_TABLE = ("the positions reach the embeddings rounded to float32: the model adds a positional table of its own "
                "(a plain float32 tensor, which model.double() leaves in float32) instead of going through "
                "self.pos_encoding, whose buffer `pe` follows the model's dtype. Add positions only with "
                "self.pos_encoding(...), on both sides.")


@CATALOGUE.entry("model", "second_positional_table", SECOND_TABLE)
def _model_own_table(p, n, norm_first, max_len, src, tgt, src_mask=None, tgt_mask=None, activation="relu"):
    return _own_table(p, n, norm_first, max_len, activation)(src, tgt, src_mask, tgt_mask).detach()


@CATALOGUE.entry("encode", "second_positional_table", SECOND_TABLE)
def _encode_own_table(p, n, norm_first, max_len, src, src_mask=None, activation="relu"):
    return _own_table(p, n, norm_first, max_len, activation).encode(src, src_mask).detach()


@CATALOGUE.entry("decode", "second_positional_table", SECOND_TABLE)
def _decode_own_table(p, n, norm_first, max_len, tgt, memory, src_mask=None, tgt_mask=None, activation="relu"):
    return _own_table(p, n, norm_first, max_len, activation).decode(tgt, memory, src_mask, tgt_mask).detach()


CAUSAL_ADDED = ("a causal mask is added to tgt_mask inside the model, so a tgt_mask that is not causal (or None) is "
                "not followed: decode and forward use tgt_mask exactly as given (None = no mask); the caller builds "
                "the causal mask.")


def _with_causal(tgt, tgt_mask):
    causal = torch.ones(tgt.size(1), tgt.size(1), dtype=torch.bool).tril()
    return causal if tgt_mask is None else tgt_mask & causal


@CATALOGUE.entry("decode", "decode_adds_causal_mask", CAUSAL_ADDED)
def _decode_causal(p, n, norm_first, max_len, tgt, memory, src_mask=None, tgt_mask=None, activation="relu"):
    model = TorchModel(p, n, norm_first, activation, p["generator.weight"].dtype, max_len)
    return model.decode(tgt, memory, src_mask, _with_causal(tgt, tgt_mask)).detach()


@CATALOGUE.entry("model", "decode_adds_causal_mask", CAUSAL_ADDED)
def _model_causal(p, n, norm_first, max_len, src, tgt, src_mask=None, tgt_mask=None, activation="relu"):
    model = TorchModel(p, n, norm_first, activation, p["generator.weight"].dtype, max_len)
    return model(src, tgt, src_mask, _with_causal(tgt, tgt_mask)).detach()


# ---- what forward and decode return: raw logits, and the decoder's output before the generator ----------

def _judge(p, n, norm_first, max_len, activation):
    return TorchModel(p, n, norm_first, activation, p["generator.weight"].dtype, max_len)


LOG_PROBS = ("the logits went through log_softmax (as the Annotated Transformer's Generator does: "
             "log_softmax(proj(x))), so forward gives log-probabilities where the docstring asks for the generator's "
             "raw logits [B, Lt, tgt_vocab_size], before any softmax. Keep the generator a plain nn.Linear(d_model, "
             "tgt_vocab_size) and return its output: the loss (milestone 5) and the decoders (milestone 6) apply the "
             "softmax they need themselves.")
LOGITS_LOG_SOFTMAX = CATALOGUE.entry("model", "logits_log_softmax", LOG_PROBS)(
    lambda p, n, norm_first, max_len, src, tgt, src_mask=None, tgt_mask=None, activation="relu":
    F.log_softmax(_judge(p, n, norm_first, max_len, activation)(src, tgt, src_mask, tgt_mask), dim=-1).detach())


@CATALOGUE.entry("model", "logits_softmax", "the logits went through softmax, so forward gives probabilities (each "
                 "row sums to 1) where the docstring asks for the generator's raw logits [B, Lt, tgt_vocab_size], "
                 "before any softmax: return the generator's output; the loss (milestone 5) and the decoders "
                 "(milestone 6) apply the softmax they need themselves.")
def _model_softmax(p, n, norm_first, max_len, src, tgt, src_mask=None, tgt_mask=None, activation="relu"):
    return F.softmax(_judge(p, n, norm_first, max_len, activation)(src, tgt, src_mask, tgt_mask), dim=-1).detach()


@CATALOGUE.entry("model", "forward_without_generator", "forward returns the decoder's output [B, Lt, d_model] (as the "
                 "Annotated Transformer's EncoderDecoder.forward does, leaving the generator to the loss): it should "
                 "return the logits, generator(decode(tgt, memory, src_mask, tgt_mask)), [B, Lt, tgt_vocab_size].")
def _model_no_generator(p, n, norm_first, max_len, src, tgt, src_mask=None, tgt_mask=None, activation="relu"):
    judge = _judge(p, n, norm_first, max_len, activation)
    return judge.decode(tgt, judge.encode(src, src_mask), src_mask, tgt_mask).detach()


def _decoded_logits(p, n, norm_first, max_len, tgt, memory, src_mask=None, tgt_mask=None, activation="relu"):
    """The generator applied to the judge's decode: what a decode that applies the generator itself returns."""
    judge = _judge(p, n, norm_first, max_len, activation)
    return judge.gen(judge.decode(tgt, memory, src_mask, tgt_mask)).detach()


DECODE_STOPS = ("decode should return the decoder's output [B, Lt, d_model], before the generator (milestone 6 "
                "applies model.generator to its last position only), and forward apply the generator once, "
                "generator(decode(...)), and return those raw logits.")
CATALOGUE.entry(
    "decode", "decode_applies_generator",
    "decode applies the generator, so it returns logits [B, Lt, tgt_vocab_size]: " + DECODE_STOPS)(_decoded_logits)


@CATALOGUE.entry("model", "decode_applies_generator", "decode already applies the generator, and forward applies it "
                 "again, to decode's logits [B, Lt, tgt_vocab_size]: " + DECODE_STOPS)
def _model_generator_twice(p, n, norm_first, max_len, src, tgt, src_mask=None, tgt_mask=None, activation="relu"):
    judge = _judge(p, n, norm_first, max_len, activation)
    return judge.gen(judge(src, tgt, src_mask, tgt_mask)).detach()      # raises, as the student's, when V != d_model


DECODE_LOG_SOFTMAX = CATALOGUE.entry(
    "decode", "decode_log_softmax",
    "decode applies the generator and log_softmax, so it returns log-probabilities [B, Lt, tgt_vocab_size]: "
    + DECODE_STOPS + " No softmax of any kind belongs in the model.")(
    lambda *args, **kwargs: F.log_softmax(_decoded_logits(*args, **kwargs), dim=-1))
# The same mistake seen in forward's logits (forward returns what decode gives): its computation is the judge's
# log-probabilities, the same as LOGITS_LOG_SOFTMAX's, so the check names it only when decode was seen to return
# them (checks.forward_mistakes).
FORWARD_VIA_DECODE_LOG_SOFTMAX = CATALOGUE.mistake(
    "decode_log_softmax", "forward returns log-probabilities because decode applies the generator and log_softmax "
    "and forward returns what decode gives: " + DECODE_STOPS + " No softmax of any kind belongs in the model.",
    reproduce=LOGITS_LOG_SOFTMAX.reproduce)


# ---- catalogue entries for the embedding and the positional module ----------------------------------

@CATALOGUE.entry("embedding", "embedding_not_scaled", "the embeddings must be multiplied by sqrt(d_model).")
def _emb_unscaled(weight, tokens):
    return F.embedding(tokens, weight)


@CATALOGUE.entry("embedding", "embedding_divided", "the embeddings are divided by sqrt(d_model); they are "
                 "multiplied: embedding(tokens) * math.sqrt(d_model).")
def _emb_divided(weight, tokens):
    return F.embedding(tokens, weight) / math.sqrt(weight.size(1))


@CATALOGUE.entry("positional", "pe_indexed_by_batch", "the table is sliced by the batch size (pe[:x.size(0)]); "
                 "slice it by the sequence length: x + pe[:x.size(1)].")
def _pe_by_batch(x, pe):
    return x + pe[: x.size(0)].unsqueeze(1) if x.size(0) <= pe.size(0) else None


@CATALOGUE.entry("positional", "pe_whole_table", "the whole table is added; add only its first L rows: "
                 "x + pe[:x.size(1)].")
def _pe_whole(x, pe):
    return x + pe


# ---- catalogue entries for the gradients of the embedding tables ------------------------------------

@CATALOGUE.entry("embedding_grad", "embedding_padding_idx", "padding_idx freezes the row of token 0: "
                 "nn.Embedding(vocab_size, d_model, padding_idx=0) never gives that row a gradient (and starts it at "
                 "zero), so token 0 is never learned. The embedding does not know which id pads (the masks hide the "
                 "padding, and with another pad_id, as milestone 5 allows, token 0 is a real token): build "
                 "nn.Embedding(vocab_size, d_model), as the docstring says.")
def _grad_row0_frozen(grad):
    """The right gradient of an embedding table with the row of token 0 zeroed (None when it is zero already)."""
    if not bool((grad[0] != 0).any()):
        return None
    frozen = grad.clone()
    frozen[0] = 0
    return frozen


# ---- the size of the paper's model ------------------------------------------------------------------

PAPER = (63_119_496, 63_121_544, 101_007_496)     # tied post-LN, tied pre-LN, untied post-LN
