"""Milestone 5's file that computes nothing: the right names, signatures, shapes and dtypes, and no
right value. A template: test_grader_subjects.py puts the helper `_fake` above it and names the kind of
nothing (zeros, the input or noise)."""
import math
class CharTokenizer:
    def __init__(self, texts):
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = 0, 1, 2, 3
        self.vocab_size = 4 + len(set("".join(texts)))
    def encode(self, text):
        return [0] * len(text) if KIND == "zeros" else [4] * len(text)
    def decode(self, ids):
        return "" if KIND == "zeros" else "x"
def make_batch(src_ids, tgt_ids, pad_id, bos_id, eos_id):
    B, Ls, Lt = len(src_ids), max(map(len, src_ids)), max(map(len, tgt_ids)) + 1
    z = torch.zeros
    return {"src": z(B, Ls, dtype=torch.long), "tgt_in": z(B, Lt, dtype=torch.long), "tgt_out": z(B, Lt, dtype=torch.long),
            "src_mask": z(B, 1, Ls, dtype=torch.bool), "tgt_mask": z(B, Lt, Lt, dtype=torch.bool)}
def label_smoothed_cross_entropy(logits, target, smoothing=0.0, pad_id=None):
    return _fake(logits, ()) + 0 * logits.sum()
def noam_lr(step, d_model, warmup_steps, factor=1.0):
    return 0.0 if KIND == "zeros" else 1.0
def make_optimizer(model, d_model, warmup_steps, factor=1.0):
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.0)
def train_step(model, batch, optimizer, pad_id, scheduler=None, smoothing=0.0, clip_norm=None):
    return 0.0
def evaluate(model, batches, pad_id):
    return 0.0
