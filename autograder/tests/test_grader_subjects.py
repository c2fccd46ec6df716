"""The grader is tested as hard as the students: reference, stub, mutants, correct variants."""
from __future__ import annotations

import re

import pytest

from conftest import COURSE, subjects
from derived import base_of, base_text, chunks, code, subject_text

# Every milestone whose hidden checks exist (course.yaml lists them; engine/checks_<id>.py holds them).
MILESTONES = [m.id for m in COURSE.milestones if (COURSE.root / "autograder" / "milestones" / m.id / "checks.py").is_file()]

# Files with the right names, shapes and dtypes that compute nothing (KIND: zeros, input or random).
_FAKE = """
import torch
def _fake(x, shape=None):
    shape = x.shape if shape is None else shape
    if KIND == "zeros":
        return torch.zeros(shape, dtype=x.dtype)
    if KIND == "random":
        return torch.rand(shape, dtype=x.dtype)
    return x if tuple(x.shape) == tuple(shape) else torch.zeros(shape, dtype=x.dtype) + x.mean()
"""
NOTHING = {
    "m1": _FAKE + """
def softmax(x, dim=-1):
    return _fake(x)
def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    return _fake(q, q.shape[:-1] + v.shape[-1:]), _fake(q, q.shape[:-1] + k.shape[-2:-1])
def padding_mask(tokens, pad_id):
    return _fake(tokens, (tokens.shape[0], 1, tokens.shape[1])).bool()
def causal_mask(size, device=None):
    return _fake(torch.ones(size, size), (size, size)).bool()
""",
    "m2": _FAKE + """
from torch import nn
def split_heads(x, num_heads):
    B, L, d = x.shape
    return _fake(x, (B, num_heads, L, d // num_heads))
def merge_heads(x):
    B, H, L, d_k = x.shape
    return _fake(x, (B, L, H * d_k))
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, dropout=0.0, bias=True):
        super().__init__()
        if d_model % num_heads:
            raise ValueError(f"d_model {d_model} is not divisible by num_heads {num_heads}")
        self.num_heads = num_heads
        self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d_model, d_model, bias=bias) for _ in range(4))
        self.attn_weights = None
    def forward(self, query, key, value, mask=None):
        B, Lq, _ = query.shape
        self.attn_weights = _fake(query, (B, self.num_heads, Lq, key.shape[1])).detach()
        return _fake(query) + 0 * self.w_o(query)
""",
    "m3": _FAKE + """
import torch.nn.functional as F
from torch import nn
from multihead import MultiHeadAttention
class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.weight, self.bias = nn.Parameter(torch.ones(d_model)), nn.Parameter(torch.zeros(d_model))
    def forward(self, x):
        return _fake(x) + 0 * self.weight
class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0, activation="relu"):
        super().__init__()
        if activation not in ("relu", "gelu"):
            raise ValueError("activation must be 'relu' or 'gelu'")
        self.linear1, self.linear2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
    def forward(self, x):
        return _fake(x) + 0 * self.linear2(self.linear1(x))
class EncoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, activation="relu", norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout, activation)
        self.norm1, self.norm2 = LayerNorm(d_model), LayerNorm(d_model)
    def forward(self, x, src_mask=None):
        return _fake(x) + 0 * self.feed_forward(self.norm2(self.norm1(self.self_attn(x, x, x))))
class DecoderLayer(EncoderLayer):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, activation="relu", norm_first=False):
        super().__init__(d_model, num_heads, d_ff, dropout, activation, norm_first)
        self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.norm3 = LayerNorm(d_model)
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        return _fake(x) + 0 * self.norm3(self.cross_attn(x, memory, memory))
""",
    "m4": _FAKE + """
import math
from torch import nn
from blocks import DecoderLayer, EncoderLayer, LayerNorm
def sinusoidal_positional_encoding(max_len, d_model):
    if d_model % 2:
        raise ValueError("d_model must be even")
    return _fake(torch.zeros(max_len, d_model, dtype=torch.get_default_dtype()))
class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=5000, dropout=0.0):
        super().__init__()
        self.register_buffer("pe", sinusoidal_positional_encoding(max_len, d_model))
    def forward(self, x):
        if x.size(1) > self.pe.size(0):
            raise ValueError(f"length {x.size(1)} > max_len {self.pe.size(0)}")
        return _fake(x)
class TokenEmbedding(nn.Module):
    def __init__(self, vocab_size, d_model):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model)
    def forward(self, tokens):
        return _fake(self.embedding(tokens))
class Encoder(nn.Module):
    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, activation="relu", norm_first=False):
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(d_model, num_heads, d_ff, dropout, activation, norm_first)
                                    for _ in range(num_layers))
        self.norm = LayerNorm(d_model) if norm_first else None
    def forward(self, x, src_mask=None):
        return _fake(x)
class Decoder(Encoder):
    def __init__(self, num_layers, d_model, num_heads, d_ff, dropout=0.0, activation="relu", norm_first=False):
        super().__init__(num_layers, d_model, num_heads, d_ff, dropout, activation, norm_first)
        self.layers = nn.ModuleList(DecoderLayer(d_model, num_heads, d_ff, dropout, activation, norm_first)
                                    for _ in range(num_layers))
    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        return _fake(x)
class Transformer(nn.Module):
    def __init__(self, src_vocab_size, tgt_vocab_size, d_model=512, num_heads=8, num_layers=6, d_ff=2048,
                 dropout=0.1, max_len=5000, activation="relu", norm_first=False, tie_embeddings=False):
        super().__init__()
        if tie_embeddings and src_vocab_size != tgt_vocab_size:
            raise ValueError("vocab sizes differ")
        self.src_embed, self.tgt_embed = TokenEmbedding(src_vocab_size, d_model), TokenEmbedding(tgt_vocab_size, d_model)
        self.pos_encoding = PositionalEncoding(d_model, max_len, dropout)
        self.encoder = Encoder(num_layers, d_model, num_heads, d_ff, dropout, activation, norm_first)
        self.decoder = Decoder(num_layers, d_model, num_heads, d_ff, dropout, activation, norm_first)
        self.generator = nn.Linear(d_model, tgt_vocab_size)
        if tie_embeddings:
            self.src_embed.embedding.weight = self.tgt_embed.embedding.weight
            self.generator.weight = self.tgt_embed.embedding.weight
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
    def encode(self, src, src_mask=None):
        return _fake(self.src_embed(src))
    def decode(self, tgt, memory, src_mask=None, tgt_mask=None):
        return _fake(self.tgt_embed(tgt))
    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        return _fake(self.generator(self.decode(tgt, None)))
""",
    "m5": _FAKE + """
import math
class CharTokenizer:
    def __init__(self, texts):
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = 0, 1, 2, 3
        self.vocab_size = 4 + len(set("".join(texts)))
    def encode(self, text):
        return [0] * len(text) if KIND == "zeros" else [4] * len(text)
    def decode(self, ids):
        return "" if KIND == "zeros" else "x"
def make_batch(src_ids, tgt_ids, pad_id, bos_id, eos_id):
    B, Ls, Lt = len(src_ids), max(map(len, src_ids)), max(map(len, tgt_ids)) + 1
    z = torch.zeros
    return {"src": z(B, Ls, dtype=torch.long), "tgt_in": z(B, Lt, dtype=torch.long), "tgt_out": z(B, Lt, dtype=torch.long),
            "src_mask": z(B, 1, Ls, dtype=torch.bool), "tgt_mask": z(B, Lt, Lt, dtype=torch.bool)}
def label_smoothed_cross_entropy(logits, target, smoothing=0.0, pad_id=None):
    return _fake(logits, ()) + 0 * logits.sum()
def noam_lr(step, d_model, warmup_steps, factor=1.0):
    return 0.0 if KIND == "zeros" else 1.0
def make_optimizer(model, d_model, warmup_steps, factor=1.0):
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.0)
def train_step(model, batch, optimizer, pad_id, scheduler=None, smoothing=0.0, clip_norm=None):
    return 0.0
def evaluate(model, batches, pad_id):
    return 0.0
""",
    "m6": """
import torch
def _tokens(model, src, max_len, bos_id, eos_id):
    was = model.training
    model.eval()
    with torch.no_grad():
        B = src.size(0)
        fill = {"zeros": eos_id, "input": 3, "random": 4}[KIND]
        out = torch.cat([torch.full((B, 1), bos_id), torch.full((B, max_len), fill)], 1)
    model.train(was)
    return out
def greedy_decode(model, src, src_mask, max_len, bos_id, eos_id, pad_id):
    return _tokens(model, src, max_len, bos_id, eos_id)
def sample_decode(model, src, src_mask, max_len, bos_id, eos_id, pad_id, temperature=1.0, top_k=None,
                  top_p=None, generator=None):
    if not temperature > 0:
        raise ValueError("temperature must be > 0")
    return _tokens(model, src, max_len, bos_id, eos_id)
def beam_search(model, src, src_mask, max_len, bos_id, eos_id, pad_id, beam_size=4, length_penalty=0.6):
    return _tokens(model, src, max_len, bos_id, eos_id), torch.zeros(src.size(0), dtype=torch.float64)
def greedy_decode_cached(model, src, src_mask, max_len, bos_id, eos_id, pad_id):
    return _tokens(model, src, max_len, bos_id, eos_id)
""",
}


