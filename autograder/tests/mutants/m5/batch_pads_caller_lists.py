"""Mistake: make_batch pads the caller's source lists in place (s += [pad_id] * ...).

CATCHES: batches
DIAGNOSIS: input_modified

BASE: reference
"""


def make_batch(src_ids, tgt_ids, pad_id, bos_id, eos_id):
    """Turn B (source, target) id lists into padded tensors and masks for one training step.

    Args:
        src_ids: list of B lists of token ids (no special tokens), lengths may differ.
        tgt_ids: list of B lists of token ids (no special tokens).
        pad_id, bos_id, eos_id: the special ids.

    Returns:
        a dict of CPU tensors, with Ls = longest source, Lt = longest target + 1:
            "src":      [B, Ls] int64, each source right-padded with pad_id
            "tgt_in":   [B, Lt] int64, bos_id + target, right-padded (the decoder input)
            "tgt_out":  [B, Lt] int64, target + eos_id, right-padded (what the decoder must predict)
            "src_mask": [B, 1, Ls] bool, True at real source tokens (padding_mask of milestone 1)
            "tgt_mask": [B, Lt, Lt] bool, tgt_mask[b, i, j] = (j <= i) and tgt_in[b, j] != pad_id:
                        causal, and padded keys blocked (padded query rows are not blocked; the
                        loss ignores them anyway).

    Example (pad 0, bos 1, eos 2): src_ids [[5, 6, 7], [8]], tgt_ids [[9], [10, 11]] ->
        src [[5, 6, 7], [8, 0, 0]], tgt_in [[1, 9, 0], [1, 10, 11]], tgt_out [[9, 2, 0], [10, 11, 2]]
    The input lists are not modified.
    """
    def pad(seqs):
        longest = max(len(s) for s in seqs)
        for s in seqs:
            s += [pad_id] * (longest - len(s))
        return torch.tensor(seqs, dtype=torch.long)

    src = pad(src_ids)                                                     # [B, Ls]
    tgt_in = pad([[bos_id] + list(t) for t in tgt_ids])                    # [B, Lt]
    tgt_out = pad([list(t) + [eos_id] for t in tgt_ids])                   # [B, Lt]
    src_mask = padding_mask(src, pad_id)                                   # [B, 1, Ls]
    tgt_mask = causal_mask(tgt_in.size(1)) & padding_mask(tgt_in, pad_id)  # [Lt, Lt] & [B, 1, Lt] -> [B, Lt, Lt]
    return {"src": src, "tgt_in": tgt_in, "tgt_out": tgt_out, "src_mask": src_mask, "tgt_mask": tgt_mask}
