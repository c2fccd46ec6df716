"""Mistake: make_batch returns a tuple (src, tgt_in, tgt_out, src_mask, tgt_mask) instead of a dict.

CATCHES: batches
DIAGNOSIS: batch_not_dict

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
    tgt_mask = causal_mask(tgt_in.size(1)) & padding_mask(tgt_in, pad_id)  # [Lt, Lt] & [B, 1, Lt] -> [B, Lt, Lt]
    return src, tgt_in, tgt_out, src_mask, tgt_mask
