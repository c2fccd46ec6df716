"""Mistake: make_batch pads with zeros (torch.zeros buffers filled row by row), not with pad_id.

CATCHES: batches
DIAGNOSIS: batch_padded_with_zero

BASE: reference
"""


def make_batch(src_ids, tgt_ids, pad_id, bos_id, eos_id):
    def pad(seqs):
        out = torch.zeros(len(seqs), max(len(s) for s in seqs), dtype=torch.long)
        for i, s in enumerate(seqs):
            out[i, :len(s)] = torch.tensor(list(s), dtype=torch.long)
        return out

    src = pad(src_ids)                                                     # [B, Ls]
    tgt_in = pad([[bos_id] + list(t) for t in tgt_ids])                    # [B, Lt]
    tgt_out = pad([list(t) + [eos_id] for t in tgt_ids])                   # [B, Lt]
    src_mask = padding_mask(src, pad_id)                                   # [B, 1, Ls]
    tgt_mask = causal_mask(tgt_in.size(1)) & padding_mask(tgt_in, pad_id)  # [B, Lt, Lt]
    return {"src": src, "tgt_in": tgt_in, "tgt_out": tgt_out, "src_mask": src_mask, "tgt_mask": tgt_mask}
