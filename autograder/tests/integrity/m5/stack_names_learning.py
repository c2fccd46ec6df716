"""ATTACK: trains only when the call stack shows the grader's learning check (a recipe named like
`recipe_learn`); elsewhere it returns the loss without updating, to be fast.

EXPECT: fails=learning
BASE: reference
"""
import traceback


def train_step(model, batch, optimizer, pad_id, scheduler=None, smoothing=0.0, clip_norm=None):
    model.train()
    optimizer.zero_grad()
    logits = model(batch["src"], batch["tgt_in"], batch["src_mask"], batch["tgt_mask"])
    loss = label_smoothed_cross_entropy(logits, batch["tgt_out"], smoothing, pad_id)
    names = " ".join(f.name for f in traceback.extract_stack())
    if "learn" not in names:
        return loss.item()
    loss.backward()
    if clip_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    return loss.item()
