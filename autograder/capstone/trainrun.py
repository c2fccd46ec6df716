"""The confined child of `course train` / `course translate`: trains (or decodes with) a Transformer
assembled from a folder of course modules. Never imported by the grader or by `course`.

    trainrun.py FOLDER OUT          (started by autograder.sandbox.launch, profile "trainer")

It runs as an unprivileged user with no capability, under a syscall filter (no new processes, no
programs, no sockets), under bubblewrap when it works. FOLDER (read-only) holds attention.py,
multihead.py, blocks.py, model.py, training.py, data.py (and decoding.py when there is one): the
course's references or a student's own files, and `job.json`, everything the parent sends: the
configuration, the training and validation pairs, the test SOURCES (never their targets), the
vocabulary. OUT is the only folder it may write. Like the grading worker, this script imports nothing
from the course package, so the modules are exactly the files in FOLDER.

It prints `PROGRESS <json>` lines while training and, when a module fails, one `ERROR <json>` line
naming the file and line. It writes OUT/model.pt (tensors and plain values only: the weights, the
configuration dict, the vocabulary string), OUT/training.png, OUT/attention.png and OUT/result.json:
the TOKEN IDS it decoded for each test source (greedy, beam, KV-cached, sampled) and plain timings.
No score is computed here: the parent decodes those ids with the course's own tokenizer and compares
them with test targets this process never sees.

With conf["task"] == "translate" (main_translation) the job holds token ids only (the course's word
tokenizer runs in the parent): training pairs, validation and test sources, the two vocabularies. It
trains for conf["minutes"] (or conf["steps"]), prints `VALIDATION <json>` lines (the ids greedy decoding
wrote for the validation sources, scored by the parent with sacrebleu) and writes model.pt (with the
vocabularies), attention.png and result.json; training.png is drawn by the parent. (The validation exact match below only picks the
weights to keep and when to stop; it is progress, not a result.)
"""
import functools
import json
import math
import os
import sys
import time
import traceback

FOLDER, OUT = os.path.realpath(sys.argv[1]), os.path.realpath(sys.argv[2])
with open(os.path.join(FOLDER, "job.json")) as _f:
    JOB = json.load(_f)
CONF = JOB["conf"]
sys.path.insert(0, FOLDER)


def fail(stage, exc, message=None):
    """Report an exception by the course module (file and line) it came from, and stop."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if os.path.dirname(os.path.realpath(f.filename)) == FOLDER]
    where = frames[-1] if frames else None
    print("ERROR " + json.dumps({
        "stage": stage, "type": type(exc).__name__, "message": (message or str(exc))[:500],
        "file": os.path.basename(where.filename) if where else None, "line": where.lineno if where else None,
        "code": (where.line or "") if where else ""}), flush=True)
    sys.exit(1)


try:
    import torch
    from model import Transformer
    from training import CharTokenizer, evaluate, make_batch, make_optimizer, train_step
    try:
        import decoding
    except ImportError as e:
        if getattr(e, "name", None) != "decoding":
            raise
        decoding = None
except Exception as e:      # a student file that does not import
    fail("import", e)

torch.set_num_threads(CONF.get("threads", 2))


def greedy(model, src, src_mask, max_len, bos, eos, pad):
    """The course's own greedy decoding (used when no decoding.py is present)."""
    from attention import causal_mask
    was = model.training
    model.eval()
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        out = torch.full((src.size(0), 1), bos, dtype=torch.long)
        done = torch.zeros(src.size(0), dtype=torch.bool)
        for _ in range(max_len):
            L = out.size(1)
            logits = model.generator(model.decode(out, memory, src_mask, causal_mask(L)[None])[:, -1])
            nxt = torch.where(done, torch.full_like(done, pad, dtype=torch.long), logits.argmax(-1))
            out = torch.cat([out, nxt[:, None]], 1)
            done |= nxt == eos
            if done.all():
                break
    model.train(was)
    return out


def decode_batch(model, b, tok, max_len, how="greedy", beam=4):
    """Tokens [B, T] for a batch: the student's (or course's) decoding.py, or the course's own greedy."""
    args = (model, b["src"], b["src_mask"], max_len, tok.bos_id, tok.eos_id, tok.pad_id)
    if how == "beam":
        return decoding.beam_search(*args, beam_size=beam)[0]
    if how == "cached":
        return decoding.greedy_decode_cached(*args)
    return decoding.greedy_decode(*args) if decoding is not None else greedy(*args)


