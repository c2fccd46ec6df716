"""Milestone 5: training the Transformer on a toy task.

The pieces of a training loop, each small enough to test on its own:
- CharTokenizer: text <-> lists of token ids, one token per character.
- make_batch: pads a batch, shifts the target for teacher forcing, builds the masks.
- label_smoothed_cross_entropy: the loss of the paper's section 5.4, written from scratch.
- noam_lr / make_optimizer: Adam with the paper's warm-up schedule (section 5.3).
- train_step / evaluate: one optimisation step; the validation loss.

Teacher forcing: the decoder reads `<bos> y1 y2 ... yn` (tgt_in) and is trained to predict
`y1 y2 ... yn <eos>` (tgt_out): the prediction at position t is compared with the token at t + 1.

Tasks and their splits come from data.py (provided). Masks are boolean, True = may attend.
"""
import math

import torch
from torch.optim.lr_scheduler import LambdaLR

from attention import causal_mask, padding_mask


class CharTokenizer:
    """A character-level vocabulary built from example texts.

    Ids 0..3 are the special tokens <pad>, <bos>, <eos>, <unk> (in that order); ids 4, 5, ... are
    the distinct characters of `texts`, in sorted order (Python's sorted() of the characters).

    Args:
        texts: an iterable of strings (e.g. every source and target of the training split).

    Attributes:
        pad_id = 0, bos_id = 1, eos_id = 2, unk_id = 3
        vocab_size: 4 + number of distinct characters.

    Example:
        >>> tok = CharTokenizer(["ba", "ab!"])       # characters "!", "a", "b" -> ids 4, 5, 6
        >>> tok.encode("ab?")
        [5, 6, 3]
        >>> tok.decode([1, 5, 6, 2, 5])               # stops at <eos>
        'ab'
    """

    PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"

    def __init__(self, texts):
        # TODO: set pad_id, bos_id, eos_id, unk_id = 0, 1, 2, 3; collect the distinct characters of
        # TODO: all texts, sort them, give them ids from 4 on; keep both directions (char -> id, id -> char).
        raise NotImplementedError("CharTokenizer.__init__ is not implemented yet")

    def encode(self, text):
        """text -> list of ids, one per character (no <bos> or <eos> added); an unknown character
        gives unk_id."""
        # TODO: look each character up, unk_id when it is not in the vocabulary.
        raise NotImplementedError("CharTokenizer.encode is not implemented yet")

    def decode(self, ids):
        """ids (a list of ints, or a 1-D int tensor) -> text.

        Stops at the first eos_id (not included); skips pad_id and bos_id; writes unk_id as the five
        characters "<unk>"; every other id becomes its character.
        """
        # TODO: walk through the ids: stop at eos, skip pad and bos, "<unk>" for unk, else the character.
        raise NotImplementedError("CharTokenizer.decode is not implemented yet")


def make_batch(src_ids, tgt_ids, pad_id, bos_id, eos_id):
    """Turn B (source, target) id lists into padded tensors and masks for one training step.

    Args:
        src_ids: list of B lists of token ids (no special tokens), lengths may differ.
        tgt_ids: list of B lists of token ids (no special tokens).
        pad_id, bos_id, eos_id: the special ids.

    Returns:
        a dict of CPU tensors, with Ls = longest source, Lt = longest target + 1:
            "src":      [B, Ls] int64, each source right-padded with pad_id
            "tgt_in":   [B, Lt] int64, bos_id + target, right-padded (the decoder input)
            "tgt_out":  [B, Lt] int64, target + eos_id, right-padded (what the decoder must predict)
            "src_mask": [B, 1, Ls] bool, True at real source tokens (padding_mask of milestone 1)
            "tgt_mask": [B, Lt, Lt] bool, tgt_mask[b, i, j] = (j <= i) and tgt_in[b, j] != pad_id:
                        causal, and padded keys blocked (padded query rows are not blocked; the
                        loss ignores them anyway).

    Example (pad 0, bos 1, eos 2): src_ids [[5, 6, 7], [8]], tgt_ids [[9], [10, 11]] ->
        src [[5, 6, 7], [8, 0, 0]], tgt_in [[1, 9, 0], [1, 10, 11]], tgt_out [[9, 2, 0], [10, 11, 2]]
    The input lists are not modified.
    """
    # TODO: pad every source to the longest; tgt_in = [bos] + t and tgt_out = t + [eos], padded the same way.
    # TODO: src_mask from padding_mask; tgt_mask = causal_mask(Lt) AND the padding mask of tgt_in.
    raise NotImplementedError("make_batch is not implemented yet")


