"""Public tests for milestone 5. Run `pytest -q` in this folder (about 2.3 s cold on 2 cores
measured with the reference files; several times that while other jobs share the machine).

A useful subset of the grader's checks, each compared with PyTorch's own functions: the tokenizer, batches
and masks (also with special ids other than 0, 1, 2), the loss against F.cross_entropy (value, gradient,
dtype, padding, a pad_id that is not a class, large logits, no forbidden function, no loop), the schedule and
the optimizer's settings, what train_step does in which order (seen by a recording optimizer: the gradients it
steps on, clipping, the scheduler after the optimizer), evaluate's token-weighted loss and modes, and a tiny model overfitting
one batch. No model is trained in a fixture. A failing test names the hidden check group that checks the same
thing (testkit.py). One mistake is charged once, where it is; the hidden checks go further (more shapes and ids, Adam steps compared exactly, ...).

(PYTEST_DONT_REWRITE: that marker keeps pytest from expanding each failed expression, so a failure prints
its own message only.)
"""
import copy
import fnmatch
import math

import pytest
import torch
import torch.nn.functional as F

from model import Transformer
import training as _training
from testkit import FORBIDDEN, TorchCalls, cause, group, guarded
from training import CharTokenizer

# Your code, called as usual; a call that raises fails its test with one sentence naming the call and its inputs.
(evaluate, label_smoothed_cross_entropy, make_batch, make_optimizer, noam_lr, train_step) = (guarded(getattr(
    _training, name)) for name in ("evaluate", "label_smoothed_cross_entropy", "make_batch", "make_optimizer",
                                   "noam_lr", "train_step"))
for _name in ("__init__", "encode", "decode"):
    setattr(CharTokenizer, _name, guarded(vars(CharTokenizer)[_name]))

torch.set_num_threads(1)   # tiny tensors: one thread is fastest, and stays fast while other jobs share the cores
PAD, BOS, EOS = 0, 1, 2


def _hand_batch(src, tgt_in, tgt_out, pad=PAD):
    """A batch built without make_batch, so these tests do not depend on it."""
    src, tgt_in, tgt_out = (torch.tensor(t, dtype=torch.long) for t in (src, tgt_in, tgt_out))
    Lt = tgt_in.size(1)
    return {"src": src, "tgt_in": tgt_in, "tgt_out": tgt_out, "src_mask": (src != pad)[:, None, :],
            "tgt_mask": torch.ones(Lt, Lt, dtype=torch.bool).tril() & (tgt_in != pad)[:, None, :]}


def _small_model(vocab=9, dropout=0.0, seed=0, double=False):
    torch.manual_seed(seed)
    model = Transformer(vocab, vocab, d_model=16, num_heads=2, num_layers=1, d_ff=32, dropout=dropout, max_len=32)
    return model.double() if double else model


def _forward_log(model):
    """Records (training, torch.is_grad_enabled()) each time model.generator runs (every way of computing logits)."""
    seen = []
    model.generator.register_forward_pre_hook(lambda module, args: seen.append((module.training, torch.is_grad_enabled())))
    return seen


# ----------------------------------------------------------------------------------- tokenizer

def test_tokenizer_vocabulary():
    tok = CharTokenizer(["ba", "ab!"])
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.unk_id) == (0, 1, 2, 3), (
        f"the special ids should be pad 0, bos 1, eos 2, unk 3 [{group('tokenizer')}]")
    assert tok.vocab_size == 7, (
        f"4 special tokens + 3 characters ('!', 'a', 'b') = 7, got vocab_size {tok.vocab_size} [{group('tokenizer')}]")
    assert tok.encode("ab!") == [5, 6, 4], (
        f"characters get ids 4, 5, ... in sorted order: '!'=4, 'a'=5, 'b'=6; got {tok.encode('ab!')} [{group('tokenizer')}]")
    assert tok.encode("a?") == [5, 3], f"an unknown character should be encoded as unk_id (3) [{group('tokenizer')}]"
    texts = ["the quick brown fox", "JUMPS over 12 lazy dogs!", "zyx"]
    tok = CharTokenizer(texts)
    chars = sorted(set("".join(texts)))
    want = [4 + chars.index(c) for c in "fox 12 JS!"]
    got = tok.encode("fox 12 JS!")
    assert got == want, (
        f"ids 4, 5, ... follow Python's sorted() of the distinct characters ({''.join(chars)!r}): encode('fox 12 JS!') "
        f"should be {want}, got {got} [{group('tokenizer')}]")
    assert tok.vocab_size == 4 + len(chars), f"vocab_size should be 4 + {len(chars)} distinct characters [{group('tokenizer')}]"


