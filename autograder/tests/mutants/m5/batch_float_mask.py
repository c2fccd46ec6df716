"""Mistake: tgt_mask is built from torch.tril(torch.ones(...)), a float32 mask, not a bool one.

CATCHES: batches
DIAGNOSIS: batch_dtype

BASE: reference
"""


def make_batch(src_ids, tgt_ids, pad_id, bos_id, eos_id):
    def pad(seqs):
        longest = max(len(s) for s in seqs)
        return torch.tensor([list(s) + [pad_id] * (longest - len(s)) for s in seqs], dtype=torch.long)

    src = pad(src_ids)                                                     # [B, Ls]
    tgt_in = pad([[bos_id] + list(t) for t in tgt_ids])                    # [B, Lt]
    tgt_out = pad([list(t) + [eos_id] for t in tgt_ids])                   # [B, Lt]
    src_mask = padding_mask(src, pad_id)                                   # [B, 1, Ls]
    Lt = tgt_in.size(1)
    tgt_mask = torch.tril(torch.ones(Lt, Lt)) * padding_mask(tgt_in, pad_id)  # [B, Lt, Lt]
    return {"src": src, "tgt_in": tgt_in, "tgt_out": tgt_out, "src_mask": src_mask, "tgt_mask": tgt_mask}