def label_smoothed_cross_entropy(logits, target, smoothing=0.0, pad_id=None):
    """Cross-entropy with label smoothing, averaged over the non-padding targets.

    With log-probabilities lp = log softmax(logits) over the V classes, each position costs

        (1 - smoothing) * (-lp[target])  +  smoothing * mean over all V classes of (-lp[c])

    (the smoothing mass is spread over all V classes, the correct one included), and the result is
    the mean of that cost over the positions whose target is not pad_id.

    Args:
        logits: [..., V] float32 or float64 (any number of leading dimensions, e.g. [B, Lt, V]).
        target: [...] int64 class ids, the leading shape of logits.
        smoothing: label smoothing epsilon, 0 <= smoothing < 1 (0.1 in the paper).
        pad_id: positions whose target equals pad_id are ignored; None = ignore nothing.

    Returns:
        A scalar tensor (0-dim) in the dtype of logits, differentiable. It equals
        F.cross_entropy(logits.reshape(-1, V), target.reshape(-1), ignore_index=pad_id,
        label_smoothing=smoothing), and like it is NaN when every target is pad_id.

    Numerically stable: logits around 1e4 give finite values (use torch.logsumexp, or subtract the
    row maximum before exp). Write it from scratch: no cross_entropy, nll_loss, log_softmax, softmax
    or kl_div of torch (torch.*, F.* or tensor methods). torch.logsumexp and F.one_hot are allowed.
    The inputs are not modified.
    """
    # TODO: flatten to [N, V] and [N]; log-probabilities = logits - logsumexp over the classes.
    # TODO: nll = -(log-probability of the target) (gather; pad_id need not be a class, e.g. -100 or V:
    # TODO: give padded targets a safe index first, e.g. torch.where(keep, target, 0)),
    # TODO: smooth = -(mean log-probability over the V classes); cost = (1 - e) * nll + e * smooth;
    # TODO: average the cost over the non-pad positions (sum / count: 0 / 0 gives NaN when all are pad).
    raise NotImplementedError("label_smoothed_cross_entropy is not implemented yet")


def noam_lr(step, d_model, warmup_steps, factor=1.0):
    """The learning rate of the paper's section 5.3 at a given step (a Python float).

        lr = factor * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)

    It rises linearly for warmup_steps steps, peaks at step = warmup_steps, then decays as
    1/sqrt(step). Step 0 is treated as step 1 (0^-0.5 would divide by zero).

    Example: noam_lr(4000, 512, 4000) is about 6.99e-4.
    """
    # TODO: replace step 0 by 1, then the formula.
    raise NotImplementedError("noam_lr is not implemented yet")


def make_optimizer(model, d_model, warmup_steps, factor=1.0):
    """Adam with the paper's settings, and the warm-up schedule.

    Returns:
        (optimizer, scheduler): torch.optim.Adam over model.parameters() with lr=1.0,
        betas=(0.9, 0.98), eps=1e-9, and a torch.optim.lr_scheduler.LambdaLR whose factor at
        scheduler step s is noam_lr(s, d_model, warmup_steps, factor). (LambdaLR multiplies the
        base lr, 1.0, by that factor, so the lr IS noam_lr.) Call scheduler.step() after each
        optimizer.step().
    """
    # TODO: build the Adam optimizer, then LambdaLR(optimizer, lambda s: noam_lr(...)).
    raise NotImplementedError("make_optimizer is not implemented yet")


def train_step(model, batch, optimizer, pad_id, scheduler=None, smoothing=0.0, clip_norm=None):
    """One optimisation step on one batch (a dict from make_batch).

    In order: put the model in train mode; zero the gradients; forward pass
    model(src, tgt_in, src_mask, tgt_mask) -> logits [B, Lt, V]; loss =
    label_smoothed_cross_entropy(logits, tgt_out, smoothing, pad_id); backward; if clip_norm is not
    None, clip the gradients so their total norm is at most clip_norm
    (torch.nn.utils.clip_grad_norm_); optimizer.step(); then scheduler.step() if a scheduler is given.

    Returns:
        the loss of this batch (the smoothed one, before the update) as a Python float.
    """
    # TODO: follow the steps above; return loss.item().
    raise NotImplementedError("train_step is not implemented yet")


def evaluate(model, batches, pad_id):
    """The plain (unsmoothed) cross-entropy per non-pad target token, over all `batches`.

    Args:
        model: the Transformer.
        batches: an iterable of dicts from make_batch.
        pad_id: targets equal to pad_id are not counted.

    Returns:
        a Python float: (sum over every batch and every non-pad target token of -log p(target))
        divided by the number of such tokens. (Not the mean of per-batch means: batches with more
        tokens weigh more.) A batch without any non-pad target token adds nothing; when no batch
        has one (or `batches` is empty) the result is float('nan'), never a ZeroDivisionError.

    Runs in eval mode (no dropout) without gradients (torch.no_grad()), and leaves the model in
    the mode it was in (train or eval) when called.
    """
    # TODO: remember model.training, switch to eval, sum loss * token count over the batches under
    # TODO: torch.no_grad(), restore the mode, return the total divided by the token count.
    raise NotImplementedError("evaluate is not implemented yet")
