"""A pair and a target named by what they ran on (``analysis.frame`` applies it to every frame): the device kind,
the target's dtype, the draft's head. A name seen with one kind keeps its name; seen with several, each row's becomes
``<name>@<kind>`` (``analysis.frame``'s module docstring says which columns and why), so no table pools two runs that
measured different things. Every split is idempotent: a frame concatenated from split frames splits again from the
bare names (``split_runs``)."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from specbench.timed_on import device_type


def is_missing(value: Any) -> bool:
    """None or NaN: a record's null."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def device_kind(device_id: Any) -> str | None:
    """The kind of the device(s) of a ``device_id`` (module docstring): ``cpu@h`` is ``cpu``, ``cuda:GPU-1@h``
    is ``cuda``, several ids joined by ``,`` are their kinds deduplicated, sorted and joined by ``+``; None
    without an id."""
    if is_missing(device_id):
        return None
    kinds = {device_type(part.strip().partition("@")[0]) for part in str(device_id).split(",")}
    return "+".join(sorted(k for k in kinds if k)) or None


def _bare_name(name: Any, kind: str | None) -> Any:
    """A pair's (a target's) name without the ``@<kind>`` ``split_by_device`` gave it."""
    suffix = f"@{kind}"
    return name[: -len(suffix)] if kind and isinstance(name, str) and name.endswith(suffix) else name


#: the columns ``split_by_device`` names per device kind: every table groups by one of them (the GammaTune tables by
#: ``pair``; the hf-bench and cross-vocabulary tables, the category table and the AR baselines by ``target``)
DEVICE_SPLIT = ("pair", "target")


def split_by_device(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with ``device_kind`` read from ``device_id`` and every pair, and every target, that ran on more than
    one device kind named ``<name>@<kind>`` (module docstring), so no table pools a CPU's timings with a GPU's.
    Idempotent: a frame already split (several folders' frames concatenated) is split again from its bare names."""
    previous = df["device_kind"] if "device_kind" in df else pd.Series(None, index=df.index, dtype=object)
    own = [device_kind(d) for d in df["device_id"]]
    out = df.copy()
    bare_pairs = [_bare_name(p, k) for p, k in zip(df["pair"], previous, strict=True)]
    seen_pairs = _kinds_seen(bare_pairs, own)
    kinds = [kind if kind is not None or len(seen_pairs.get(pair, ())) != 1 else next(iter(seen_pairs[pair]))
             for pair, kind in zip(bare_pairs, own, strict=True)]
    out = _named_by_kind(df, list(previous), kinds)
    out["device_kind"] = pd.Series(kinds, index=df.index, dtype=object)
    return out


def split_by_dtype(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with every pair, and every target, whose records ran the target in more than one dtype
    (``target_dtype``, from the job's config) named ``<name>@<dtype>`` after any device kind (module docstring): a
    target in bfloat16 is another target than in float32, and their timings never pool or compare. A name seen in
    one dtype keeps its name. Idempotent: a name already split is split again from its bare name."""
    if "target_dtype" not in df:
        return df
    dtypes = [None if is_missing(d) else str(d) for d in df["target_dtype"]]
    return _named_by_kind(df, dtypes, dtypes)


def _hot_tags(df: pd.DataFrame) -> list[str | None]:
    """Per row, the draft's head: ``hot<k>`` (restricted to k tokens, ``draft_hot_vocab``), ``full`` (a draft model
    with its whole head), None (no draft model: the target alone, prompt lookup)."""
    hot = df["draft_hot_vocab"] if "draft_hot_vocab" in df else pd.Series(None, index=df.index, dtype=object)
    sizes = df["draft_vocab_size"] if "draft_vocab_size" in df else pd.Series(None, index=df.index, dtype=object)
    return [f"hot{int(h)}" if not is_missing(h) else ("full" if not is_missing(v) else None)
            for h, v in zip(hot, sizes, strict=True)]


def split_by_hot_vocab(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with every pair whose drafts ran with more than one head (the whole vocabulary, or restricted to the
    most frequent tokens: ``draft_hot_vocab``, ``specbench.models.hot_vocab``) named ``<pair>@hot<k>`` /
    ``<pair>@full`` after any device kind and dtype: another draft, never pooled with the first. A pair seen with
    one head keeps its name; the target's name never changes (its baseline is the same). Idempotent."""
    tags = _hot_tags(df)
    return _named_by_kind(df, tags, tags, columns=("pair",))


def _named_by_kind(df: pd.DataFrame, previous: list[str | None], kinds: list[str | None],
                   columns: tuple[str, ...] = DEVICE_SPLIT) -> pd.DataFrame:
    """``df`` with each of ``columns``' names stripped of their ``@<previous kind>`` and suffixed ``@<kind>`` where
    that bare name is seen with more than one kind."""
    out = df.copy()
    for column in columns:
        if column not in df:
            continue
        bare = [_bare_name(v, k) for v, k in zip(df[column], previous, strict=True)]
        seen = _kinds_seen(bare, kinds)
        out[column] = pd.Series([f"{v}@{kind}" if isinstance(v, str) and kind is not None and len(seen[v]) > 1 else v
                                 for v, kind in zip(bare, kinds, strict=True)], index=df.index, dtype=object)
    return out


def split_runs(df: pd.DataFrame) -> pd.DataFrame:
    """Every pair and target named by what it ran on: the device kind (``split_by_device``), then the target's dtype
    (``split_by_dtype``), then the draft's head (``split_by_hot_vocab``); idempotent (a frame concatenated from split
    frames is split again from the bare names)."""
    tags = _hot_tags(df)
    df = df.assign(pair=pd.Series([_bare_name(v, t) for v, t in zip(df["pair"], tags, strict=True)], index=df.index,
                                  dtype=object))
    if "target_dtype" in df:
        dtypes = [None if is_missing(d) else str(d) for d in df["target_dtype"]]
        df = df.assign(**{column: pd.Series([_bare_name(v, d) for v, d in zip(df[column], dtypes, strict=True)],
                                            index=df.index, dtype=object)
                          for column in DEVICE_SPLIT if column in df})
    return split_by_hot_vocab(split_by_dtype(split_by_device(df)))


def _kinds_seen(names: list[Any], kinds: list[str | None]) -> dict[Any, set[str]]:
    seen: dict[Any, set[str]] = {}
    for name, kind in zip(names, kinds, strict=True):
        if kind is not None:
            seen.setdefault(name, set()).add(kind)
    return seen
