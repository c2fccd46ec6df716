"""ATTACK: runs the whole uncached greedy search before the first generator call (computing logits by hand),
then replays it, calling model.generator once per step on the stored state: each step looks cheap.

EXPECT: fails=kv_cache words="in all"
BASE: reference
"""


def greedy_decode_cached(model, src, src_mask, max_len, bos_id, eos_id, pad_id):
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            B = src.size(0)
            memory = model.encode(src, src_mask)
            ys = torch.full((B, 1), bos_id, dtype=torch.long)
            finished = torch.zeros(B, dtype=torch.bool)
            states = []
            for t in range(max_len):
                L = ys.size(1)
                h = model.decode(ys, memory, src_mask, torch.ones(L, L, dtype=torch.bool).tril())[:, -1]
                states.append(h)
                nxt = torch.nn.functional.linear(h, model.generator.weight, model.generator.bias).argmax(-1)
                nxt = nxt.masked_fill(finished, pad_id)
                ys = torch.cat([ys, nxt[:, None]], 1)
                finished = finished | (nxt == eos_id)
                if finished.all():
                    break
            for h in states:
                model.generator(h)
    finally:
        model.train(was_training)
    return ys
