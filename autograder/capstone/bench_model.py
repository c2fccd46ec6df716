"""How fast the course's reference Transformer trains and decodes, as medians. Timing lives here, never in tests.

    python -m autograder.capstone.bench_model [--repeat 7] [--threads 1] [--only step,decode,dates]

1. step:   one training step (the reference's train_step, same loss, same batches) of the reference
           Transformer and of `nn.Transformer` of the same size, interleaved; median per-step times
           and their ratio (the course's goal: at most 1.3x).
2. decode: greedy_decode against greedy_decode_cached for 128 new tokens (goal: the cache at least
           3x faster), and beam_search (beam 4) against greedy, on the reference model.
3. dates:  `course train --task dates` (sandboxed, as a student runs it) until 99% exact match on the
           validation split: steps and seconds, and exact match on the unseen test split.

The reference modules are assembled from solutions/ into a temporary folder and imported here: this
is the course's own code, never a student's.
"""
from __future__ import annotations

import argparse
import importlib
import io
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from autograder import config
from autograder.capstone import train


def _reference_modules(course: config.Course, folder: Path) -> dict:
    train.assemble(course, None, folder)
    sys.path.insert(0, str(folder))
    return {name: importlib.import_module(name) for name in ("attention", "model", "training", "data", "decoding")}


class TorchSeq2Seq(nn.Module):
    """nn.Transformer with the course model's embeddings, positions, generator and call signature
    (boolean masks, True = may attend), so both run under the same train_step."""

    def __init__(self, vocab, d_model, heads, layers, d_ff, max_len=256):
        super().__init__()
        self.d_model = d_model
        self.src_embed, self.tgt_embed = nn.Embedding(vocab, d_model), nn.Embedding(vocab, d_model)
        self.core = nn.Transformer(d_model, heads, layers, layers, d_ff, dropout=0.0, batch_first=True)
        self.generator = nn.Linear(d_model, vocab)
        pos = torch.arange(max_len, dtype=torch.float32)[:, None]
        angle = pos / 10000 ** (torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)
        pe = torch.zeros(max_len, d_model)
        pe[:, 0::2], pe[:, 1::2] = torch.sin(angle), torch.cos(angle)
        self.register_buffer("pe", pe)

    def _embed(self, table, tokens):
        return table(tokens) * math.sqrt(self.d_model) + self.pe[: tokens.size(1)]

    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        pad_src = ~src_mask[:, 0, :]                                   # [B, Ls], True = padding
        Lt = tgt.size(1)
        causal = torch.ones(Lt, Lt, dtype=torch.bool).triu(1)          # True = blocked
        out = self.core(self._embed(self.src_embed, src), self._embed(self.tgt_embed, tgt), tgt_mask=causal,
                        src_key_padding_mask=pad_src, memory_key_padding_mask=pad_src,
                        tgt_key_padding_mask=~tgt_mask[:, -1, :] if tgt_mask is not None else None)
        return self.generator(out)


def bench_step(mods, repeat: int, d_model=64, heads=4, layers=2, d_ff=256, batch=64, steps=20) -> dict:
    training, data = mods["training"], mods["data"]
    splits = data.make_task("reverse", 2000, 10, 10, seed=0, min_len=1, max_len=10)
    tok = training.CharTokenizer([s for pair in splits.train for s in pair])
    pairs = [(tok.encode(s), tok.encode(t)) for s, t in splits.train]
    batches = [training.make_batch([s for s, _ in pairs[i:i + batch]], [t for _, t in pairs[i:i + batch]],
                                   tok.pad_id, tok.bos_id, tok.eos_id) for i in range(0, steps * batch, batch)]
    torch.manual_seed(0)
    ours = mods["model"].Transformer(tok.vocab_size, tok.vocab_size, d_model=d_model, num_heads=heads,
                                     num_layers=layers, d_ff=d_ff, dropout=0.0)
    theirs = TorchSeq2Seq(tok.vocab_size, d_model, heads, layers, d_ff)
    n_ours, n_theirs = (sum(p.numel() for p in m.parameters()) for m in (ours, theirs))
    opts = {id(m): training.make_optimizer(m, d_model, 100) for m in (ours, theirs)}
    times = {"ours": [], "nn.Transformer": []}

    def run(model):
        opt, sched = opts[id(model)]
        t0 = time.perf_counter()
        for b in batches:
            training.train_step(model, b, opt, tok.pad_id, sched)
        return (time.perf_counter() - t0) / len(batches)

    run(ours), run(theirs)                                             # warm-up
    for _ in range(repeat):
        times["ours"].append(run(ours))
        times["nn.Transformer"].append(run(theirs))
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"config": f"d_model {d_model}, {layers}+{layers} layers, {heads} heads, d_ff {d_ff}, batch {batch}, "
                      f"reverse task (length <= 10)", "params": {"ours": n_ours, "nn.Transformer": n_theirs},
            "ms_per_step": {k: round(v * 1000, 2) for k, v in med.items()},
            "ratio": round(med["ours"] / med["nn.Transformer"], 3)}


