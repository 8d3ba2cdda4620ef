#!/usr/bin/env python
"""The recipe of ``specbench/data/token_maps/gemma3.json`` (``package:gemma3``): Gemma-3's tokens ranked by an offline
estimate of their frequency, for a draft whose LM head keeps the most frequent ones (FR-Spec; issue 52, item 2).

    pip download wordfreq==3.1.1 --no-deps -d /tmp/wf && (cd /tmp/wf && unzip -o -q wordfreq-3.1.1-py3-none-any.whl)
    .venv/bin/python scripts/build_token_map_gemma3.py --wordfreq /tmp/wf/wordfreq/data/large_en.msgpack.gz

FR-Spec counts a large web corpus (SlimPajama-627B) under the model's tokenizer; none is at hand offline, so the
score of a token is the mean of two shares (``--english-weight`` 0.5), each normalised to sum to 1:

* **English words**: wordfreq 3.1.1's ``large_en`` list (321180 words with their frequencies, from Wikipedia,
  subtitles, news, books, web text and social media; its data is CC BY-SA 4.0), each word tokenized with a leading
  space, its frequency added to each of its tokens;
* **code and technical prose**: the tokens of this Python's standard library sources (no tests), the ``METADATA`` of
  the installed packages (their READMEs: markdown) and ``pydoc_data.topics`` (Python's reference text), counted.

The words alone miss punctuation, newlines and markup, the code alone everyday words; on the committed outputs of
Gemma-3-270M (Spec-Bench, the embedded prompts, HumanEval: none of them in either corpus) the mix's 32768 first ids
hold 96.8 % of the emitted tokens where Gemma's first 32768 ids hold 58.5 % (measured 2026-11-28 with this script's
``--coverage``). The map is shared under CC BY-SA 4.0 (``specbench/data/token_maps/README.md``).
"""

from __future__ import annotations

import argparse
import glob
import gzip
import json
import sys
import sysconfig
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

OUT = ROOT / "specbench" / "data" / "token_maps" / "gemma3.json"
KEEP = 65536


def english(tokenizer, path: Path) -> Counter:
    """wordfreq's cBpack: ``[header, bucket_0, bucket_1, …]``, the words of bucket ``i`` at frequency 10^(−i/100)."""
    import msgpack

    with gzip.open(path) as fh:
        data = msgpack.load(fh, raw=False)
    header, buckets = data[0], data[1:]
    if header.get("format") != "cB":
        raise SystemExit(f"error: {path}: not a wordfreq cBpack")
    words = [(w, 10 ** (-i / 100)) for i, bucket in enumerate(buckets) for w in bucket]
    shares: Counter = Counter()
    for (_, freq), ids in zip(words, tokenizer([" " + w for w, _ in words], add_special_tokens=False)["input_ids"],
                              strict=True):
        for t in ids:
            shares[t] += freq
    return shares


def code_files() -> list[Path]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = [p for p in sorted(stdlib.rglob("*.py"))
             if not {"site-packages", "test", "tests", "idlelib", "lib2to3"} & set(p.relative_to(stdlib).parts)]
    purelib = Path(sysconfig.get_paths()["purelib"])
    files += sorted(Path(p) for p in glob.glob(str(purelib / "*.dist-info" / "METADATA")))
    return files


def code(tokenizer) -> Counter:
    import pydoc_data.topics

    from specbench.models.hot_vocab import count_tokens

    texts = [p.read_text(encoding="utf-8", errors="replace") for p in code_files()]
    texts += list(pydoc_data.topics.topics.values())
    return count_tokens(tokenizer, texts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wordfreq", type=Path, required=True, help="wordfreq 3.1.1's wordfreq/data/large_en.msgpack.gz")
    ap.add_argument("--english-weight", type=float, default=0.5)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    from specbench.config import ModelSpec
    from specbench.models import load_tokenizer
    from specbench.models.hot_vocab import TokenMap, vocab_fingerprint

    tokenizer = load_tokenizer(ModelSpec(path="pypi:gemma3-270m"))
    parts = {"english": english(tokenizer, args.wordfreq), "code": code(tokenizer)}
    weights = {"english": args.english_weight, "code": 1.0 - args.english_weight}
    score: Counter = Counter()
    for name, counts in parts.items():
        total = sum(counts.values())
        for t, c in counts.items():
            score[t] += weights[name] * c / total
    ranked = sorted(score.items(), key=lambda kv: (-kv[1], kv[0]))[:KEEP]
    source = (f"Gemma-3's tokens ranked by {weights['english']:g} × the English word frequencies of wordfreq 3.1.1 "
              f"(large_en, CC BY-SA 4.0) + {weights['code']:g} × the token counts of Python "
              f"{sys.version.split()[0]}'s standard library, the installed packages' METADATA and pydoc's topics "
              "(scripts/build_token_map_gemma3.py); counts: the score × 1e9")
    token_map = TokenMap(tuple(i for i, _ in ranked), tuple(int(round(v * 1e9)) for _, v in ranked), source,
                         {"fingerprint": vocab_fingerprint(tokenizer), "size": len(tokenizer)})
    token_map.write(args.out)
    print(f"{args.out}: {len(token_map.ids)} ids; {json.dumps({k: len(v) for k, v in parts.items()})} distinct tokens")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
