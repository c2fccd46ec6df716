"""Public tests for milestone 5. Run `pytest -q` in this folder.

A useful subset of the grader's checks: the tokenizer, batches and masks, the loss against
F.cross_entropy, the schedule, one training step, evaluation, and a tiny model learning to copy.
The hidden checks go further (more shapes, float32 stability, gradients, clipping, the order of the
steps inside train_step, modes, ...), and the grader trains a model on a toy task with your code.
"""
import math

import pytest
import torch
import torch.nn.functional as F

from model import Transformer
from training import (CharTokenizer, evaluate, label_smoothed_cross_entropy, make_batch, make_optimizer,
                      noam_lr, train_step)

torch.manual_seed(0)
torch.set_num_threads(1)   # tiny tensors: one thread is fastest, and stays fast while other jobs share the cores
PAD, BOS, EOS = 0, 1, 2


def _hand_batch(src, tgt_in, tgt_out):
    """A batch built without make_batch, so these tests do not depend on it."""
    src, tgt_in, tgt_out = (torch.tensor(t, dtype=torch.long) for t in (src, tgt_in, tgt_out))
    Lt = tgt_in.size(1)
    return {"src": src, "tgt_in": tgt_in, "tgt_out": tgt_out, "src_mask": (src != PAD)[:, None, :],
            "tgt_mask": torch.ones(Lt, Lt, dtype=torch.bool).tril() & (tgt_in != PAD)[:, None, :]}


def _small_model(vocab=9, dropout=0.0):
    return Transformer(vocab, vocab, d_model=16, num_heads=2, num_layers=1, d_ff=32, dropout=dropout, max_len=32)


# ----------------------------------------------------------------------------------- tokenizer

def test_tokenizer_vocabulary():
    tok = CharTokenizer(["ba", "ab!"])
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.unk_id) == (0, 1, 2, 3), (
        "the special ids should be pad 0, bos 1, eos 2, unk 3")
    assert tok.vocab_size == 7, f"4 special tokens + 3 characters ('!', 'a', 'b') = 7, got vocab_size {tok.vocab_size}"
    assert tok.encode("ab!") == [5, 6, 4], f"characters get ids 4, 5, ... in sorted order: '!'=4, 'a'=5, 'b'=6; got {tok.encode('ab!')}"
    assert tok.encode("a?") == [5, 3], "an unknown character should be encoded as unk_id (3)"


def test_tokenizer_decode():
    tok = CharTokenizer(["ab"])                                        # 'a' = 4, 'b' = 5
    assert tok.decode([1, 4, 0, 5, 2, 4]) == "ab", "decode should skip <bos> and <pad> and stop at the first <eos>"
    assert tok.decode([4, 3, 5]) == "a<unk>b", "unk_id should be written as the five characters <unk>"
    assert tok.decode(tok.encode("baab")) == "baab", "decode(encode(text)) should give the text back"


# ---------------------------------------------------------------------------------- make_batch

def test_make_batch_docstring_example():
    b = make_batch([[5, 6, 7], [8]], [[9], [10, 11]], pad_id=PAD, bos_id=BOS, eos_id=EOS)
    assert b["src"].tolist() == [[5, 6, 7], [8, 0, 0]], f"src should be right-padded with pad_id, got {b['src'].tolist()}"
    assert b["tgt_in"].tolist() == [[1, 9, 0], [1, 10, 11]], f"tgt_in should be <bos> + target, padded; got {b['tgt_in'].tolist()}"
    assert b["tgt_out"].tolist() == [[9, 2, 0], [10, 11, 2]], f"tgt_out should be target + <eos>, padded; got {b['tgt_out'].tolist()}"
    for key in ("src", "tgt_in", "tgt_out"):
        assert b[key].dtype == torch.int64, f"{key} should be int64, got {b[key].dtype}"
    assert b["src_mask"].dtype == torch.bool and b["src_mask"].shape == (2, 1, 3), (
        f"src_mask should be bool [B, 1, Ls] = (2, 1, 3), got {b['src_mask'].dtype} {tuple(b['src_mask'].shape)}")
    assert b["src_mask"].tolist() == [[[True, True, True]], [[True, False, False]]], "src_mask: True at real source tokens"
    assert b["tgt_mask"].dtype == torch.bool and b["tgt_mask"].shape == (2, 3, 3), (
        f"tgt_mask should be bool [B, Lt, Lt] = (2, 3, 3), got {b['tgt_mask'].dtype} {tuple(b['tgt_mask'].shape)}")
    want0 = [[True, False, False], [True, True, False], [True, True, False]]   # key 2 of item 0 is padding
    assert b["tgt_mask"][0].tolist() == want0, f"tgt_mask[0] should be causal with the padded key blocked: {want0}"
    assert b["tgt_mask"][1].tolist() == torch.ones(3, 3, dtype=torch.bool).tril().tolist(), "tgt_mask[1] should be causal"


