"""Mistake: the masks are the tokens' truth values (src.bool(), tgt_in.bool()), so they block the tokens equal
to 0 rather than those equal to pad_id.

CATCHES: batches
DIAGNOSIS: batch_masks_key_on_zero

BASE: reference
"""


def make_batch(src_ids, tgt_ids, pad_id, bos_id, eos_id):
    def pad(seqs):
        longest = max(len(s) for s in seqs)
        return torch.tensor([list(s) + [pad_id] * (longest - len(s)) for s in seqs], dtype=torch.long)

    src = pad(src_ids)                                                     # [B, Ls]
    tgt_in = pad([[bos_id] + list(t) for t in tgt_ids])                    # [B, Lt]
    tgt_out = pad([list(t) + [eos_id] for t in tgt_ids])                   # [B, Lt]
    src_mask = src.bool().unsqueeze(1)                                     # padding is falsy
    tgt_mask = causal_mask(tgt_in.size(1)) & tgt_in.bool().unsqueeze(1)
    return {"src": src, "tgt_in": tgt_in, "tgt_out": tgt_out, "src_mask": src_mask, "tgt_mask": tgt_mask}
