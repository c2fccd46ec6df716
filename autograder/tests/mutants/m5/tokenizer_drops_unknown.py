"""Mistake: encode drops unknown characters instead of giving unk_id.

CATCHES: tokenizer
DIAGNOSIS: tokenizer_encode

BASE: reference
"""


class CharTokenizer:
    """A character-level vocabulary built from example texts.

    Ids 0..3 are the special tokens <pad>, <bos>, <eos>, <unk> (in that order); ids 4, 5, ... are
    the distinct characters of `texts`, in sorted order (Python's sorted() of the characters).

    Args:
        texts: an iterable of strings (e.g. every source and target of the training split).

    Attributes:
        pad_id = 0, bos_id = 1, eos_id = 2, unk_id = 3
        vocab_size: 4 + number of distinct characters.

    Example:
        >>> tok = CharTokenizer(["ba", "ab!"])       # characters "!", "a", "b" -> ids 4, 5, 6
        >>> tok.encode("ab?")
        [5, 6, 3]
        >>> tok.decode([1, 5, 6, 2, 5])               # stops at <eos>
        'ab'
    """

    PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"

    def __init__(self, texts):
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = 0, 1, 2, 3
        chars = sorted(set("".join(texts)))
        self.stoi = {c: i + 4 for i, c in enumerate(chars)}
        self.itos = {i: c for c, i in self.stoi.items()}
        self.vocab_size = 4 + len(chars)

    def encode(self, text):
        """text -> list of ids, one per character (no <bos> or <eos> added); an unknown character
        gives unk_id."""
        return [self.stoi[c] for c in text if c in self.stoi]

    def decode(self, ids):
        """ids (a list of ints, or a 1-D int tensor) -> text.

        Stops at the first eos_id (not included); skips pad_id and bos_id; writes unk_id as the five
        characters "<unk>"; every other id becomes its character.
        """
        out = []
        for i in (ids.tolist() if torch.is_tensor(ids) else ids):
            i = int(i)
            if i == self.eos_id:
                break
            if i in (self.pad_id, self.bos_id):
                continue
            out.append(self.UNK if i == self.unk_id else self.itos[i])
        return "".join(out)