def rows(out, eos, limit):
    """A [B, T] tensor of token ids -> lists of ints, each cut after its first <eos> (at most `limit`)."""
    lists = []
    for row in out.tolist():
        row = [int(i) for i in row[:limit]]
        lists.append(row[: row.index(eos) + 1] if eos in row else row)
    return lists


def decode_all(model, sources, tok, max_len, how="greedy", beam=4, batch=256):
    """Token ids decoded for every source (lists of ints). Decoding reads only src and src_mask: the sources
    stand in for the targets, which this process never has."""
    outputs = []
    for i in range(0, len(sources), batch):
        chunk = sources[i:i + batch]
        b = make_batch(chunk, chunk, tok.pad_id, tok.bos_id, tok.eos_id)
        outputs += rows(decode_batch(model, b, tok, max_len, how, beam), tok.eos_id, max_len + 2)
    return outputs


def val_exact_match(model, pairs, tok, max_len, batch=256):
    """Share of validation pairs decoded exactly: picks the weights to keep, and when to stop."""
    hits = 0
    for i in range(0, len(pairs), batch):
        chunk = pairs[i:i + batch]
        b = make_batch([s for s, _ in chunk], [t for _, t in chunk], tok.pad_id, tok.bos_id, tok.eos_id)
        for (_, t), row in zip(chunk, decode_batch(model, b, tok, max_len)):
            hits += tok.decode(row) == tok.decode(t)
    return hits / max(1, len(pairs))


def write_json(name, obj):
    with open(os.path.join(OUT, name), "w") as f:
        json.dump(obj, f)


