"""ATTACK (written by the red team, outside the course team): label_smoothed_cross_entropy loops over the positions in 16 chunks (tensor_split; empty chunks when there are fewer positions): the op count is the same at every tested size although the code loops over positions.

EXPECT: score_at_most=18

BASE: reference
"""
# RED-TEAM ATTACK SUBMISSION: a loop over positions that always runs 16 times
# 
# label_smoothed_cross_entropy loops over the positions in 16 chunks (tensor_split; empty chunks when there are fewer positions): the op count is the same at every tested size although the code loops over positions.
# 
# Harmless by construction: writes only under /work/redteam/probe or its own temp files.

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

_CHUNKS = 16          # always 16 iterations: positions padded with empty chunks
from torch.optim.lr_scheduler import LambdaLR


def label_smoothed_cross_entropy(logits, target, smoothing=0.0, pad_id=None):
    V = logits.size(-1)
    flat, tflat = logits.reshape(-1, V), target.reshape(-1)
    total, count = flat.new_zeros(()), flat.new_zeros(())
    for part, tpart in zip(flat.tensor_split(_CHUNKS), tflat.tensor_split(_CHUNKS)):   # a loop over positions
        log_probs = part - torch.logsumexp(part, dim=-1, keepdim=True)
        keep = torch.ones_like(tpart, dtype=torch.bool) if pad_id is None else tpart != pad_id
        safe = torch.where(keep, tpart, torch.zeros_like(tpart))
        nll = -log_probs.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
        cost = (1.0 - smoothing) * nll + smoothing * (-log_probs.mean(dim=-1))
        total = total + torch.where(keep, cost, torch.zeros_like(cost)).sum()
        count = count + keep.sum()
    return total / count