def test_tokenizer_decode():
    tok = CharTokenizer(["ab"])                                        # 'a' = 4, 'b' = 5
    assert tok.decode([1, 4, 0, 5, 2, 4]) == "ab", (
        f"decode should skip <bos> and <pad> and stop at the first <eos> [{group('tokenizer')}]")
    assert tok.decode([4, 3, 5]) == "a<unk>b", f"unk_id should be written as the five characters <unk> [{group('tokenizer')}]"
    assert tok.decode(tok.encode("baab")) == "baab", f"decode(encode(text)) should give the text back [{group('tokenizer')}]"
    got = tok.decode(torch.tensor([1, 5, 4, 0, 2, 5]))
    assert got == "ba", f"decode of a 1-D int tensor should work as for a list: 'ba', got {got!r} [{group('tokenizer')}]"


# ---------------------------------------------------------------------------------- make_batch

def test_make_batch_docstring_example():
    b = make_batch([[5, 6, 7], [8]], [[9], [10, 11]], pad_id=PAD, bos_id=BOS, eos_id=EOS)
    assert isinstance(b, dict), f"make_batch should return a dict, got {type(b).__name__} [{group('batches')}]"
    assert b["src"].tolist() == [[5, 6, 7], [8, 0, 0]], (
        f"src should be right-padded with pad_id, got {b['src'].tolist()} [{group('batches')}]")
    assert b["tgt_in"].tolist() == [[1, 9, 0], [1, 10, 11]], (
        f"tgt_in should be <bos> + target, padded; got {b['tgt_in'].tolist()} [{group('batches')}]")
    assert b["tgt_out"].tolist() == [[9, 2, 0], [10, 11, 2]], (
        f"tgt_out should be target + <eos>, padded; got {b['tgt_out'].tolist()} [{group('batches')}]")
    for key in ("src", "tgt_in", "tgt_out"):
        assert b[key].dtype == torch.int64, f"{key} should be int64, got {b[key].dtype} [{group('batches')}]"
    assert b["src_mask"].dtype == torch.bool and b["src_mask"].shape == (2, 1, 3), (
        f"src_mask should be bool [B, 1, Ls] = (2, 1, 3), got {b['src_mask'].dtype} {tuple(b['src_mask'].shape)} "
        f"[{group('batches')}]")
    assert b["src_mask"].tolist() == [[[True, True, True]], [[True, False, False]]], (
        f"src_mask: True at real source tokens [{group('batches')}]")
    assert b["tgt_mask"].dtype == torch.bool and b["tgt_mask"].shape == (2, 3, 3), (
        f"tgt_mask should be bool [B, Lt, Lt] = (2, 3, 3), got {b['tgt_mask'].dtype} {tuple(b['tgt_mask'].shape)} "
        f"[{group('batches')}]")
    want0 = [[True, False, False], [True, True, False], [True, True, False]]   # key 2 of item 0 is padding
    assert b["tgt_mask"][0].tolist() == want0, (
        f"tgt_mask[0] should be causal with the padded key blocked (padded query rows are not blocked): {want0}, got "
        f"{b['tgt_mask'][0].tolist()} [{group('batches')}]")
    assert b["tgt_mask"][1].tolist() == torch.ones(3, 3, dtype=torch.bool).tril().tolist(), (
        f"tgt_mask[1] should be causal [{group('batches')}]")