def main():
    c = CONF
    torch.manual_seed(c["seed"])
    stage = "tokenizer"
    try:
        tok = CharTokenizer([s for pair in JOB["train"] for s in pair])
        train = [(tok.encode(s), tok.encode(t)) for s, t in JOB["train"]]
        val = [(tok.encode(s), tok.encode(t)) for s, t in JOB["val"]]
        test = [tok.encode(s) for s in JOB["test"]]
        max_out = JOB["max_out"]
        stage = "model"
        model = Transformer(tok.vocab_size, tok.vocab_size, d_model=c["d_model"], num_heads=c["heads"],
                            num_layers=c["layers"], d_ff=c["d_ff"], dropout=c["dropout"], max_len=64)
        optimizer, scheduler = make_optimizer(model, c["d_model"], c["warmup"], c["factor"])
    except Exception as e:
        fail(stage, e)
    gen = torch.Generator().manual_seed(c["seed"])
    history, t0, tokens_seen, best = [], time.monotonic(), 0, None
    evals = []
    step = 0
    for step in range(1, c["steps"] + 1):
        idx = torch.randint(len(train), (c["batch"],), generator=gen).tolist()
        try:
            batch = make_batch([train[i][0] for i in idx], [train[i][1] for i in idx], tok.pad_id, tok.bos_id,
                               tok.eos_id)
            loss = train_step(model, batch, optimizer, tok.pad_id, scheduler, c["smoothing"], c["clip"])
        except Exception as e:
            fail("training", e)
        if not math.isfinite(float(loss)):
            print("ERROR " + json.dumps({"stage": "training", "type": "NonFiniteLoss", "message":
                                          f"the training loss became {loss} at step {step}", "file": "training.py",
                                          "line": None, "code": ""}), flush=True)
            sys.exit(1)
        tokens_seen += int((batch["tgt_out"] != tok.pad_id).sum())
        history.append((step, float(loss), optimizer.param_groups[0]["lr"]))
        if step % c["eval_every"] == 0 or step == c["steps"]:
            try:
                em = val_exact_match(model, val, tok, max_out)
                val_loss = evaluate(model, [make_batch([s for s, _ in val[:256]], [t for _, t in val[:256]],
                                                        tok.pad_id, tok.bos_id, tok.eos_id)], tok.pad_id)
            except Exception as e:
                fail("evaluation", e)
            evals.append((step, em, float(val_loss)))
            if best is None or em > best[1]:     # keep the best weights so far (accuracy oscillates late in training)
                best = (step, em, {k: v.detach().clone() for k, v in model.state_dict().items()})
            elapsed = time.monotonic() - t0
            print(f"PROGRESS {json.dumps({'step': step, 'steps': c['steps'], 'loss': float(loss), 'val_em': em, 'val_loss': float(val_loss), 'tok_s': tokens_seen / max(elapsed, 1e-9), 'elapsed': elapsed})}", flush=True)
            if em >= c["stop_at"]:
                break
        elif step % 10 == 0:
            elapsed = time.monotonic() - t0
            print(f"PROGRESS {json.dumps({'step': step, 'steps': c['steps'], 'loss': float(loss), 'tok_s': tokens_seen / max(elapsed, 1e-9), 'elapsed': elapsed})}", flush=True)
    train_s = time.monotonic() - t0
    if best is not None and best[0] != step:
        model.load_state_dict(best[2])
    try:
        t_dec = time.monotonic()
        result = {"steps": step, "best_step": best[0] if best else step, "train_seconds": round(train_s, 1),
                  "val": evals, "decoding": "decoding.py" if decoding is not None else "the course's greedy",
                  "ids": {"pad": tok.pad_id, "bos": tok.bos_id, "eos": tok.eos_id, "unk": tok.unk_id},
                  "vocab_ids": tok.encode(JOB["vocab"]),
                  "greedy": decode_all(model, test, tok, max_out)}
        result["seconds"] = {"greedy": round(time.monotonic() - t_dec, 2)}
        if decoding is not None and c.get("beam"):
            t_dec = time.monotonic()
            result["beam"] = decode_all(model, test, tok, max_out, how="beam", beam=c["beam"])
            result["seconds"]["beam"] = round(time.monotonic() - t_dec, 2)
        if decoding is not None and hasattr(decoding, "greedy_decode_cached"):
            t_dec = time.monotonic()
            result["cached"] = decode_all(model, test, tok, max_out, how="cached")
            result["seconds"]["cached"] = round(time.monotonic() - t_dec, 2)
        if decoding is not None and hasattr(decoding, "sample_decode"):
            b = make_batch(test[:3], test[:3], tok.pad_id, tok.bos_id, tok.eos_id)
            result["temperature"] = {}
            for temp in (0.5, 1.0, 1.5):
                out = decoding.sample_decode(model, b["src"], b["src_mask"], max_out, tok.bos_id, tok.eos_id,
                                             tok.pad_id, temperature=temp, generator=torch.Generator().manual_seed(0))
                result["temperature"][str(temp)] = rows(out, tok.eos_id, max_out + 2)
    except Exception as e:
        fail("decoding", e)
    # Tensors and plain values only: `course translate` loads it with weights_only=True.
    torch.save({"state_dict": {k: v.detach().clone() for k, v in model.state_dict().items()},
                "config": {k: v for k, v in c.items()}, "texts": [str(JOB["vocab"])]}, os.path.join(OUT, "model.pt"))
    _plot(history, evals, os.path.join(OUT, "training.png"))
    result["attention_png"] = _attention(model, tok, JOB["test"][0], max_out, os.path.join(OUT, "attention.png"))
    write_json("result.json", result)


def translate():
    """JOB {"translate": text, "checkpoint": file in FOLDER, "beam": k or None}: write the ids decoded for
    `text` and the checkpoint's vocabulary (the parent turns the ids into text)."""
    import pickle
    try:
        try:
            ck = torch.load(os.path.join(FOLDER, JOB["checkpoint"]), weights_only=True)
        except pickle.UnpicklingError as e:
            import re
            what = re.search(r"Unsupported global: GLOBAL (\S+)", str(e))
            fail("translate", e, "the checkpoint holds more than tensors and plain values (" +
                 (f"it names {what.group(1)}" if what else "objects that must run code to load") +
                 "), so it was not written by `course train`, or was changed since: not loaded")
        if isinstance(ck, dict) and "vocab" in ck:
            write_json("result.json", translate_words(ck))
            return
        c = ck["config"]
        tok = CharTokenizer(ck["texts"])
        model = Transformer(tok.vocab_size, tok.vocab_size, d_model=c["d_model"], num_heads=c["heads"],
                            num_layers=c["layers"], d_ff=c["d_ff"], dropout=0.0, max_len=64)
        model.load_state_dict(ck["state_dict"])
        b = make_batch([tok.encode(JOB["translate"])], [[]], tok.pad_id, tok.bos_id, tok.eos_id)
        if JOB.get("beam") and decoding is None:
            raise RuntimeError("--beam needs decoding.py (milestone 6)")
        out = decode_batch(model, b, tok, 40, "beam" if JOB.get("beam") else "greedy", JOB.get("beam") or 4)
        result = {"ids": rows(out, tok.eos_id, 42)[0], "texts": [str(t) for t in ck["texts"]],
                  "ids_of": {"pad": tok.pad_id, "bos": tok.bos_id, "eos": tok.eos_id, "unk": tok.unk_id}}
    except Exception as e:
        fail("translate", e)
    write_json("result.json", result)


