"""How expensive SLRS's ψ is for a pair of vocabularies (Timor et al., Sec. 3.4, Lemma 3.1, Appendix C, Table 5).

* **Combinations** of a target token ``t`` (Appendix C, Table 5): the number of sequences of draft
  tokens whose concatenation is exactly ``t``'s string (``segmentations``; Lemma 3.1: ``2^(n-1)``
  for an ``n``-character token over a complete vocabulary). Table 5 summarises them with the token
  lengths (characters) over a set of target tokens: mean, standard deviation, minimum, quartiles,
  maximum. Tokens with no combination (not expressible in the draft vocabulary) are counted apart.
* **ψ's tree** (Appendix C, Figure 1): computing ψ at one position needs one drafter forward per
  internal node, i.e. per draft sequence whose text is a *proper prefix* of some target token (the
  Sec. 3.3 lookahead continues exactly those; ``methods.hetero.slrs``), the empty sequence included.
  ``psi_tree_nodes`` counts them for a drafter with full support (every draft token possible, no
  threshold K): the worst case, which a softmax reaches at every position, so the number of draft
  forwards SLRS would spend per target token without truncating its drafter.

Both count by token *strings* (``methods.hetero.vocab.token_strings``: special and partial-UTF-8
tokens have none); draft EOS tokens are not text. Counts are exact Python integers.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np


def _draft_set(draft_strings: Iterable[str | None]) -> tuple[set[str], int]:
    words = {s for s in draft_strings if s}
    return words, max((len(w) for w in words), default=0)


def segmentations(text: str, words: set[str], longest: int) -> int:
    """Sequences of ``words`` whose concatenation is exactly ``text`` (dynamic programming, suffix first)."""
    n = len(text)
    ways = [0] * (n + 1)
    ways[n] = 1
    for i in range(n - 1, -1, -1):
        total = 0
        for j in range(i + 1, min(n, i + longest) + 1):
            if ways[j] and text[i:j] in words:
                total += ways[j]
        ways[i] = total
    return ways[0]


def combinations(target_strings: Sequence[str | None], draft_strings: Sequence[str | None],
                 ids: Iterable[int] | None = None) -> dict[int, int]:
    """``{target id: combinations}`` for ``ids`` (default: every target token with a string)."""
    words, longest = _draft_set(draft_strings)
    pick = range(len(target_strings)) if ids is None else ids
    return {t: segmentations(target_strings[t], words, longest) for t in pick
            if 0 <= t < len(target_strings) and target_strings[t]}


def psi_tree_nodes(target_strings: Sequence[str | None], draft_strings: Sequence[str | None]) -> int:
    """Internal nodes of ψ's tree with a full-support drafter and no threshold K: the number of draft
    sequences (the empty one included) whose concatenation is a proper prefix of a target token."""
    words, longest = _draft_set(draft_strings)
    prefixes = {s[:k] for s in target_strings if s for k in range(len(s))}  # proper prefixes, with ""
    seg: dict[str, int] = {"": 1}
    for u in sorted(prefixes, key=len):  # a prefix's own prefixes come first
        if u:
            seg[u] = sum(seg.get(u[:k], 0) for k in range(max(0, len(u) - longest), len(u)) if u[k:] in words)
    return sum(seg[u] for u in prefixes)


def describe(values: Sequence[float]) -> dict[str, float]:
    """Table 5's rows: mean, standard deviation (sample), minimum, 25 / 50 / 75 % percentiles, maximum."""
    a = np.asarray(values, dtype=float)
    if a.size == 0:
        return {}
    q25, q50, q75 = np.percentile(a, [25, 50, 75])
    return {"mean": float(a.mean()), "std": float(a.std(ddof=1)) if a.size > 1 else 0.0, "min": float(a.min()),
            "25%": float(q25), "50%": float(q50), "75%": float(q75), "max": float(a.max())}


def table5(target_strings: Sequence[str | None], draft_strings: Sequence[str | None],
           ids: Iterable[int] | None = None) -> dict[str, Any]:
    """Table 5 for a set of target tokens: statistics of their lengths and of their combinations (over
    the expressible ones), how many are not expressible, and the largest count with its token."""
    counts = combinations(target_strings, draft_strings, ids)
    expressible = {t: c for t, c in counts.items() if c > 0}
    top = max(expressible, key=expressible.get) if expressible else None
    return {
        "tokens": len(counts),
        "not_expressible": len(counts) - len(expressible),
        "length": describe([len(target_strings[t]) for t in expressible]),
        "combinations": describe([float(c) for c in expressible.values()]),
        "largest": {"token": target_strings[top], "combinations": expressible[top]} if top is not None else None,
    }


def feasibility_report(target_strings: Sequence[str | None], draft_strings: Sequence[str | None],
                       prompt_ids: Iterable[int] | None = None) -> dict[str, Any]:
    """Table 5 over the whole target vocabulary and over the target tokens of some prompts, and the
    worst-case ψ tree (drafter forwards per position with a full-support drafter)."""
    out = {"vocabulary": table5(target_strings, draft_strings), "psi_tree_nodes": psi_tree_nodes(target_strings, draft_strings)}
    if prompt_ids is not None:
        out["prompts"] = table5(target_strings, draft_strings, sorted(set(prompt_ids)))
    return out


def format_table5(report: dict[str, Any]) -> str:
    """Markdown: Table 5's layout (rows = statistics; columns = token length, number of combinations)
    for each token set, then the worst-case tree."""
    lines = []
    for key, label in (("vocabulary", "every target token"), ("prompts", "target tokens of the prompts")):
        t = report.get(key)
        if not t or not t["length"]:
            continue
        lines += [f"Table 5 ({label}: {t['tokens']:,} tokens, {t['not_expressible']:,} not expressible in the draft vocabulary)",
                  "", "| | token length (characters) | number of combinations |", "| --- | --- | --- |"]
        for stat in ("mean", "std", "min", "25%", "50%", "75%", "max"):
            lines.append(f"| {stat} | {t['length'][stat]:.2f} | {t['combinations'][stat]:,.2f} |")
        if t["largest"]:
            lines.append(f"\nmost combinations: {t['largest']['token']!r} ({t['largest']['combinations']:,})")
        lines.append("")
    lines.append(f"ψ's tree with a full-support drafter, no threshold K: {report['psi_tree_nodes']:,} draft forwards "
                 f"per target token (internal nodes, Appendix C)")
    return "\n".join(lines)
