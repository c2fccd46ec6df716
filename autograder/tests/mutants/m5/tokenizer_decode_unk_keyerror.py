"""Mistake: decode looks every id up in the character table, which has no entry for unk_id (KeyError: 3).

CATCHES: tokenizer
DIAGNOSIS: tokenizer_decode

BASE: reference
"""


class CharTokenizer:

    PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"

    def __init__(self, texts):
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = 0, 1, 2, 3
        chars = sorted(set("".join(texts)))
        self.stoi = {c: i + 4 for i, c in enumerate(chars)}
        self.itos = {i: c for c, i in self.stoi.items()}
        self.vocab_size = 4 + len(chars)

    def encode(self, text):
        return [self.stoi.get(c, self.unk_id) for c in text]

    def decode(self, ids):
        out = []
        for i in (ids.tolist() if torch.is_tensor(ids) else ids):
            i = int(i)
            if i == self.eos_id:
                break
            if i in (self.pad_id, self.bos_id):
                continue
            out.append(self.itos[i])
        return "".join(out)
