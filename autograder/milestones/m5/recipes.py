"""Milestone 5's recipes: code the judge sends to the worker as source, to run beside the student's
training.py (the tokenizer, make_optimizer, train_step, evaluate, learning on the course's reference
Transformer). Each recipe imports what it needs itself; only tensors and plain values come back. And
WORKER_PRELOAD: the modules the worker's fork server must import first (read through checks.py by
grade.worker_preload)."""
from __future__ import annotations

# A first optimizer step imports torch's compiler (dynamo), which the fork server skips unless asked: these
# checks step optimizers in the worker.
WORKER_PRELOAD = ("torch._dynamo",)


# ---- recipes: run in the worker, beside the student's code (only their source is sent) -----------

def recipe_tokenizer(texts, probes):
    """A lookup error of encode is returned as {"error": type, "message": text} for that probe, so the check can
    say which call raised it and why."""
    import training
    tok = training.CharTokenizer(texts)
    out = {name: getattr(tok, name, None) for name in ("pad_id", "bos_id", "eos_id", "unk_id", "vocab_size")}
    out["encoded"] = []
    for p in probes:
        try:
            out["encoded"].append(tok.encode(p))
        except (KeyError, ValueError, IndexError) as e:
            out["encoded"].append({"error": type(e).__name__, "message": str(e)})
    return out


def recipe_decode(texts, id_lists):
    import training
    tok = training.CharTokenizer(texts)
    out = []
    for ids in id_lists:
        try:
            out.append(tok.decode(ids))
        except (KeyError, ValueError, IndexError) as e:
            out.append({"error": type(e).__name__, "message": str(e)})
    return out


def recipe_optimizer(d_model, warmup, factor, steps):
    import torch
    import training
    model = torch.nn.Linear(3, 2)
    opt, sched = training.make_optimizer(model, d_model, warmup, factor)
    group = opt.param_groups[0]
    out = {"type": type(opt).__name__, "betas": list(group.get("betas", ())), "eps": group.get("eps"),
           "base_lr": group.get("initial_lr", group.get("lr")), "same_params": len(group["params"]) == 2,
           "scheduler": type(sched).__name__, "lrs": [group["lr"]]}
    for _ in range(steps):
        opt.step()
        sched.step()
        out["lrs"].append(group["lr"])
    return out


def recipe_train(params, table, vocab, layers, batches, steps, optimizer, smoothing, clip_norm, warmup,
                 stale_grads=False, dropout=0.0, start_eval=True, pad_id=0, dtype="float64"):
    """The student's train_step on the reference Transformer with the judge's weights (in `dtype`); the
    parameters after each step, the gradients left after the last one (None as zeros) and the modes after."""
    import torch
    import training
    from model import Transformer
    model = Transformer(vocab, vocab, d_model=8, num_heads=2, num_layers=layers, d_ff=16, dropout=dropout,
                        max_len=table.size(0)).to(getattr(torch, dtype))
    with torch.no_grad():
        own = dict(model.named_parameters())
        for k, v in params.items():
            own[k].copy_(v)
        model.pos_encoding.pe.copy_(table)
    if optimizer == "sgd":
        opt, sched = torch.optim.SGD(model.parameters(), lr=0.1), None
    else:
        opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.05 * min(max(s, 1) ** -0.5, max(s, 1) * warmup ** -1.5))
    if stale_grads:
        for p in model.parameters():
            p.grad = torch.full_like(p, 0.5)
    if start_eval:
        model.eval()
    returned, snapshots = [], []
    for i in range(steps):
        value = training.train_step(model, batches[i % len(batches)], opt, pad_id, sched, smoothing, clip_norm)
        returned.append(value if isinstance(value, float) else
                        {"type": type(value).__name__, "requires_grad": bool(getattr(value, "requires_grad", False))})
        snapshots.append({k: v.detach().clone() for k, v in model.named_parameters()})
    if snapshots:
        snapshots[-1].update({"grad:" + k: torch.zeros_like(v) if v.grad is None else v.grad.detach().clone()
                              for k, v in model.named_parameters()})
    return {"returned": returned, "params": snapshots, "training": model.training,
            "modes": [m.training for m in model.modules()], "lr": opt.param_groups[0]["lr"]}


def recipe_evaluate(params, table, vocab, batches, dropout, mode, pad_id=0):
    import torch
    import training
    from model import Transformer
    model = Transformer(vocab, vocab, d_model=8, num_heads=2, num_layers=1, d_ff=16, dropout=dropout,
                        max_len=table.size(0)).double()
    with torch.no_grad():
        own = dict(model.named_parameters())
        for k, v in params.items():
            own[k].copy_(v)
        model.pos_encoding.pe.copy_(table)
    model.train(mode == "train")
    # Nothing on the model watches it (no hook: code could behave only when watched): whether it ran with
    # dropout on or built autograd graphs is read from the grader's ledger (dropout ops, ops that recorded a
    # gradient), its modes after the call from the modules themselves.
    value = training.evaluate(model, batches, pad_id)
    return {"value": value if isinstance(value, float) else {"type": type(value).__name__},
            "modes_after": [m.training for m in model.modules()]}


def recipe_learn(batch, vocab, steps, seed, table):
    """Train a fresh model with the student's optimizer and train_step; only the weights come back (the
    judge measures the loss itself, with its own model: evaluate and train_step's returns are not trusted)."""
    import torch
    import training
    from model import Transformer
    torch.manual_seed(seed)
    model = Transformer(vocab, vocab, d_model=8, num_heads=2, num_layers=1, d_ff=16, dropout=0.0,
                        max_len=table.size(0))
    with torch.no_grad():
        model.pos_encoding.pe.copy_(table)
    first = {k: v.detach().clone() for k, v in model.named_parameters()}
    opt, sched = training.make_optimizer(model, 8, 8, 1.0)
    for _ in range(steps):
        training.train_step(model, batch, opt, 0, sched)
    return {"first": first, "final": {k: v.detach().clone() for k, v in model.named_parameters()}}
