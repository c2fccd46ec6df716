"""The translation capstone's data, tokenizer and scores: course code only, run in the parent process.

    pairs = load_pairs()                         # 76,037 (English, French) pairs, shipped in data/
    s = split(pairs)                             # train / val / test, split by English sentence
    tok = WordTokenizer.train([e for e, _ in s.train], [f for _, f in s.train])
    tok.encode_src("I am cold.")                 # ids for the student's model (no <bos>/<eos>)
    tok.detokenize(tok.decode_tgt(ids))          # ids the model wrote -> "je suis froid ."-> "je suis froid."

Data: Sentence pairs from the Tatoeba Project (tatoeba.org), CC-BY 2.0 FR (see data/README.md).

Split: by English sentence, fixed and seeded. Every distinct English sentence goes to exactly one
split with ALL its French translations, so no translation of a test sentence is ever seen in
training (nor is a pair whose French is one of them, whatever its English); the test set scores each
output against every French translation of its sentence.

Tokenizer (measured against characters; see README): word level, lower-cased, words and punctuation
as separate tokens, one vocabulary per language of the words seen at least `min_count` times in the
training split (the rest read as <unk>). It is reversible up to case and spacing: a token that does not
follow the usual spacing (a word glued to the token before it, as "est" in "c'est", or punctuation after
a space, as French "?") carries the mark "\u2581", so `detokenize` puts the spaces back where they were.
Ids 0..3 are <pad> <bos> <eos> <unk>, as in the student's CharTokenizer, so the student's make_batch,
loss and decoders take these ids unchanged.

Scores: sacrebleu corpus BLEU and chrF, multi-reference, on detokenized output, case-insensitive (the
tokenizer lower-cases, so the output has no case to judge); the signature says so.
"""
from __future__ import annotations

import gzip
import random
import re
from collections import Counter
from pathlib import Path
from typing import NamedTuple

DATA = Path(__file__).resolve().parent / "data" / "tatoeba-eng-fra.tsv.gz"
ATTRIBUTION = "Sentence pairs from the Tatoeba Project (tatoeba.org), CC-BY 2.0 FR"
SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")
PAD, BOS, EOS, UNK = 0, 1, 2, 3
MARK = "\u2581"
_PIECE = re.compile(r"\w+|[^\w\s]")


class Splits(NamedTuple):
    """Each split a list of (English, [its French translations]) groups."""
    train: list
    val: list
    test: list

    def pairs(self, which: str = "train") -> list[tuple[str, str]]:
        return [(e, f) for e, fs in getattr(self, which) for f in fs]


def load_pairs(path: Path = DATA) -> list[tuple[str, str]]:
    """The (English, French) pairs of the shipped file, in its order."""
    pairs = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            en, _, fr = line.rstrip("\n").partition("\t")
            if en.strip() and fr.strip():
                pairs.append((en.strip(), fr.strip()))
    return pairs


def split(pairs, n_val: int = 500, n_test: int = 1000, max_chars: int = 40, seed: int = 0) -> Splits:
    """Group by English sentence; shuffle the groups with `seed`; the first n_test groups whose English has
    at most `max_chars` characters are the test set, the next n_val the validation set, the rest training.
    Training keeps the pairs whose two sides have at most `max_chars` characters; validation and test keep
    every French translation of their sentences as references."""
    groups: dict[str, list[str]] = {}
    for en, fr in pairs:
        groups.setdefault(en, []).append(fr)
    order = list(groups)
    random.Random(seed).shuffle(order)
    short = [e for e in order if len(e) <= max_chars]
    test, val = short[:n_test], short[n_test:n_test + n_val]
    held = set(test) | set(val)
    # Stricter than the grouping alone: a French reference of a held-out sentence is never a training
    # target either, even as the translation of another English sentence ("Run!" / "Run.").
    held_fr = {tuple(pieces(f)) for e in held for f in groups[e]}     # the tokens the model would see
    train = [(e, [f for f in groups[e] if len(f) <= max_chars and tuple(pieces(f)) not in held_fr]) for e in order
             if e not in held and len(e) <= max_chars]
    return Splits([(e, fs) for e, fs in train if fs], [(e, groups[e]) for e in val], [(e, groups[e]) for e in test])


