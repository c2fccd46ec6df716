"""Train a Transformer assembled from a folder of course modules; never imported by the grader.

    python -I -B trainrun.py FOLDER OUT CONFIG_JSON

FOLDER holds attention.py, multihead.py, blocks.py, model.py, training.py, data.py (and decoding.py
when the course or the student has it): the course's references, or a student's own files. Like the
grading worker, this script imports nothing from the course package, so the modules are exactly the
files in FOLDER. It prints progress lines and, at the end, one line `RESULT <json>`; it writes
OUT/model.pt (weights, configuration, vocabulary), OUT/training.png (loss and learning rate) and
OUT/summary.json. A crash inside a module is reported as `ERROR <json>` naming the file and line.
"""
import json
import math
import os
import sys
import time
import traceback

FOLDER, OUT = os.path.realpath(sys.argv[1]), os.path.realpath(sys.argv[2])
CONF = json.loads(sys.argv[3])
sys.path.insert(0, FOLDER)


def fail(stage, exc):
    """Report an exception by the course module (file and line) it came from, and stop."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if os.path.dirname(os.path.realpath(f.filename)) == FOLDER]
    where = frames[-1] if frames else None
    print("ERROR " + json.dumps({
        "stage": stage, "type": type(exc).__name__, "message": str(exc)[:500],
        "file": os.path.basename(where.filename) if where else None, "line": where.lineno if where else None,
        "code": (where.line or "") if where else ""}), flush=True)
    sys.exit(1)


try:
    import torch
    from data import make_task
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


def exact_match(model, pairs, tok, max_len, how="greedy", beam=4, batch=256):
    """Share of pairs whose decoded output equals the target, a few (source, target, output) samples, and
    the outputs themselves."""
    hits, samples, outputs = 0, [], []
    for i in range(0, len(pairs), batch):
        chunk = pairs[i:i + batch]
        b = make_batch([s for s, _ in chunk], [t for _, t in chunk], tok.pad_id, tok.bos_id, tok.eos_id)
        for (s, t), row in zip(chunk, decode_batch(model, b, tok, max_len, how, beam)):
            got = tok.decode(row)
            outputs.append(got)
            hits += got == tok.decode(t)
            if len(samples) < 6:
                samples.append((tok.decode(s), tok.decode(t), got))
    return hits / max(1, len(pairs)), samples, outputs


def main():
    c = CONF
    torch.manual_seed(c["seed"])
    stage = "data"
    try:
        opts = {} if c["task"] == "dates" else {"min_len": 1, "max_len": c["seq_len"]}
        splits = make_task(c["task"], c["n_train"], c["n_val"], c["n_test"], seed=c["seed"], **opts)
        stage = "tokenizer"
        tok = CharTokenizer([s for pair in splits.train for s in pair])
        enc = lambda pairs: [(tok.encode(s), tok.encode(t)) for s, t in pairs]  # noqa: E731
        train, val, test = enc(splits.train), enc(splits.val), enc(splits.test)
        max_out = max(len(t) for _, t in train + val + test) + 2
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
                em, _, _ = exact_match(model, val, tok, max_out)
                val_loss = evaluate(model, [make_batch([s for s, _ in val[:256]], [t for _, t in val[:256]],
                                                        tok.pad_id, tok.bos_id, tok.eos_id)], tok.pad_id)
            except Exception as e:
                fail("evaluation", e)
            evals.append((step, em, val_loss))
            if best is None or em > best[1]:     # keep the best weights so far (accuracy oscillates late in training)
                best = (step, em, {k: v.detach().clone() for k, v in model.state_dict().items()})
            elapsed = time.monotonic() - t0
            print(f"PROGRESS {json.dumps({'step': step, 'steps': c['steps'], 'loss': float(loss), 'val_em': em, 'val_loss': val_loss, 'tok_s': tokens_seen / max(elapsed, 1e-9), 'elapsed': elapsed})}", flush=True)
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
        em, samples, greedy_out = exact_match(model, test, tok, max_out)
        result = {"task": c["task"], "steps": step, "best_step": best[0] if best else step,
                  "train_seconds": round(train_s, 1), "test_size": len(test),
                  "exact_match_greedy": em, "samples": samples, "val": evals,
                  "decoding": "decoding.py" if decoding is not None else "the course's greedy",
                  "seconds": {"greedy": round(time.monotonic() - t_dec, 2)}}
        if decoding is not None and c.get("beam"):
            t_dec = time.monotonic()
            result["beam"] = c["beam"]
            result["exact_match_beam"], _, _ = exact_match(model, test, tok, max_out, how="beam", beam=c["beam"])
            result["seconds"]["beam"] = round(time.monotonic() - t_dec, 2)
        if decoding is not None and hasattr(decoding, "greedy_decode_cached"):
            t_dec = time.monotonic()
            result["exact_match_cached"], _, cached_out = exact_match(model, test, tok, max_out, how="cached")
            result["seconds"]["cached"] = round(time.monotonic() - t_dec, 2)
            result["cached_same_as_greedy"] = sum(a == b for a, b in zip(cached_out, greedy_out))
        if decoding is not None and hasattr(decoding, "sample_decode"):
            b = make_batch([s for s, _ in test[:3]], [t for _, t in test[:3]], tok.pad_id, tok.bos_id, tok.eos_id)
            result["temperature_samples"] = {}
            for temp in (0.5, 1.0, 1.5):
                out = decoding.sample_decode(model, b["src"], b["src_mask"], max_out, tok.bos_id, tok.eos_id, tok.pad_id,
                                             temperature=temp, generator=torch.Generator().manual_seed(0))
                result["temperature_samples"][str(temp)] = [tok.decode(row) for row in out]
    except Exception as e:
        fail("decoding", e)
    os.makedirs(OUT, exist_ok=True)
    chars = "".join(tok.decode([i]) for i in range(4, tok.vocab_size))     # rebuilds the same vocabulary
    torch.save({"state_dict": model.state_dict(), "config": c, "texts": [chars]}, os.path.join(OUT, "model.pt"))
    _plot(history, evals, os.path.join(OUT, "training.png"))
    result["attention_png"] = _attention(model, tok, splits.test[0][0], max_out, os.path.join(OUT, "attention.png"))
    with open(os.path.join(OUT, "summary.json"), "w") as f:
        json.dump(result, f, indent=2)
    print("RESULT " + json.dumps(result), flush=True)


def translate():
    """CONF {"translate": text, "checkpoint": path}: print the greedy decoding of `text`."""
    try:
        ck = torch.load(CONF["checkpoint"], weights_only=False)
        c = ck["config"]
        tok = CharTokenizer(ck["texts"])
        model = Transformer(tok.vocab_size, tok.vocab_size, d_model=c["d_model"], num_heads=c["heads"],
                            num_layers=c["layers"], d_ff=c["d_ff"], dropout=0.0, max_len=64)
        model.load_state_dict(ck["state_dict"])
        b = make_batch([tok.encode(CONF["translate"])], [[]], tok.pad_id, tok.bos_id, tok.eos_id)
        if CONF.get("beam") and decoding is None:
            raise RuntimeError("--beam needs decoding.py (milestone 6)")
        out = decode_batch(model, b, tok, 40, "beam" if CONF.get("beam") else "greedy", CONF.get("beam") or 4)
    except Exception as e:
        fail("translate", e)
    print("RESULT " + json.dumps({"output": tok.decode(out[0])}), flush=True)


def _attention(model, tok, text, max_len, path):
    """Heatmaps of the decoder's cross-attention (one row per layer, one column per head) while it writes
    its own greedy output for `text`. Returns a sentence saying what was saved."""
    try:
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
        fig.suptitle(f"cross-attention while writing {tok.decode(out[0])!r} from {text!r}", fontsize=9)
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return f"saved for {text!r}"
    except Exception as e:        # a picture must never cost the run
        return f"not saved: {type(e).__name__}: {e}"[:200]


def _plot(history, evals, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
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
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    translate() if "translate" in CONF else main()
