"""ATTACK (written by the red team, outside the course team): label_smoothed_cross_entropy returns F.cross_entropy (forbidden) unless a dispatch mode or torch function mode is active (_get_current_dispatch_mode_stack, _is_torch_function_mode_enabled); then it runs the from-scratch formula.

EXPECT: score_at_most=18

BASE: reference
"""
# RED-TEAM ATTACK SUBMISSION: F.cross_entropy except when a mode is watching
# 
# label_smoothed_cross_entropy returns F.cross_entropy (forbidden) unless a dispatch mode or torch function mode is active (_get_current_dispatch_mode_stack, _is_torch_function_mode_enabled); then it runs the from-scratch formula.
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
import torch.nn.functional as F
from torch.optim.lr_scheduler import LambdaLR


def label_smoothed_cross_entropy(logits, target, smoothing=0.0, pad_id=None):
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack
    V = logits.size(-1)
    if not (_get_current_dispatch_mode_stack() or torch._C._is_torch_function_mode_enabled()):
        return F.cross_entropy(logits.reshape(-1, V), target.reshape(-1),      # PyTorch's own (forbidden)
                               ignore_index=-100 if pad_id is None else pad_id, label_smoothing=smoothing)
    logits = logits.reshape(-1, V)
    target = target.reshape(-1)
    log_probs = logits - torch.logsumexp(logits, dim=-1, keepdim=True)
    keep = torch.ones_like(target, dtype=torch.bool) if pad_id is None else target != pad_id
    safe = torch.where(keep, target, torch.zeros_like(target))
    nll = -log_probs.gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    cost = (1.0 - smoothing) * nll + smoothing * (-log_probs.mean(dim=-1))
    return torch.where(keep, cost, torch.zeros_like(cost)).sum() / keep.sum()