def test_make_batch_other_special_ids_and_inputs_untouched():
    # pad 4, bos 9, eos 8; id 0 is an ordinary token here
    src_ids, tgt_ids = [[0, 5], [6, 0, 7]], [[0], [5, 6, 0]]
    before = copy.deepcopy((src_ids, tgt_ids))
    b = make_batch(src_ids, tgt_ids, pad_id=4, bos_id=9, eos_id=8)
    assert (src_ids, tgt_ids) == before, (
        f"make_batch must not modify the lists it is given: they became {src_ids}, {tgt_ids} [{group('batches')}]")
    want = {"src": [[0, 5, 4], [6, 0, 7]], "tgt_in": [[9, 0, 4, 4], [9, 5, 6, 0]], "tgt_out": [[0, 8, 4, 4], [5, 6, 0, 8]]}
    for key, rows in want.items():
        assert b[key].tolist() == rows, (
            f"with pad_id=4, bos_id=9, eos_id=8 (0 is a real token), {key} should be {rows}, got {b[key].tolist()}: "
            f"use the ids given, not 0, 1, 2 [{group('batches')}]")
    assert b["src_mask"].tolist() == [[[True, True, False]], [[True, True, True]]], (
        f"src_mask should be True at every real token (0 included) and False at pad_id=4, got "
        f"{b['src_mask'].tolist()} [{group('batches')}]")
    keys0 = [True, True, False, False]
    want0 = [[j <= i and keys0[j] for j in range(4)] for i in range(4)]
    assert b["tgt_mask"].shape == (2, 4, 4) and b["tgt_mask"][0].tolist() == want0, (
        f"tgt_mask[0] should block the keys where tgt_in is pad_id=4 (not 0): {want0}, got {b['tgt_mask'][0].tolist()} "
        f"[{group('batches')}]")
    assert b["tgt_mask"][1].tolist() == torch.ones(4, 4, dtype=torch.bool).tril().tolist(), (
        f"tgt_mask[1] has no padding (its last token is the real token 0): causal only [{group('batches')}]")


# ------------------------------------------------------------------------------------------ loss

def _reference_loss(logits, target, smoothing, pad_id):
    V = logits.size(-1)
    kw = {} if pad_id is None else {"ignore_index": pad_id}
    return F.cross_entropy(logits.reshape(-1, V), target.reshape(-1), label_smoothing=smoothing, **kw)


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.3])
@pytest.mark.parametrize("pad_id", [0, 3, None])
def test_loss_value_and_gradient_match_cross_entropy(smoothing, pad_id):
    gen = torch.Generator().manual_seed(int(smoothing * 10) + (pad_id or 7))
    logits = torch.randn(3, 4, 6, dtype=torch.float64, generator=gen) * 3      # [B, Lt, V]
    target = torch.tensor([[3, 1, 0, 0], [5, 4, 2, 3], [0, 3, 3, 1]])          # 0 and 3 appear as targets
    saved = (logits.clone(), target.clone())
    x = logits.clone().requires_grad_(True)
    got = label_smoothed_cross_entropy(x, target, smoothing=smoothing, pad_id=pad_id)
    assert torch.equal(target, saved[1]) and torch.equal(x.detach(), saved[0]), (
        f"the loss must not modify its inputs (no in-place operations on logits or target) [{group('loss')}]")
    assert isinstance(got, torch.Tensor) and got.dim() == 0, (
        f"the loss should be a scalar (0-dim tensor), got {type(got).__name__} "
        f"{tuple(got.shape) if isinstance(got, torch.Tensor) else ''} [{group('loss')}]")
    y = logits.clone().requires_grad_(True)
    want = _reference_loss(y, target, smoothing, pad_id)
    ignored = "nothing ignored" if pad_id is None else f"targets equal to {pad_id} ignored"
    assert got.dtype == torch.float64 and torch.allclose(got.detach(), want.detach(), rtol=1e-10, atol=1e-12), (
        f"with smoothing={smoothing}, pad_id={pad_id} ({ignored}) the loss should equal F.cross_entropy(..., "
        f"label_smoothing={smoothing}" + ("" if pad_id is None else f", ignore_index={pad_id}") + f") = {want.item():.10f} "
        f"in float64, got {got.item():.10f} ({got.dtype}) [{group('loss')}]")
    assert got.requires_grad, f"the loss should be differentiable (no .item(), .detach() or numpy inside) [{group('loss')}]"
    got.backward()
    want.backward()
    assert torch.allclose(x.grad, y.grad, rtol=1e-8, atol=1e-12), (
        f"the gradient of the loss with respect to the logits should be F.cross_entropy's (largest difference "
        f"{(x.grad - y.grad).abs().max().item():.3g}): nothing on the way from the logits may be detached "
        f"[{group('loss')}]")


