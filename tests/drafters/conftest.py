"""The cross-vocabulary drafters' tests share two tokenizers of the same corpus: a byte-level BPE (at
``helpers.tiny``'s default size, ``helpers.hetero.BPE_SIZE``) and a character-level one."""

import pytest

from helpers.tiny import tiny_tokenizer


@pytest.fixture(scope="module")
def bpe():
    return tiny_tokenizer(kind="bpe")


@pytest.fixture(scope="module")
def char():
    return tiny_tokenizer(kind="char")
