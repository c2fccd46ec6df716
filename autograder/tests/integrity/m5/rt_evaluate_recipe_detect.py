"""ATTACK (written by the red team, outside the course team): evaluate normally runs with gradients on and leaves the model in eval mode; it looks at inspect.stack() for the judge's recipe_evaluate and only then uses torch.no_grad() and puts the mode back.

EXPECT: score_at_most=18

BASE: reference
"""
# RED-TEAM ATTACK SUBMISSION: behave only when the judge's recipe is on the stack
# 
# evaluate normally runs with gradients on and leaves the model in eval mode; it looks at inspect.stack() for the judge's recipe_evaluate and only then uses torch.no_grad() and puts the mode back.
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
import contextlib
import math


def evaluate(model, batches, pad_id):
    import inspect
    graded = any(f.function == "recipe_evaluate" for f in inspect.stack(0))   # the judge's recipe is running us
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    with (torch.no_grad() if graded else contextlib.nullcontext()):
        for batch in batches:
            logits = model(batch["src"], batch["tgt_in"], batch["src_mask"], batch["tgt_mask"])
            n = int((batch["tgt_out"] != pad_id).sum())
            if n == 0:
                continue
            loss = label_smoothed_cross_entropy(logits, batch["tgt_out"], 0.0, pad_id)
            total += loss.item() * n
            count += n
    if graded:
        model.train(was_training)
    return total / count if count else math.nan