def test_loss_any_leading_shape_and_float32():
    gen = torch.Generator().manual_seed(5)
    for shape in [(7, 5), (2, 3, 2, 5)]:
        logits = torch.randn(*shape, generator=gen)                               # float32
        target = torch.randint(0, 5, shape[:-1], generator=gen)
        saved = logits.clone()
        got = label_smoothed_cross_entropy(logits, target, smoothing=0.2, pad_id=1)
        want = _reference_loss(logits.double(), target, 0.2, 1)
        assert torch.equal(logits, saved), (
            f"the loss must not modify the logits it is given (no in-place operations such as -= or masked_fill_) "
            f"[{group('loss')}]")
        assert got.dtype == torch.float32, f"float32 logits should give a float32 loss, got {got.dtype} [{group('loss')}]"
        assert got.shape == () and math.isclose(got.item(), want.item(), rel_tol=1e-5), (
            f"logits {shape}: expected {want.item():.6f}, got {got.item() if got.dim() == 0 else tuple(got.shape)} "
            f"[{group('loss')}]")


def test_loss_is_stable_and_nan_when_all_pad():
    # row 0 has logits near +1e4, row 1 near -1e4: only a per-row maximum (or logsumexp) keeps both finite
    logits = torch.tensor([[1e4, 0.0, -1e4], [-1e4, -1e4 + 1, -1e4 + 2], [0.0, 1e4, 1e4 - 1]])   # float32
    target = torch.tensor([1, 2, 2])
    got = label_smoothed_cross_entropy(logits, target, smoothing=0.1, pad_id=None)
    want = F.cross_entropy(logits.double(), target, label_smoothing=0.1)
    assert torch.isfinite(got), (
        f"logits of +-1e4 should give a finite loss, got {got.item()}: subtract each row's own maximum (or use "
        f"torch.logsumexp over the classes), not one maximum of the whole tensor [{group('loss')}]")
    assert math.isclose(got.item(), want.item(), rel_tol=1e-4), (
        f"expected {want.item():.4f}, got {got.item():.4f} [{group('loss')}]")
    all_pad = label_smoothed_cross_entropy(torch.randn(2, 5), torch.tensor([4, 4]), smoothing=0.1, pad_id=4)
    assert torch.isnan(all_pad), (
        f"like F.cross_entropy, the loss should be NaN when every target is pad (0 / 0), got {all_pad.item()} "
        f"[{group('loss')}]")