# ------------------------------------------------------------------------------------------ loss

@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_loss_matches_cross_entropy(smoothing):
    logits = torch.randn(3, 4, 6, dtype=torch.float64)                 # [B, Lt, V]
    target = torch.tensor([[3, 1, 0, 0], [5, 4, 2, 0], [1, 1, 1, 1]])  # 0 = pad
    got = label_smoothed_cross_entropy(logits, target, smoothing=smoothing, pad_id=0)
    want = F.cross_entropy(logits.reshape(-1, 6), target.reshape(-1), ignore_index=0, label_smoothing=smoothing)
    assert got.dim() == 0, f"the loss should be a scalar (0-dim tensor), got shape {tuple(got.shape)}"
    assert torch.allclose(got, want), (
        f"with smoothing={smoothing}, pad_id=0 the loss should equal F.cross_entropy(..., ignore_index=0, "
        f"label_smoothing={smoothing}): {want.item():.6f}, got {got.item():.6f}")
    no_pad = label_smoothed_cross_entropy(logits, target, smoothing=smoothing, pad_id=None)
    want = F.cross_entropy(logits.reshape(-1, 6), target.reshape(-1), label_smoothing=smoothing)
    assert torch.allclose(no_pad, want), "with pad_id=None every position counts, id 0 included"


def test_loss_is_stable_and_nan_when_all_pad():
    logits = torch.tensor([[1e4, 0.0, -1e4], [0.0, 1e4, 1e4 - 1]])       # float32
    target = torch.tensor([1, 2])
    got = label_smoothed_cross_entropy(logits, target, smoothing=0.1, pad_id=None)
    want = F.cross_entropy(logits.double(), target, label_smoothing=0.1)
    assert torch.isfinite(got), f"logits of 1e4 should give a finite loss, got {got.item()} (use logsumexp)"
    assert math.isclose(got.item(), want.item(), rel_tol=1e-4), f"expected {want.item():.4f}, got {got.item():.4f}"
    all_pad = label_smoothed_cross_entropy(torch.randn(2, 5), torch.tensor([0, 0]), pad_id=0)
    assert torch.isnan(all_pad), "like F.cross_entropy, the loss should be NaN when every target is pad (0 / 0)"


# -------------------------------------------------------------------------- schedule, optimizer

def test_noam_lr():
    assert math.isclose(noam_lr(4000, 512, 4000), 512 ** -0.5 * 4000 ** -0.5), "the peak is at step = warmup_steps"
    assert math.isclose(noam_lr(100, 512, 4000), 512 ** -0.5 * 100 * 4000 ** -1.5), "before warmup the lr grows linearly"
    assert math.isclose(noam_lr(10000, 512, 4000, factor=2.0), 2.0 * 512 ** -0.5 * 10000 ** -0.5), "after warmup: factor * d^-0.5 * step^-0.5"
    assert noam_lr(0, 512, 4000) == noam_lr(1, 512, 4000), "step 0 should be treated as step 1"


