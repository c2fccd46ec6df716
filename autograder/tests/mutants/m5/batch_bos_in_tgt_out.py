"""Mistake: tgt_out is <bos> + target + <eos> (the shift is done on tgt_in only), one column too wide.

CATCHES: batches
DIAGNOSIS: bos_in_tgt_out

BASE: reference
"""


def make_batch(src_ids, tgt_ids, pad_id, bos_id, eos_id):
    def pad(seqs):
        longest = max(len(s) for s in seqs)
        return torch.tensor([list(s) + [pad_id] * (longest - len(s)) for s in seqs], dtype=torch.long)

    src = pad(src_ids)
    tgt_in = pad([[bos_id] + list(t) for t in tgt_ids])
    tgt_out = pad([[bos_id] + list(t) + [eos_id] for t in tgt_ids])
    src_mask = padding_mask(src, pad_id)
    tgt_mask = causal_mask(tgt_in.size(1)) & padding_mask(tgt_in, pad_id)
    return {"src": src, "tgt_in": tgt_in, "tgt_out": tgt_out, "src_mask": src_mask, "tgt_mask": tgt_mask}