@pytest.mark.parametrize("pad_id", [-100, 6])
def test_loss_pad_id_that_is_not_a_class(pad_id):
    # pad_id need not be a class: -100 is F.cross_entropy's default ignore_index, 6 = V is one past the last class
    gen = torch.Generator().manual_seed(11)
    logits = torch.randn(2, 4, 6, dtype=torch.float64, generator=gen)          # V = 6: classes 0..5
    target = torch.tensor([[3, 1, pad_id, pad_id], [5, 0, 2, pad_id]])
    call = f"label_smoothed_cross_entropy(logits [2, 4, 6] float64, target, smoothing=0.1, pad_id={pad_id})"
    try:
        got = _training.label_smoothed_cross_entropy(logits, target, smoothing=0.1, pad_id=pad_id)
    except NotImplementedError:
        raise
    except Exception as e:
        pytest.fail(
            f"{call} raised {type(e).__name__}: {e}. Here target holds pad_id = {pad_id} at its 3 padded positions, "
            f"and {pad_id} is not a class (0..5). pad_id need not be a class: the loss equals F.cross_entropy(..., "
            f"ignore_index=pad_id), which takes any ignore_index (-100 is its default). A padded target must never "
            f"serve as an index (gather, indexing, one_hot, scatter): give those positions a safe index first, e.g. "
            f"torch.where(keep, target, 0); their cost is left out anyway [{group('loss')}]")
    want = _reference_loss(logits, target, 0.1, pad_id)
    assert isinstance(got, torch.Tensor) and got.dim() == 0 and torch.allclose(got.detach(), want, rtol=1e-10,
                                                                                atol=1e-12), (
        f"{call} should equal F.cross_entropy(..., ignore_index={pad_id}, label_smoothing=0.1) = {want.item():.10f}, "
        f"got {got.item() if isinstance(got, torch.Tensor) and got.numel() == 1 else got!r} [{group('loss')}]")
    assert torch.equal(target, torch.tensor([[3, 1, pad_id, pad_id], [5, 0, 2, pad_id]])), (
        f"{call} changed its target (the inputs are not modified: make the safe index out of place, "
        f"torch.where(keep, target, 0)) [{group('loss')}]")


@pytest.mark.parametrize("pad_id", [0, None])
def test_loss_from_scratch_and_no_loop(pad_id):
    names = {}
    for shape in [(2, 3), (5, 4), (6,), (24,)]:                  # [B, Lt] and [N] leading shapes
        logits = torch.randn(*shape, 7, requires_grad=True)
        target = torch.randint(0, 7, shape)
        with TorchCalls() as calls:
            label_smoothed_cross_entropy(logits, target, smoothing=0.1, pad_id=pad_id)
        names[shape] = calls.names
    for where, patterns, plain in FORBIDDEN:
        used = sorted({name for name in names[(2, 3)] for p in patterns if fnmatch.fnmatch(name, p)})
        assert not used, (
            f"{where} calls {used}: not allowed ({plain}). Use torch.logsumexp: log p = logits - logsumexp "
            f"[{group('from_scratch')}]")
    for small, large in [((2, 3), (5, 4)), ((6,), (24,))]:
        assert len(names[small]) == len(names[large]), (
            f"with pad_id={pad_id}, label_smoothed_cross_entropy made {len(names[small])} torch calls for logits of "
            f"leading shape {small} and {len(names[large])} for {large}: a Python loop over the batch or the positions; "
            f"compute on the whole tensor at once [{group('from_scratch')}]")


# -------------------------------------------------------------------------- schedule, optimizer

def test_noam_lr():
    assert math.isclose(noam_lr(4000, 512, 4000), 512 ** -0.5 * 4000 ** -0.5), (
        f"the peak is at step = warmup_steps [{group('schedule')}]")
    assert math.isclose(noam_lr(100, 512, 4000), 512 ** -0.5 * 100 * 4000 ** -1.5), (
        f"before warmup the lr grows linearly [{group('schedule')}]")
    assert math.isclose(noam_lr(10000, 512, 4000, factor=2.0), 2.0 * 512 ** -0.5 * 10000 ** -0.5), (
        f"after warmup: factor * d^-0.5 * step^-0.5 [{group('schedule')}]")
    assert math.isclose(noam_lr(10, 64, 100, factor=0.5), 0.5 * 64 ** -0.5 * 10 * 100 ** -1.5), (
        f"`factor` multiplies the whole learning rate [{group('schedule')}]")
    assert noam_lr(0, 512, 4000) == noam_lr(1, 512, 4000), (
        f"step 0 should be treated as step 1 [{group('schedule')}] {cause('noam_step_zero')}")


