"""`course train --task translate` and `course translate` of its checkpoints: English -> French with the six files.

    course train --task translate [--from DIR] [--minutes N] --out runs/fr
    course translate runs/fr/model.pt "I am cold."          (greedy; --beam 4; no sentence: stdin lines)

The same confinement as the toy tasks (train.py's docstring): this process runs course code only. It
reads the shipped Tatoeba pairs, splits them by English sentence (translation.split), trains the
course's word tokenizer on the training split, and sends the child token ids only: the training pairs,
the validation and test SOURCES (never a French reference of them), and the two vocabularies (saved
with the checkpoint). The child (trainrun.py, in the sandbox) trains the student's modules for the
time budget, printing the ids greedy decoding wrote for the validation sources now and then, and at
the end writes the ids decoded for the test sources (greedy, beam, KV-cached, sampled).

Every figure is computed here, by sacrebleu, from those ids turned into text by the course's tokenizer:
validation BLEU on the progress bar, test BLEU and chrF (greedy and beam; every French translation of
a sentence is a reference), whether the KV-cached greedy wrote the same tokens. training.png (loss and
validation BLEU over time) is drawn here; attention.png and model.pt come from the child's private
folder (regular files, capped, never through a link), and summary.json is written here.
"""
from __future__ import annotations

import io
import json
import os
import sys
import time
from pathlib import Path

from autograder import config
from autograder.capstone import progress
from autograder.capstone import train as T
from autograder.capstone import translation as W

# The reference's settings, measured on 2 cores (README): d_model 128, 2+2 layers, 8 minutes of training.
DEFAULTS = {"task": "translate", "d_model": 128, "heads": 4, "layers": 2, "d_ff": 512, "dropout": 0.1,
            "batch": 128, "warmup": 400, "factor": 1.0, "smoothing": 0.1, "clip": None, "minutes": 8.0,
            "steps": None, "eval_seconds": 60.0, "n_val": 200, "n_test": 500, "max_chars": 40, "min_count": 2,
            "seed": 0, "threads": 2, "beam": 4}
MAX_OUT = 30                       # most tokens a decoded test translation may have (sentences of <= 40 chars)


def _job(conf: dict):
    splits = W.split(W.load_pairs(), n_val=conf["n_val"], n_test=conf["n_test"], max_chars=conf["max_chars"],
                     seed=conf["seed"])
    pairs = splits.pairs("train")
    tok = W.WordTokenizer.train([e for e, _ in pairs], [f for _, f in pairs], conf["min_count"])
    job = {"conf": conf, "train": [[tok.encode_src(e), tok.encode_tgt(f)] for e, f in pairs],
           "val": [tok.encode_src(e) for e, _ in splits.val], "test": [tok.encode_src(e) for e, _ in splits.test],
           "vocab": tok.to_json(), "max_out": MAX_OUT}
    return splits, tok, job


def _bar(p: dict, val_bleu) -> str:
    """The time budget is the bar: `course translate` trains for a fixed number of minutes."""
    extra = f"  val BLEU {val_bleu:.1f}" if val_bleu is not None else ""
    return progress.line(p["elapsed"], max(p["budget"], 1e-9), p["elapsed"],
                         f"step {p['step']}  loss {p['loss']:.3f}  {p['tok_s']:,.0f} tok/s{extra}")