def pieces(text: str) -> list[str]:
    """Lower-cased words and punctuation, each marked with MARK when its spacing is not the usual one
    (usual: a word after a space or at the start, punctuation right after the token before it)."""
    text = text.lower()
    out = []
    for m in _PIECE.finditer(text):
        p = m.group()
        spaced = m.start() == 0 or text[m.start() - 1].isspace()
        word = p[0].isalnum() or p[0] == "_"
        out.append(p if spaced == word else MARK + p)
    return out


def detokenize(tokens: list[str]) -> str:
    """The inverse of `pieces` (up to case and spacing): "je", "suis", "\u2581?" -> "je suis ?"."""
    out = []
    for i, t in enumerate(tokens):
        marked = t.startswith(MARK) and len(t) > 1
        p = t[1:] if marked else t
        word = p[:1].isalnum() or p[:1] == "_" or p in SPECIALS
        spaced = word != marked
        if out and spaced:
            out.append(" ")
        out.append(p)
    return "".join(out)


class Vocab:
    def __init__(self, tokens: list[str]):
        self.itos = list(SPECIALS) + [t for t in tokens if t not in SPECIALS]
        self.stoi = {t: i for i, t in enumerate(self.itos)}

    def __len__(self):
        return len(self.itos)

    def encode(self, toks: list[str]) -> list[int]:
        return [self.stoi.get(t, UNK) for t in toks]

    def decode(self, ids: list[int]) -> list[str]:
        """Ids -> tokens, stopping at <eos>, skipping <pad> and <bos>; an unknown id reads as <unk>."""
        out = []
        for i in ids:
            if i == EOS:
                break
            if i in (PAD, BOS):
                continue
            out.append(self.itos[i] if 0 <= i < len(self.itos) else "<unk>")
        return out


class WordTokenizer:
    """One Vocab per language (see the module's docstring)."""

    def __init__(self, src: list[str], tgt: list[str]):
        self.src, self.tgt = Vocab(src), Vocab(tgt)

    @classmethod
    def train(cls, english: list[str], french: list[str], min_count: int = 2) -> "WordTokenizer":
        def kept(texts):
            counts = Counter(t for s in texts for t in pieces(s))
            return [t for t, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])) if n >= min_count]
        return cls(kept(english), kept(french))

    def encode_src(self, text: str) -> list[int]:
        return self.src.encode(pieces(text))

    def encode_tgt(self, text: str) -> list[int]:
        return self.tgt.encode(pieces(text))

    def translation(self, ids: list[int]) -> str:
        """Target ids (as the model wrote them) -> a detokenized French sentence, its first letter upper-case."""
        text = detokenize(self.tgt.decode(ids))
        return text[:1].upper() + text[1:]

    def to_json(self) -> dict:
        return {"src": self.src.itos, "tgt": self.tgt.itos}

    @classmethod
    def from_json(cls, obj) -> "WordTokenizer":
        if not (isinstance(obj, dict) and all(isinstance(obj.get(k), list) and obj[k][:4] == list(SPECIALS)
                                              and all(isinstance(t, str) and len(t) < 200 for t in obj[k])
                                              for k in ("src", "tgt"))):
            raise ValueError("not a vocabulary of the course's word tokenizer")
        return cls(obj["src"][4:], obj["tgt"][4:])


# ---- scores -----------------------------------------------------------------------------------------

def references(groups) -> list[list[str]]:
    """sacrebleu's reference streams for groups (English, [French, ...]): stream k holds each sentence's
    k-th translation, or None where it has fewer (sacrebleu skips those)."""
    depth = max(len(fs) for _, fs in groups)
    return [[fs[k] if k < len(fs) else None for _, fs in groups] for k in range(depth)]


def scores(hypotheses: list[str], groups, refs=None) -> dict:
    """Corpus BLEU and chrF (sacrebleu) of detokenized hypotheses against every French translation."""
    from sacrebleu.metrics import BLEU, CHRF
    refs = refs if refs is not None else references(groups)
    bleu, chrf = BLEU(lowercase=True), CHRF(lowercase=True)
    b, c = bleu.corpus_score(hypotheses, refs), chrf.corpus_score(hypotheses, refs)
    return {"bleu": round(b.score, 2), "chrf": round(c.score, 2),
            "bleu_signature": str(bleu.get_signature()), "chrf_signature": str(chrf.get_signature())}


def bleu(hypotheses: list[str], refs) -> float:
    from sacrebleu.metrics import BLEU
    return round(BLEU(lowercase=True).corpus_score(hypotheses, refs).score, 2)