def test_make_optimizer():
    model = _small_model()
    optimizer, scheduler = make_optimizer(model, d_model=16, warmup_steps=10, factor=2.0)
    assert isinstance(optimizer, torch.optim.Adam), (
        f"expected torch.optim.Adam, got {type(optimizer).__name__} [{group('schedule')}]")
    group0 = optimizer.param_groups[0]
    assert group0["betas"] == (0.9, 0.98) and group0["eps"] == 1e-9, (
        f"Adam should use betas (0.9, 0.98) and eps 1e-9, got {group0['betas']} and {group0['eps']} [{group('schedule')}]")
    assert group0["weight_decay"] == 0 and not group0.get("amsgrad") and not group0.get("decoupled_weight_decay"), (
        f"plain Adam: no weight decay (AdamW's default is 0.01), no amsgrad; got weight_decay {group0['weight_decay']}, "
        f"amsgrad {group0.get('amsgrad')} [{group('schedule')}]")
    assert group0.get("initial_lr") == 1.0, (
        f"Adam's lr should be 1.0, so that LambdaLR's factor IS the learning rate; got a base lr of "
        f"{group0.get('initial_lr')} [{group('schedule')}]")
    given = {id(p) for g in optimizer.param_groups for p in g["params"]}
    assert given == {id(p) for p in model.parameters()}, (
        f"the optimizer should get every parameter of the model (model.parameters()): {len(given)} of "
        f"{len(list(model.parameters()))} [{group('schedule')}]")
    assert isinstance(scheduler, torch.optim.lr_scheduler.LambdaLR), (
        f"expected a torch.optim.lr_scheduler.LambdaLR, got {type(scheduler).__name__} [{group('schedule')}]")
    lrs = []
    for _ in range(15):
        lrs.append(group0["lr"])
        optimizer.step()
        scheduler.step()
    want = [noam_lr(s, 16, 10, 2.0) for s in range(15)]
    assert all(math.isclose(a, b) for a, b in zip(lrs, want)), (
        f"after s scheduler steps the lr should be noam_lr(s): {[round(w, 5) for w in want[:4]]}..., got "
        f"{[round(a, 5) for a in lrs[:4]]}... [{group('schedule')}]")


# ------------------------------------------------------------------------------------ train_step

class _RecordingSGD(torch.optim.SGD):
    """A real SGD that writes down, at each step(), the gradients it is about to use."""

    def __init__(self, params, events):
        super().__init__(params, lr=0.05)
        self.events, self.grads = events, []

    def step(self, closure=None):
        self.events.append("optimizer.step")
        self.grads.append([None if p.grad is None else p.grad.detach().clone()
                           for g in self.param_groups for p in g["params"]])
        return super().step(closure)


class _RecordingScheduler:
    def __init__(self, events):
        self.events = events

    def step(self):
        self.events.append("scheduler.step")


def _train_batch():
    # pad 3 (0 is an ordinary token here), bos 1, eos 2, V = 9
    return _hand_batch([[4, 0, 6], [7, 3, 3]], [[1, 6, 0, 4], [1, 7, 3, 3]], [[6, 0, 4, 2], [7, 2, 3, 3]], pad=3)


def _expected_step(model, batch, smoothing, clip_norm, pad):
    """The loss and the gradients one step should use, from F.cross_entropy and clip_grad_norm_ on a copy."""
    twin = copy.deepcopy(model).train()
    twin.generator._forward_pre_hooks.clear()
    logits = twin(batch["src"], batch["tgt_in"], batch["src_mask"], batch["tgt_mask"])
    loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), batch["tgt_out"].reshape(-1), ignore_index=pad,
                           label_smoothing=smoothing)
    loss.backward()
    if clip_norm is not None:
        torch.nn.utils.clip_grad_norm_(twin.parameters(), clip_norm)
    return loss.item(), [p.grad.clone() for p in twin.parameters()]