def test_make_optimizer():
    model = _small_model()
    optimizer, scheduler = make_optimizer(model, d_model=16, warmup_steps=10, factor=2.0)
    assert isinstance(optimizer, torch.optim.Adam), f"expected torch.optim.Adam, got {type(optimizer).__name__}"
    group = optimizer.param_groups[0]
    assert group["betas"] == (0.9, 0.98) and group["eps"] == 1e-9, (
        f"Adam should use betas (0.9, 0.98) and eps 1e-9, got {group['betas']} and {group['eps']}")
    lrs = []
    for _ in range(15):
        lrs.append(group["lr"])
        optimizer.step()
        scheduler.step()
    want = [noam_lr(s, 16, 10, 2.0) for s in range(15)]
    assert all(math.isclose(a, b) for a, b in zip(lrs, want)), f"after s scheduler steps the lr should be noam_lr(s): {want[:4]}..., got {lrs[:4]}..."


# ------------------------------------------------------------------------------ train, evaluate

def test_train_step_returns_the_loss_and_updates():
    model = _small_model()
    batch = _hand_batch([[4, 5, 6], [7, 0, 0]], [[1, 6, 5, 4], [1, 7, 0, 0]], [[6, 5, 4, 2], [7, 2, 0, 0]])
    model.eval()                                                        # train_step must switch to train mode
    with torch.no_grad():
        logits = model(batch["src"], batch["tgt_in"], batch["src_mask"], batch["tgt_mask"])
    want = F.cross_entropy(logits.reshape(-1, 9), batch["tgt_out"].reshape(-1), ignore_index=PAD, label_smoothing=0.1)
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = train_step(model, batch, optimizer, pad_id=PAD, smoothing=0.1)
    assert isinstance(loss, float), f"train_step should return a Python float (loss.item()), got {type(loss).__name__}"
    assert math.isclose(loss, want.item(), rel_tol=1e-5), (
        f"train_step should return the smoothed loss over tgt_out before the update: {want.item():.5f}, got {loss:.5f}")
    assert model.training, "train_step should leave the model in training mode"
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters())), "train_step should update the parameters"


def test_evaluate_weighs_tokens_and_restores_mode():
    model = _small_model(dropout=0.3)
    b1 = _hand_batch([[4, 5, 6]], [[1, 6, 5, 4]], [[6, 5, 4, 2]])                       # 4 target tokens
    b2 = _hand_batch([[7, 8], [4, 0]], [[1, 8, 7], [1, 4, 0]], [[8, 7, 2], [4, 2, 0]])  # 5 target tokens
    model.eval()
    with torch.no_grad():
        nll = []
        for b in (b1, b2):
            logits = model(b["src"], b["tgt_in"], b["src_mask"], b["tgt_mask"])
            nll.append(F.cross_entropy(logits.reshape(-1, 9), b["tgt_out"].reshape(-1), ignore_index=PAD, reduction="sum"))
    want = (sum(nll) / 9).item()
    model.train()
    got = evaluate(model, [b1, b2], pad_id=PAD)
    assert isinstance(got, float), f"evaluate should return a Python float, got {type(got).__name__}"
    assert math.isclose(got, want, rel_tol=1e-5), (
        f"evaluate should return the unsmoothed cross-entropy per non-pad token over all batches, in eval mode "
        f"(sum over 9 tokens / 9 = {want:.5f}), got {got:.5f}")
    assert model.training, "evaluate should put the model back in training mode when it was called in training mode"


def test_tiny_model_learns_to_copy():
    torch.manual_seed(1)
    model = _small_model()
    optimizer, scheduler = make_optimizer(model, d_model=16, warmup_steps=50, factor=1.0)
    gen = torch.Generator().manual_seed(0)
    losses = []
    for _ in range(150):
        seqs = torch.randint(4, 9, (16, 4), generator=gen).tolist()
        batch = make_batch(seqs, seqs, PAD, BOS, EOS)
        losses.append(train_step(model, batch, optimizer, PAD, scheduler))
    first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
    assert last < 0.5 * first, (
        f"after 150 steps on the copy task the loss should at least halve: first 10 steps {first:.3f}, last 10 {last:.3f}")