def bench_decode(mods, repeat: int, d_model=128, heads=4, layers=2, d_ff=512, batch=8, src_len=20, new=128) -> dict:
    decoding, attention = mods["decoding"], mods["attention"]
    torch.manual_seed(0)
    V = 40
    model = mods["model"].Transformer(V, V, d_model=d_model, num_heads=heads, num_layers=layers, d_ff=d_ff,
                                      dropout=0.0, max_len=new + 8).eval()
    src = torch.randint(4, V, (batch, src_len))
    src_mask = attention.padding_mask(src, 0) if hasattr(attention, "padding_mask") else (src != 0)[:, None, :]
    # eos_id -1 is never produced: every run generates exactly `new` tokens.
    args = (model, src, src_mask, new, 1, -1, 0)
    fns = {"greedy": lambda: decoding.greedy_decode(*args),
           "greedy_cached": lambda: decoding.greedy_decode_cached(*args),
           "beam4": lambda: decoding.beam_search(*args, beam_size=4)[0]}
    outs = {k: f() for k, f in fns.items()}                            # warm-up, and the tokens to compare
    times = {k: [] for k in fns}
    for _ in range(repeat):
        for k, f in fns.items():
            t0 = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"config": f"d_model {d_model}, {layers}+{layers} layers, {heads} heads, d_ff {d_ff}, batch {batch}, "
                      f"source length {src_len}, {new} new tokens",
            "seconds": {k: round(v, 3) for k, v in med.items()},
            "cached_speedup": round(med["greedy"] / med["greedy_cached"], 2),
            "beam4_over_greedy": round(med["beam4"] / med["greedy"], 2),
            "cached_same_tokens": bool(torch.equal(outs["greedy"], outs["greedy_cached"]))}


def bench_dates(course: config.Course, threads: int) -> dict:
    # The m5 notebook's dates model: one layer is enough for this task.
    overrides = {"task": "dates", "d_model": 64, "heads": 4, "layers": 1, "d_ff": 128, "warmup": 100,
                 "factor": 0.4, "smoothing": 0.1, "steps": 4000, "eval_every": 100, "stop_at": 0.99,
                 "threads": threads}
    with tempfile.TemporaryDirectory() as out:
        r = train.train(course, None, Path(out), overrides, stream=io.StringIO())
    reached = any(em >= 0.99 for _, em, _ in r["val"])               # (step, exact match, loss) per evaluation
    return {"config": ", ".join(f"{k} {v}" for k, v in overrides.items() if k != "threads"),
            "steps": r["steps"], "train_seconds": r["train_seconds"], "reached_99_on_val": reached,
            "test_exact_match_greedy": r["exact_match_greedy"], "test_exact_match_beam": r.get("exact_match_beam")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m autograder.capstone.bench_model", description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1 is steadiest)")
    ap.add_argument("--only", default="step,decode,dates")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    course = config.load()
    only = set(a.only.split(","))
    with tempfile.TemporaryDirectory() as folder:
        mods = _reference_modules(course, Path(folder))
        if "step" in only:
            r = bench_step(mods, a.repeat)
            print(f"training step ({r['config']}; {r['params']['ours']:,} vs {r['params']['nn.Transformer']:,} "
                  f"parameters): ours {r['ms_per_step']['ours']} ms, nn.Transformer "
                  f"{r['ms_per_step']['nn.Transformer']} ms, ratio {r['ratio']}x (goal <= 1.3x)", flush=True)
        if "decode" in only:
            r = bench_decode(mods, a.repeat)
            s = r["seconds"]
            print(f"decoding ({r['config']}): greedy {s['greedy']} s, cached greedy {s['greedy_cached']} s "
                  f"({r['cached_speedup']}x faster, goal >= 3x; same tokens: {r['cached_same_tokens']}), "
                  f"beam 4 {s['beam4']} s ({r['beam4_over_greedy']}x greedy)", flush=True)
    if "dates" in only:
        r = bench_dates(course, a.threads)
        print(f"dates ({r['config']}): {r['steps']} steps in {r['train_seconds']} s; 99% on validation reached: "
              f"{r['reached_99_on_val']}; test exact match greedy {r['test_exact_match_greedy']:.1%}, "
              f"beam {r['test_exact_match_beam']:.1%}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