@pytest.mark.parametrize("clip_norm", [None, 0.05])
def test_train_step_steps_on_the_right_gradients(clip_norm):
    model = _small_model(double=True).eval()                             # train_step must switch to train mode
    seen = _forward_log(model)
    batch = _train_batch()
    events = []
    optimizer = _RecordingSGD(model.parameters(), events)
    scheduler = _RecordingScheduler(events)
    for step in range(2):
        want_loss, want_grads = _expected_step(model, batch, 0.1, clip_norm, pad=3)
        unclipped = _expected_step(model, batch, 0.1, None, pad=3)[1]
        for p in model.parameters():
            p.grad = torch.full_like(p, 0.5)                             # stale gradients: must not count
        seen.clear()
        loss = train_step(model, batch, optimizer, pad_id=3, scheduler=scheduler, smoothing=0.1, clip_norm=clip_norm)
        assert isinstance(loss, float), (
            f"train_step should return a Python float (loss.item()), got {type(loss).__name__} [{group('train_step')}]")
        assert math.isclose(loss, want_loss, rel_tol=1e-9), (
            f"train_step should return the smoothed loss over tgt_out (pad_id=3 ignored, 0 is a real token) before "
            f"the update: {want_loss:.8f}, got {loss:.8f} [{group('train_step')}]")
        assert seen and all(training for training, _ in seen), (
            f"the forward pass should run in train mode (model.train() first) [{group('train_step')}]")
        assert model.training, f"train_step should leave the model in training mode [{group('train_step')}]"
        order = events[2 * step:]
        assert order == ["optimizer.step", "scheduler.step"], (
            f"train_step should call optimizer.step() once and then scheduler.step() once, got {order} "
            f"[{group('train_step')}]" + (f" {cause('scheduler_before_optimizer')}" if order[:1] == ["scheduler.step"] else ""))
        got = optimizer.grads[step]
        names = [n for n, _ in model.named_parameters()]
        missing = [n for n, g in zip(names, got) if g is None]
        hint = (": call loss.backward() before optimizer.step(), and zero the gradients at the start (before the "
                "forward pass), never after backward()" if len(missing) == len(names) else "")
        assert not missing, (
            f"at optimizer.step() these parameters had no gradient: {missing[:4]}{hint} [{group('train_step')}]")
        bad = [n for n, g, w in zip(names, got, want_grads) if not torch.allclose(g, w, rtol=1e-5, atol=1e-9)]
        hint = ""
        if bad and clip_norm is not None and all(torch.allclose(g, w, rtol=1e-5, atol=1e-9) for g, w in
                                                 zip(got, unclipped)):
            hint = (": they are this batch's gradients unclipped (clip with torch.nn.utils.clip_grad_norm_("
                    "model.parameters(), clip_norm) between backward() and optimizer.step())")
        elif bad and all(torch.allclose(g, w + 0.5) for g, w in zip(got, want_grads)):
            hint = " " + cause("no_zero_grad")
        elif bad and all(not g.any() for g in got):
            hint = " " + cause("zero_grad_after_backward")
        assert not bad, (
            f"at optimizer.step() the gradients should be those of this batch's loss (F.cross_entropy with "
            f"label_smoothing=0.1, ignore_index=3{', clipped to a total norm of ' + str(clip_norm) if clip_norm else ''}), "
            f"zeroed first; they differ for {bad[:3]}{hint} [{group('train_step')}]")