def _listed(path, key) -> list[str]:
    m = re.search(rf"^{key}:\s*(.+)$", path.read_text(), re.M)
    assert m, f"{path.name} has no '{key}:' line in its docstring"
    return [g.strip() for g in m.group(1).split(",") if g.strip()]


def catches(path) -> list[str]:
    return _listed(path, "CATCHES")


def diagnosis(path) -> list[str]:
    """The causes the report may name: the first must be named; 'none' means none may be."""
    return _listed(path, "DIAGNOSIS")


def by_kind(milestone, kind):
    return {n: p for n, p in subjects(milestone).items() if n.startswith(kind + "/")}


def case(*values, grades):
    """A parametrize case that reads the results of the subjects `grades` ([(milestone, name)])."""
    return pytest.param(*values, marks=pytest.mark.grades(*grades))


def _per_milestone(name):
    return [case(m, grades=[(m, name)]) for m in MILESTONES]


def _samples_cases():
    return [case(m, grades=[(m, n) for n in by_kind(m, "samples")]) for m in MILESTONES]


def _cases(kind):
    return [case(m, n, grades=[(m, n)]) for m in MILESTONES for n in by_kind(m, kind)]


@pytest.mark.parametrize("milestone", _per_milestone("reference"))
def test_reference_gets_full_marks(milestone, graded):
    r = graded(milestone, "reference")
    assert r.score == r.max_score == COURSE.milestone(milestone).max_score, [
        (c.name, c.message) for c in r.checks if not c.passed]
    assert not r.internal_errors


