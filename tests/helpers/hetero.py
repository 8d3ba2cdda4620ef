"""What the cross-vocabulary drafter tests share (``tests/drafters/``): the size of the tiny byte-level
BPE tokenizer (``helpers.tiny.tiny_tokenizer``'s default), prompts, a text both tokenizers can write, and
``Oracle``, a tiny model pushed toward writing that text."""

from __future__ import annotations

import torch

BPE_SIZE = 300
PROMPTS = ["the quick brown fox", "def add(a, b):\n", "one two three"]
TEXT = "the quick brown fox jumps over the lazy dog and a cat sat on the mat"


class Oracle(torch.nn.Module):
    """A tiny Llama (real KV cache) whose logits are pushed (+50) toward the first token of the
    tokenizer's encoding of the rest of ``text`` after what the sequence decodes to, and to EOS
    once the text is complete. Counts the tokens it is fed."""

    def __init__(self, model, tokenizer, text: str, eos: int) -> None:
        super().__init__()
        self.model, self.config, self.tok, self.text, self.eos = model, model.config, tokenizer, text, eos
        self.record: list[int] = []
        self.fed = 0

    def forward(self, input_ids, past_key_values=None, logits_to_keep=1, **kw):
        start = past_key_values.get_seq_length() if past_key_values is not None else 0
        ids = input_ids[0].tolist()
        self.record = self.record[:start] + ids
        self.fed += len(ids)
        out = self.model(input_ids=input_ids, past_key_values=past_key_values, logits_to_keep=logits_to_keep, **kw)
        n = out.logits.shape[1]
        for j in range(n):
            pos = start + len(ids) - n + j
            done = self.tok.decode(self.record[: pos + 1], skip_special_tokens=True)
            if self.text.startswith(done):
                rest = self.text[len(done):]
                want = self.tok(rest, add_special_tokens=False).input_ids[:1] if rest else [self.eos]
                if want:
                    out.logits[0, j, want[0]] += 50.0
        return out