def _plot(losses, vals, minutes) -> bytes | None:
    """training.png: the training loss and the validation BLEU against minutes of training."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    try:
        fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.5))
        if losses:
            a.plot([t / 60 for t, _ in losses], [x for _, x in losses], lw=0.8)
        a.set_xlabel("minutes")
        a.set_title("training loss (label-smoothed)")
        if vals:
            b.plot([v[1] / 60 for v in vals], [v[2] for v in vals], "o-")
        b.set_xlabel("minutes")
        b.set_xlim(0, minutes)
        b.set_title("validation BLEU (greedy, sacrebleu)")
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100)
        plt.close(fig)
        return buf.getvalue()
    except Exception:             # a picture must never cost the run
        return None


def train(course: config.Course, source: Path | None, out: Path, overrides: dict | None = None,
          stream=sys.stdout, unsafe: bool = False) -> dict:
    """Train the modules on English -> French in the sandbox for conf["minutes"]; figures computed here."""
    conf = {**DEFAULTS, **{k: v for k, v in (overrides or {}).items() if v is not None}}
    source = Path(source).resolve() if source else None
    iso = T._isolation(source, unsafe)
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.monotonic()
    splits, tok, job = _job(conf)
    val_refs, test_refs = W.references(splits.val), W.references(splits.test)
    ws = T._Workspace("course-translate-train-", iso.uid)
    try:
        origin = T.assemble(course, source, ws.modules)
        stream.write(f"Training a Transformer on English -> French ({len(job['train']):,} Tatoeba sentence pairs; "
                     f"word tokens: {len(tok.src):,} English, {len(tok.tgt):,} French) for {conf['minutes']:g} "
                     f"minutes with " + ", ".join(f"{f} ({o})" for f, o in origin.items()) + "\n")
        stream.write(f"Data: {W.ATTRIBUTION}.\n")
        if iso.note:
            stream.write(iso.note + "\n")
        live = getattr(stream, "isatty", lambda: False)()
        losses, vals, last = [], [], {}

        def progress(p):
            if not all(type(p.get(k)) in (int, float) for k in ("step", "loss", "tok_s", "elapsed", "budget")):
                return
            losses.append((float(p["elapsed"]), float(p["loss"])))
            last.update(p)
            if live:
                stream.write(_bar(p, vals[-1][2] if vals else None))
                stream.flush()

        def validation(v):
            try:
                ids = T._ids(v.get("ids"), len(splits.val), MAX_OUT + 2, "validation")
            except T.TrainError:
                return                   # not a validation line of ours: progress only, the result decides
            if not isinstance(v, dict):
                return
            step, elapsed = int(T._number(v.get("step"))), T._number(v.get("elapsed"))
            vals.append((step, elapsed, W.bleu([tok.translation(r) for r in ids], val_refs),
                         T._number(v.get("cpu"))))
            if not live and last:        # a log gets one line per validation
                stream.write(_bar(last, vals[-1][2]).strip("\r ") + "\n")
                stream.flush()

        run = T._run_child(ws, iso, job, progress, on_validation=validation)
        stream.write("\n")
        if run.error:
            e = run.error
            where = f"{e.get('file')}, line {e.get('line')}" if e.get("file") else "the course's code"
            code = f"\n    {str(e['code'])[:300]}" if e.get("code") else ""
            raise T.TrainError(f"Training stopped at the {str(e.get('stage'))[:40]} stage: {str(e.get('type'))[:80]} "
                               f"in {where}: {str(e.get('message'))[:500]}{code}")
        try:
            data = T._read_private(ws.out, "result.json", T.RESULT_BYTES) if run.returncode == 0 else None
            child = json.loads(data) if data else None
        except (T._Refused, ValueError) as e:
            raise T.TrainError(f"Training stopped without a readable result: {e}") from None
        if not isinstance(child, dict):
            raise T.TrainError(f"Training stopped without a result ({T._stopped_without_result(run)})")
        result = _score(child, conf, tok, splits, test_refs, val_refs, vals, losses)
        result["origin"] = origin
        result["wall_seconds"] = round(time.monotonic() - t_start, 1)
        out_fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            refused = [why for name in ("model.pt", "attention.png") if (why := T._copy_out(ws.out, out_fd, out, name))]
            if any(w.startswith("attention.png") for w in refused) and result["attention_png"].startswith("saved"):
                result["attention_png"] = "not saved: " + next(w for w in refused if w.startswith("attention.png"))
            if refused:
                result["not_copied"] = refused
            png = _plot(losses, vals, conf["minutes"])
            if png:
                T._write_out(out_fd, out, "training.png", png)
            T._write_out(out_fd, out, "summary.json", json.dumps(result, indent=2, ensure_ascii=False).encode())
        finally:
            os.close(out_fd)
    finally:
        ws.remove()
    return result


def _score(child, conf, tok, splits, test_refs, val_refs, vals, losses) -> dict:
    n = len(splits.test)
    greedy = [tok.translation(r) for r in T._ids(child.get("greedy"), n, MAX_OUT + 2, "greedy")]
    s = W.scores(greedy, splits.test, test_refs)
    steps = child.get("steps")
    seconds = child.get("seconds") if isinstance(child.get("seconds"), dict) else {}
    final_val = child.get("val") if isinstance(child.get("val"), dict) else {}
    val_ids = T._ids(final_val.get("ids"), len(splits.val), MAX_OUT + 2, "validation")
    val_curve = [list(v) for v in vals] + [[steps if type(steps) is int else 0,
                                            T._number(child.get("train_seconds")),
                                            W.bleu([tok.translation(r) for r in val_ids], val_refs),
                                            T._number(child.get("cpu_seconds"))]]
    result = {"task": "translate", "data": W.ATTRIBUTION, "minutes": conf["minutes"],
              "steps": steps if type(steps) is int and steps >= 0 else 0,
              "train_seconds": T._number(child.get("train_seconds")),
              "test_size": n, "test_references": sum(len(fs) for _, fs in splits.test),
              "train_pairs": len(splits.pairs("train")),
              "tokenizer": {"kind": "words and punctuation, lower-cased, min count " + str(conf["min_count"]),
                            "english": len(tok.src), "french": len(tok.tgt)},
              "bleu_greedy": s["bleu"], "chrf_greedy": s["chrf"],
              "bleu_signature": s["bleu_signature"], "chrf_signature": s["chrf_signature"],
              "val_bleu": val_curve,
              "loss": [[round(t, 1), round(x, 4)] for t, x in losses[:: max(1, len(losses) // 400)]],
              "samples": [[e, got, fs] for (e, fs), got in zip(splits.test[:8], greedy)],
              "decoding": child.get("decoding") if child.get("decoding") in ("decoding.py", "the course's greedy")
              else "decoding.py",
              "seconds": {k: T._number(seconds.get(k)) for k in ("greedy", "beam", "cached") if k in seconds}}
    if "beam" in child:
        beam = [tok.translation(r) for r in T._ids(child["beam"], n, MAX_OUT + 2, "beam")]
        b = W.scores(beam, splits.test, test_refs)
        result.update(beam=conf["beam"], bleu_beam=b["bleu"], chrf_beam=b["chrf"])
    if "cached" in child:
        cached = T._ids(child["cached"], n, MAX_OUT + 2, "KV-cached")
        greedy_ids = child["greedy"]
        result["cached_same_as_greedy"] = sum(a == b for a, b in zip(cached, greedy_ids))
        result["seconds"].setdefault("cached", 0.0)
        result["seconds"].setdefault("greedy", 0.0)
    if isinstance(child.get("temperature"), dict):
        result["temperature_source"] = splits.test[0][0]
        result["temperature_samples"] = {
            t: [tok.translation(r) for r in T._ids(child["temperature"].get(t), None, MAX_OUT + 2, "sampled")][:3]
            for t in ("0.5", "1.0", "1.5") if t in child["temperature"]}
    note = child.get("attention_png")
    result["attention_png"] = note[:200] if isinstance(note, str) else "not saved"
    return result


def report(result: dict, stream=sys.stdout) -> None:
    stream.write(f"Trained {result['steps']:,} steps in {result['train_seconds']:.0f} s on "
                 f"{result['train_pairs']:,} pairs; test set: {result['test_size']} English sentences never seen in "
                 f"training, scored against all {result['test_references']} of their French translations.\n")
    stream.write(f"BLEU (greedy): {result['bleu_greedy']:.1f}\n")
    stream.write(f"chrF (greedy): {result['chrf_greedy']:.1f}\n")
    if "bleu_beam" in result:
        stream.write(f"BLEU (beam {result['beam']}): {result['bleu_beam']:.1f}\n")
        stream.write(f"chrF (beam {result['beam']}): {result['chrf_beam']:.1f}\n")
    stream.write(f"sacrebleu signatures: BLEU {result['bleu_signature']}; chrF {result['chrf_signature']}\n")
    if "cached_same_as_greedy" in result:
        k, n = result["cached_same_as_greedy"], result["test_size"]
        stream.write(f"KV-cached greedy: {'identical' if k == n else 'DIFFERENT'} outputs on {k} of {n} test "
                     f"sentences ({result['seconds']['cached']:.1f} s vs {result['seconds']['greedy']:.1f} s "
                     f"uncached)\n")
    curve = ", ".join(f"{v[1] / 60:.1f} min {v[2]:.1f}" for v in result.get("val_bleu", []))
    if curve:
        stream.write(f"validation BLEU over time: {curve}\n")
    for en, got, refs in result["samples"][:5]:
        stream.write(f"  {en!r} -> {got!r}  (reference: {refs[0]!r})\n")
    if result.get("temperature_samples"):
        stream.write(f"  sampled for {result['temperature_source']!r}:\n")
        for temp, outs in result["temperature_samples"].items():
            stream.write(f"    temperature {temp}: {outs[0]!r}\n")
    stream.write(f"Attention heatmaps: {result.get('attention_png', 'not saved')}.\n")
    for why in result.get("not_copied", []):
        stream.write(f"Not copied to the output folder: {why}.\n")
    if result["bleu_greedy"] < 12 and result["steps"] >= 450:
        stream.write("This model translates poorly: the course's reference passes BLEU 12 within 450 steps (CI's "
                     "short run). Check train_step, the loss and make_batch with the public tests of milestone 5.\n")
    stream.write(f"Data: {result['data']}.\n")


def translate_lines(course: config.Course, checkpoint: Path, lines: list[str], source: Path | None = None,
                    beam: int | None = None, unsafe: bool = False) -> list[str]:
    """Translate `lines` with a checkpoint (any `course train` task): the child loads it weights_only in the
    sandbox and decodes ids; the course's tokenizer splits the input and turns the ids into text here."""
    source = Path(source).resolve() if source else None
    iso = T._isolation(source, unsafe)
    if iso.note and iso.uid is None:
        sys.stderr.write(iso.note + "\n")
    checkpoint = Path(checkpoint)
    ws = T._Workspace("course-translate-", iso.uid)
    try:
        T.assemble(course, source, ws.modules)
        try:
            with os.fdopen(os.open(checkpoint, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb") as f:
                if not T.stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                    raise T.TrainError(f"could not decode with {checkpoint}: not a regular file")
                data = f.read(T.CHECKPOINT_BYTES + 1)
        except OSError as e:
            raise T.TrainError(f"could not decode with {checkpoint}: {e.strerror}") from None
        if len(data) > T.CHECKPOINT_BYTES:
            raise T.TrainError(f"could not decode with {checkpoint}: larger than {T.CHECKPOINT_BYTES // 1024 ** 2} MB")
        (ws.modules / "model.pt").write_bytes(data)
        if not lines:
            return []
        job = {"conf": {"threads": 2}, "translate": lines[0], "lines": lines,
               "pieces": [W.pieces(t) for t in lines], "checkpoint": "model.pt", "beam": beam}
        run = T._run_child(ws, iso, job, timeout=T.TRANSLATE_SECONDS)
        if run.error:
            raise T.TrainError(f"could not decode with {checkpoint}: {str(run.error.get('type'))[:80]}: "
                               f"{str(run.error.get('message'))[:500]}")
        try:
            got = T._read_private(ws.out, "result.json", 64 * 1024 ** 2) if run.returncode == 0 else None
            got = json.loads(got) if got else None
        except (T._Refused, ValueError) as e:
            raise T.TrainError(f"could not decode with {checkpoint}: {e}") from None
        if not isinstance(got, dict):
            raise T.TrainError(f"could not decode with {checkpoint}: {T._stopped_without_result(run)[-500:]}")
        if "vocab" not in got:               # a checkpoint of a toy task: characters, one input
            texts = got.get("texts")
            if not (isinstance(texts, list) and all(isinstance(t, str) for t in texts)
                    and sum(map(len, texts)) < 10 ** 5):
                raise T.TrainError(f"could not decode with {checkpoint}: its vocabulary is not a list of texts")
            _, CharTokenizer = T.course_code(course)
            return [T._text(CharTokenizer(texts), T._ids([got.get("ids")], 1, 64, "decoded")[0])]
        vocab = got.get("vocab")
        if not (isinstance(vocab, list) and 4 <= len(vocab) < 10 ** 6 and vocab[:4] == list(W.SPECIALS)
                and all(isinstance(t, str) and len(t) < 200 for t in vocab)):
            raise T.TrainError(f"could not decode with {checkpoint}: its vocabulary is not a list of tokens")
        ids = T._ids(got.get("ids"), len(lines), 260, "decoded")
        tok = W.WordTokenizer(["x"], vocab[4:])
        return [tok.translation(r) for r in ids]
    finally:
        ws.remove()