@pytest.mark.parametrize("milestone", _per_milestone("stub"))
def test_stub_gets_zero_saying_not_implemented(milestone, graded):
    r = graded(milestone, "stub")
    assert r.score == 0
    for c in r.checks:
        assert "not implemented yet" in c.message, (c.name, c.message)
    assert not r.internal_errors


@pytest.mark.parametrize("milestone", MILESTONES)
def test_enough_subjects_and_every_group_is_caught(milestone):
    mutants, correct = by_kind(milestone, "mutants"), by_kind(milestone, "correct")
    assert len(mutants) >= 10 and len(correct) >= 2
    caught = {g for p in mutants.values() for g in catches(p)}
    groups = set(COURSE.milestone(milestone).checks)
    assert caught >= groups, f"no mutant proves these checks can fail: {sorted(groups - caught)}"
    assert caught <= groups, f"CATCHES names unknown groups: {sorted(caught - groups)}"


@pytest.mark.parametrize("milestone, name", _cases("mutants"))
def test_mutant_loses_points_where_expected(milestone, name, graded):
    """The mutant loses points in exactly its CATCHES groups: where its mistake is, plus the rules it
    breaks (a mistake is charged once; see grade.py)."""
    r = graded(milestone, name)
    path = subjects(milestone)[name]
    lost = {c.name for c in r.checks if c.score < c.max_score}
    assert lost == set(catches(path)), f"{name} loses points in {sorted(lost)}, CATCHES says {catches(path)}"
    for c in r.checks:
        if c.name in lost:
            assert c.message and "grader could not finish" not in c.message, (c.name, c.message)
    assert r.score < r.max_score
    assert not r.internal_errors, r.internal_errors


