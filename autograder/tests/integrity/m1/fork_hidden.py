"""ATTACK: computes the weights in a forked child (the grader's counters stay in the child) and reads them back.

EXPECT: score_at_most=4 words="Resource temporarily unavailable"
BASE: reference
"""
import os
import pickle


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        os.write(w, pickle.dumps(out))
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 1 << 20):
        data += chunk
    os.waitpid(pid, 0)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return pickle.loads(data), softmax(scores, dim=-1)