def _picture(draw):
    """A picture must never cost the run: an error while drawing becomes the sentence "not saved: ..."."""
    @functools.wraps(draw)
    def drawn(*args, **kwargs):
        try:
            return draw(*args, **kwargs)
        except Exception as e:
            return f"not saved: {type(e).__name__}: {e}"[:200]
    return drawn


def _save_figure(plt, fig, path, title=None):
    """Lay `fig` out (under `title`), write it to `path` and free it."""
    if title is not None:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


@_picture
def _attention(model, tok, text, max_len, path):
    """Heatmaps of the decoder's cross-attention (one row per layer, one column per head) while it writes
    its own greedy output for `text`. Returns a sentence saying what was saved."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from attention import causal_mask
    b = make_batch([tok.encode(text)], [[]], tok.pad_id, tok.bos_id, tok.eos_id)
    out = decode_batch(model, b, tok, max_len)
    ys = out[:, :-1]
    model.eval()
    with torch.no_grad():
        model(b["src"], ys, b["src_mask"], causal_mask(ys.size(1)))
    layers = model.decoder.layers
    maps = [getattr(layer.cross_attn, "attn_weights", None) for layer in layers]
    if any(not isinstance(w, torch.Tensor) or w.dim() != 4 for w in maps):
        return "not saved: MultiHeadAttention keeps no attn_weights [B, H, Lq, Lk] after forward"
    heads = maps[0].size(1)
    fig, axes = plt.subplots(len(layers), heads, figsize=(2.2 * heads, 2.2 * len(layers)), squeeze=False)
    src_chars = list(text)
    ids = out[0, 1:].tolist()
    ids = ids[: ids.index(tok.eos_id) + 1] if tok.eos_id in ids else ids      # up to <eos>, no pads
    out_chars = [tok.decode([i]) if i != tok.eos_id else "<eos>" for i in ids]
    for i, w in enumerate(maps):
        for h in range(heads):
            ax = axes[i][h]
            ax.imshow(w[0, h, : len(out_chars), : len(src_chars)].float().numpy(), cmap="viridis", vmin=0, vmax=1)
            ax.set_xticks(range(len(src_chars)), src_chars, fontsize=7)
            ax.set_yticks(range(len(out_chars)), out_chars, fontsize=7)
            ax.set_title(f"layer {i + 1}, head {h + 1}", fontsize=8)
    _save_figure(plt, fig, path, f"cross-attention while writing {tok.decode(out[0])!r} from {text!r}")
    return f"saved for {text!r}"


def _plot(history, evals, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    try:
        steps, losses, lrs = zip(*history)
        fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.5))
        a.plot(steps, losses, lw=0.8, label="training loss")
        if evals:
            a.plot([e[0] for e in evals], [e[2] for e in evals], "o-", label="validation loss")
        a.set_yscale("log")
        a.set_xlabel("step")
        a.legend()
        b.plot(steps, lrs)
        b.set_xlabel("step")
        b.set_title("learning rate")
        _save_figure(plt, fig, path)
    except Exception:             # a picture must never cost the run
        pass


# ---- the translation capstone (`course train --task translate`) ------------------------------------

def main_translation():
    """JOB {"conf", "train": [[src ids, tgt ids], ...], "val": [src ids, ...], "test": [src ids, ...],
    "vocab": {"src": [token, ...], "tgt": [...]}, "max_out"}: train for conf["minutes"], printing
    `VALIDATION <json>` lines (the token ids greedy decoding wrote for the validation sources; the parent
    scores them), then decode the test sources. Ids only: the course's tokenizer runs in the parent."""
    c = CONF
    torch.manual_seed(c["seed"])
    vocab, max_out = JOB["vocab"], JOB["max_out"]
    pad, bos, eos = 0, 1, 2
    train, val, test = JOB["train"], JOB["val"], JOB["test"]
    try:
        model = Transformer(len(vocab["src"]), len(vocab["tgt"]), d_model=c["d_model"], num_heads=c["heads"],
                            num_layers=c["layers"], d_ff=c["d_ff"], dropout=c["dropout"], max_len=256)
        optimizer, scheduler = make_optimizer(model, c["d_model"], c["warmup"], c["factor"])
    except Exception as e:
        fail("model", e)
    gen = torch.Generator().manual_seed(c["seed"])
    budget = 60.0 * c["minutes"]
    t0, cpu0 = time.monotonic(), time.process_time()
    next_eval = c["eval_seconds"]
    tokens_seen, step, last_loss = 0, 0, float("nan")

    def greedy_ids(sources, how="greedy", beam=4, batch=250):
        outputs = []
        for i in range(0, len(sources), batch):
            chunk = sources[i:i + batch]
            b = make_batch(chunk, [[]] * len(chunk), pad, bos, eos)
            args = (model, b["src"], b["src_mask"], max_out, bos, eos, pad)
            if how == "beam":
                out = decoding.beam_search(*args, beam_size=beam)[0]
            elif how == "cached":
                out = decoding.greedy_decode_cached(*args)
            else:
                out = decoding.greedy_decode(*args) if decoding is not None else greedy(*args)
            outputs += rows(out, eos, max_out + 2)
        return outputs

    while True:
        elapsed = time.monotonic() - t0
        if elapsed >= budget or (c.get("steps") and step >= c["steps"]):
            break
        step += 1
        idx = torch.randint(len(train), (c["batch"],), generator=gen).tolist()
        try:
            batch = make_batch([train[i][0] for i in idx], [train[i][1] for i in idx], pad, bos, eos)
            last_loss = float(train_step(model, batch, optimizer, pad, scheduler, c["smoothing"], c["clip"]))
        except Exception as e:
            fail("training", e)
        if not math.isfinite(last_loss):
            print("ERROR " + json.dumps({"stage": "training", "type": "NonFiniteLoss", "message":
                                          f"the training loss became {last_loss} at step {step}",
                                          "file": "training.py", "line": None, "code": ""}), flush=True)
            sys.exit(1)
        tokens_seen += int((batch["tgt_out"] != pad).sum())
        elapsed = time.monotonic() - t0
        if step % 5 == 0:
            print("PROGRESS " + json.dumps({"step": step, "loss": last_loss, "elapsed": elapsed, "budget": budget,
                                            "tok_s": tokens_seen / max(elapsed, 1e-9)}), flush=True)
        if elapsed >= next_eval and elapsed < budget:
            next_eval = elapsed + c["eval_seconds"]
            try:
                ids = greedy_ids(val)
            except Exception as e:
                fail("evaluation", e)
            print("VALIDATION " + json.dumps({"step": step, "elapsed": elapsed, "cpu": time.process_time() - cpu0,
                                              "ids": ids}), flush=True)
    train_s = time.monotonic() - t0
    try:
        t_dec = time.monotonic()
        result = {"steps": step, "train_seconds": round(train_s, 1), "loss": last_loss,
                  "cpu_seconds": round(time.process_time() - cpu0, 1),
                  "decoding": "decoding.py" if decoding is not None else "the course's greedy",
                  "val": {"step": step, "ids": greedy_ids(val)}}
        result["seconds"] = {"validation": round(time.monotonic() - t_dec, 2)}
        t_dec = time.monotonic()
        result["greedy"] = greedy_ids(test)
        result["seconds"]["greedy"] = round(time.monotonic() - t_dec, 2)
        if decoding is not None and c.get("beam"):
            t_dec = time.monotonic()
            result["beam"] = greedy_ids(test, "beam", c["beam"], batch=100)
            result["seconds"]["beam"] = round(time.monotonic() - t_dec, 2)
        if decoding is not None and hasattr(decoding, "greedy_decode_cached"):
            t_dec = time.monotonic()
            result["cached"] = greedy_ids(test, "cached")
            result["seconds"]["cached"] = round(time.monotonic() - t_dec, 2)
        if decoding is not None and hasattr(decoding, "sample_decode"):
            b = make_batch(test[:3], [[]] * 3, pad, bos, eos)
            result["temperature"] = {}
            for temp in (0.5, 1.0, 1.5):
                out = decoding.sample_decode(model, b["src"], b["src_mask"], max_out, bos, eos, pad,
                                             temperature=temp, generator=torch.Generator().manual_seed(0))
                result["temperature"][str(temp)] = rows(out, eos, max_out + 2)
    except Exception as e:
        fail("decoding", e)
    # Tensors and plain values only: `course translate` loads it with weights_only=True.
    torch.save({"state_dict": {k: v.detach().clone() for k, v in model.state_dict().items()},
                "config": {k: v for k, v in c.items()},
                "vocab": {"src": [str(t) for t in vocab["src"]], "tgt": [str(t) for t in vocab["tgt"]]}},
               os.path.join(OUT, "model.pt"))
    result["attention_png"] = _attention_words(model, vocab, test[:3], result["greedy"][:3], max_out,
                                               os.path.join(OUT, "attention.png"))
    write_json("result.json", result)


