"""Fixtures of the model tests."""

from __future__ import annotations

import pytest

from helpers import tiny


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A tiny seeded Llama (seed 3, 2 layers) and the tests' tokenizer saved to a folder: ``(path, tokenizer)``."""
    path = tmp_path_factory.mktemp("tiny")
    tok = tiny.tiny_tokenizer()
    tiny.tiny_model(len(tok), seed=3, hidden=64, layers=2).save_pretrained(path)
    tok.save_pretrained(path)
    return path, tok