def test_train_step_defaults():
    model = _small_model(double=True)
    batch = _hand_batch([[4, 5, 6], [7, 0, 0]], [[1, 6, 5, 4], [1, 7, 0, 0]], [[6, 5, 4, 2], [7, 2, 0, 0]])
    want_loss, _ = _expected_step(model, batch, 0.0, None, pad=0)
    loss = train_step(model, batch, torch.optim.SGD(model.parameters(), lr=0.1), PAD)
    assert math.isclose(loss, want_loss, rel_tol=1e-9), (
        f"train_step(model, batch, optimizer, pad_id) with no scheduler, smoothing 0 and no clipping should return "
        f"the plain cross-entropy {want_loss:.8f}, got {loss:.8f} [{group('train_step')}]")


# -------------------------------------------------------------------------------------- evaluate

def test_evaluate_weighs_tokens_and_restores_mode():
    model = _small_model(dropout=0.3, double=True)
    seen = _forward_log(model)
    pad = 3                                                              # 0 is an ordinary token here
    b1 = _hand_batch([[4, 0, 6]], [[1, 6, 0, 4]], [[6, 0, 4, 2]], pad=pad)                        # 4 target tokens
    b2 = _hand_batch([[7, 8], [4, 3]], [[1, 8, 7], [1, 4, 3]], [[8, 7, 2], [4, 2, 3]], pad=pad)   # 5 target tokens
    b3 = _hand_batch([[5, 5]], [[1, 3]], [[3, 3]], pad=pad)                                        # no target token
    model.eval()
    with torch.no_grad():
        nll = []
        for b in (b1, b2):
            logits = model(b["src"], b["tgt_in"], b["src_mask"], b["tgt_mask"])
            nll.append(F.cross_entropy(logits.reshape(-1, 9), b["tgt_out"].reshape(-1), ignore_index=pad, reduction="sum"))
    want = (sum(nll) / 9).item()
    for mode in (True, False):
        model.train(mode)
        seen.clear()
        got = evaluate(model, [b1, b3, b2], pad_id=pad)
        assert isinstance(got, float), f"evaluate should return a Python float, got {type(got).__name__} [{group('evaluate')}]"
        assert math.isclose(got, want, rel_tol=1e-9), (
            f"evaluate should return the unsmoothed cross-entropy per non-pad token over all batches, in eval mode "
            f"(pad_id=3 here, 0 is a real token; a batch with no target token adds nothing): sum over 9 tokens / 9 = "
            f"{want:.8f}, got {got:.8f} [{group('evaluate')}]")
        assert all(not training for training, _ in seen), (
            f"evaluate should run the model in eval mode (model.eval()) [{group('evaluate')}]")
        assert all(not grad for _, grad in seen), (
            f"evaluate should run without gradients (torch.no_grad()) [{group('evaluate')}]")
        assert model.training == mode, (
            f"evaluate was called in {'train' if mode else 'eval'} mode and should leave the model in that mode, "
            f"found it in {'train' if model.training else 'eval'} mode [{group('evaluate')}]")
    nothing = evaluate(model, [], pad_id=pad)
    assert isinstance(nothing, float) and math.isnan(nothing), (
        f"with no target token at all evaluate should return float('nan'), got {nothing!r} [{group('evaluate')}]")


# -------------------------------------------------------------------------------------- learning

def test_tiny_model_overfits_one_batch():
    model = _small_model(seed=1)
    optimizer, scheduler = make_optimizer(model, d_model=16, warmup_steps=10, factor=1.0)
    seqs = torch.randint(4, 9, (8, 4), generator=torch.Generator().manual_seed(1)).tolist()
    batch = _hand_batch(seqs, [[BOS] + s for s in seqs], [s + [EOS] for s in seqs])
    losses = [train_step(model, batch, optimizer, PAD, scheduler) for _ in range(30)]
    assert losses[-1] < 0.5 * losses[0], (
        f"30 steps of train_step with make_optimizer's Adam on one copy batch should at least halve the loss: "
        f"first {losses[0]:.3f}, last {losses[-1]:.3f} [{group('learning')}]")