@pytest.mark.parametrize("milestone, name", _cases("correct"))
def test_correct_variant_gets_full_marks(milestone, name, graded):
    r = graded(milestone, name)
    assert r.score == r.max_score, [(c.name, c.message) for c in r.checks if not c.passed]


@pytest.mark.parametrize("milestone", _samples_cases())
def test_samples_get_partial_credit(milestone, graded):
    samples = graded.of(milestone, "samples/")
    assert samples, "the demo needs sample submissions"
    for name, r in samples.items():
        assert 0 < r.score < r.max_score, (name, r.score)
        assert not r.internal_errors


def named_causes(result) -> set[str]:
    return {c.cause for c in result.checks if not c.passed and c.cause}


@pytest.mark.parametrize("milestone, name", _cases("mutants"))
def test_mutant_gets_its_diagnosis_and_no_wrong_one(milestone, name, graded):
    """Feedback names the mistake (the first DIAGNOSIS entry) and never a cause the mutant does not have."""
    want = diagnosis(subjects(milestone)[name])
    named = named_causes(graded(milestone, name))
    if want == ["none"]:
        assert not named, f"{name}: named {named}, but no cause is known for this mistake"
        return
    assert want[0] in named, f"{name}: the report should name {want[0]}; it named {named or 'nothing'}"
    assert named <= set(want), f"{name}: the report names {named - set(want)}, which this mutant does not have"


def _derived_cases():
    return [(m, n) for m in MILESTONES for n, p in subjects(m).items() if "/" in n and base_of(p)]


@pytest.mark.parametrize("milestone, name", _derived_cases())
def test_a_derived_subject_replaces_code_of_its_base(milestone, name):
    """A file with a BASE line must change code of its base (not just docstrings). A .py one must replace at
    least one statement: had the base renamed that function, the file would be its base plus dead code (a
    .diff whose base changed there no longer applies, and says so)."""
    path = subjects(milestone)[name]
    base_code = base_text(path, COURSE, milestone)
    if path.suffix == ".diff":
        assert code(subject_text(path, COURSE, milestone)) != code(base_code), f"{name} changes no code of its base"
        return
    base = dict(chunks(base_code)[0])
    replaced = [k for k, t in chunks(path.read_text())[0]
                if k != "__doc__" and k in base and code(base[k].strip() + "\n") != code(t.strip() + "\n")]
    assert replaced, f"{name} replaces nothing of {base_of(path)}: does it still name the right functions?"


@pytest.mark.parametrize("milestone", MILESTONES)
def test_most_mutants_get_a_named_cause(milestone):
    """Issue goal: at least 90% of the suite's mutants get the right named cause."""
    mutants = by_kind(milestone, "mutants")
    named = [n for n, p in mutants.items() if diagnosis(p) != ["none"]]
    assert len(named) >= 0.9 * len(mutants), f"only {len(named)} of {len(mutants)} mutants have a named cause"


@pytest.mark.parametrize("milestone", MILESTONES)
def test_a_file_that_computes_nothing_scores_zero(milestone, grade_text):
    """Points for how code is written only when it works: zeros, the input, or noise earn nothing."""
    for kind in ("zeros", "input", "random"):
        r = grade_text(milestone, NOTHING[milestone].replace("KIND", repr(kind)), name=kind)
        assert r.score == 0, (kind, [(c.name, c.score) for c in r.checks if c.score])