@_picture
def _attention_words(model, vocab, sources, outputs, max_len, path):
    """Heatmaps of the last decoder layer's cross-attention (mean over heads) for a few real sentences,
    re-running the model on the tokens it wrote. Returns a sentence saying what was saved."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from attention import causal_mask
    model.eval()
    fig, axes = plt.subplots(1, len(sources), figsize=(4.2 * len(sources), 4.2), squeeze=False)
    for ax, src, out in zip(axes[0], sources, outputs):
        out = [i for i in out if i not in (0, 1)]
        ys = torch.tensor([[1] + out[:-1] if out and out[-1] == 2 else [1] + out])
        b = make_batch([src], [[]], 0, 1, 2)
        with torch.no_grad():
            model(b["src"], ys, b["src_mask"], causal_mask(ys.size(1)))
        w = getattr(model.decoder.layers[-1].cross_attn, "attn_weights", None)
        if not isinstance(w, torch.Tensor) or w.dim() != 4:
            plt.close(fig)
            return "not saved: MultiHeadAttention keeps no attn_weights [B, H, Lq, Lk] after forward"
        src_t = [vocab["src"][i] if i < len(vocab["src"]) else "<unk>" for i in src]
        out_t = [vocab["tgt"][i] if i < len(vocab["tgt"]) else "<unk>" for i in out]
        ax.imshow(w[0].float().mean(0)[: len(out_t), : len(src_t)].numpy(), cmap="viridis", vmin=0, vmax=1)
        ax.set_xticks(range(len(src_t)), src_t, fontsize=8, rotation=60)
        ax.set_yticks(range(len(out_t)), out_t, fontsize=8)
    _save_figure(plt, fig, path, "cross-attention of the last decoder layer (mean over heads) on test sentences")
    return f"saved for {len(sources)} test sentences"


def translate_words(ck):
    """A checkpoint of `course train --task translate`: JOB["pieces"] (one token list per sentence, made by
    the course's tokenizer in the parent) -> the ids decoded for each, and the target vocabulary."""
    c, vocab = ck["config"], ck["vocab"]
    stoi = {t: i for i, t in enumerate(vocab["src"])}
    model = Transformer(len(vocab["src"]), len(vocab["tgt"]), d_model=c["d_model"], num_heads=c["heads"],
                        num_layers=c["layers"], d_ff=c["d_ff"], dropout=0.0, max_len=256)
    model.load_state_dict(ck["state_dict"])
    sources = [[stoi.get(t, 3) for t in p][:200] or [3] for p in JOB["pieces"]]
    if JOB.get("beam") and decoding is None:
        raise RuntimeError("--beam needs decoding.py (milestone 6)")
    ids = []
    for i in range(0, len(sources), 64):
        b = make_batch(sources[i:i + 64], [[]] * len(sources[i:i + 64]), 0, 1, 2)
        max_len = min(2 * b["src"].size(1) + 10, 250)
        args = (model, b["src"], b["src_mask"], max_len, 1, 2, 0)
        if JOB.get("beam"):
            out = decoding.beam_search(*args, beam_size=JOB["beam"])[0]
        else:
            out = decoding.greedy_decode(*args) if decoding is not None else greedy(*args)
        ids += rows(out, 2, max_len + 2)
    return {"ids": ids, "vocab": [str(t) for t in vocab["tgt"]]}


if __name__ == "__main__":
    if "translate" in JOB:
        translate()
    elif CONF.get("task") == "translate":
        main_translation()
    else:
        main()
