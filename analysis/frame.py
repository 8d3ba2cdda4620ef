"""Records in, one DataFrame out: one row per record (one prompt turn of one job).

Every job folder holds ``records.jsonl`` and, once the job ends, ``summary.json``
(``specbench.records``). ``load_records`` finds every ``records.jsonl`` under a
folder at any depth and adds a few columns from the job's summary:

* what the record says wins; the summary's resolved config only fills fields the
  record lacks (an older schema, a W&B table without the column) and the identity
  fields ``pair``/``method``/``task``/``target`` when null: ``pair`` =
  ``config.pair.name``, ``method`` = ``config.method.name``, ``task`` =
  ``config.task.name``, ``gamma_init`` = ``config.gamma`` (never for ``method ==
  "ar"``; a record's null ``gamma_init`` stays null), ``temperature``, ``seed``,
  ``target``/``draft`` = ``config.pair.{target,draft}.name``, ``max_new_tokens``,
  ``method_params`` (the method's knobs), ``hetero_params`` (the cross-vocabulary algorithm's config node,
  ``config.hetero``), ``engine`` (our loop's speed options that were on,
  ``fast_linear=all,fused_prefill``, and ``width=8`` where the summary says block-invariant forwards ran; ``plain``
  when none; null for AR/transformers jobs), ``ar_cache`` (an AR method's ``cache``, ``dynamic``
  when older configs had none), and, always from the config, ``target_path`` / ``draft_path``
  (Hub ids: hf-bench's labels are guessed from them) and ``target_quant``;
* ``method`` becomes its variant key: the record's own ``method_key`` (written by the job,
  ``specbench.config.method.method_key``: every knob off its default in the method's YAML at run time,
  ``gammatune[eta=0.5]``; ``gammatune[carryover]`` when γ was carried over between prompts; the
  cross-vocabulary algorithm's knobs off theirs; every committed record carries one,
  ``scripts/migrate_method_identity.py``), or for a row without one (a hand-made row) the key a job would
  write for it today (the same function); then
  ``specdecode[fast_linear=all]`` when the pair's rows ran more than one engine (an engine every row of the
  pair shares names no variant, ``shared_engines_dropped``), so no table pools two settings, or two engines,
  under one name, and a sweep on one engine finds its baseline (``specdecode``);
* every column is typed by the record's declaration (``specbench.records.declaration``: numbers numeric,
  lists as lists, mappings as mappings, text and flags with null as ``None``; ``repeat``, ``batch_size`` and
  ``schema_version`` of older records as declared, ``absent``), and the columns this module adds by
  ``FRAME_COLUMNS``, so a table may index any column;
* ``device_kind``: the kind of the device(s) the record decoded on, read from its ``device_id``
  (``runners.jobs.device_share``): ``cpu@<host>`` is ``cpu``, ``cuda:<uuid>@<host>`` is ``cuda``, several
  ids (a pair spread over devices) are their kinds deduplicated, sorted and joined by ``+`` (``cpu+cuda``).
  Since the top-level ``device`` key moves a pair onto a device, one pair name can run on the CPU and on a
  GPU, and every table groups by ``pair`` or ``target``: so when the frame holds a pair (a target) on more than
  one device kind, each of its records' ``pair`` (``target``) becomes ``<name>@<kind>``
  (``gemma3-270m_prompt-lookup@cuda`` beside ``…@cpu``) and their timings never pool; a pair seen on one kind
  keeps its name. A record without ``device_id``
  (written before it existed) counts as the kind of its pair's other records when they all share one kind,
  and otherwise keeps the bare pair name and a null ``device_kind``: a cell of its own, pooled with neither
  (``split_by_device``; idempotent, so frames concatenated from several folders can be split again);
* ``target_dtype``: the dtype the job's config names for the target (``pair.target.dtype``). A target run in two
  dtypes is two targets: when the frame holds a pair (a target) in more than one, each record's
  ``pair`` (``target``) becomes ``<name>@<dtype>`` after any device kind (``gemma3-270m_prompt-lookup@bfloat16``
  beside ``…@float32``), so no table pools or compares the two (``split_by_dtype``);
* a draft whose LM head was restricted to the most frequent tokens (``draft_hot_vocab``) is another draft: a pair
  that ran its draft with more than one head becomes ``<pair>@hot<k>`` / ``<pair>@full`` after the rest
  (``split_by_hot_vocab``; ``split_runs`` does all three);
* ``job_status``: the summary's ``status`` (``"complete"`` / ``"failed"``), or
  ``"incomplete"`` when there is no summary yet (a running or killed job), or
  ``"unreadable"`` when the summary is not valid JSON;
* ``job_dir`` (relative to the folder given), ``job_error`` and ``device``
  (from the summary's provenance, when it says) and ``source = "local"``.

* ``repeat`` (which timing of a prompt turn, ``specbench.records``) is 0 and ``host_probe_ms`` null
  for records without them (schema 3 and older): one timing per turn, no probe.

A folder whose ``records.jsonl`` holds one (prompt, turn, repeat) twice was written by two processes
at once (before job folders were locked, ``runners.jobs.lock``): ``load_records`` refuses it
(``DuplicateRecords``, naming the folder) rather than averaging a prompt twice.

Failed and incomplete jobs keep their records here (nothing is thrown away on
load); ``complete_only`` is the filter the tables use by default, because a job
cut short holds a different prompt set from its siblings and would bias a
comparison across methods or initial γ.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.modeled import attach_modeled
from analysis.run_names import (
    _bare_name,
    split_runs,
)
from analysis.run_names import is_missing as _missing
from analysis.settings import scenarios as split_scenarios
from specbench.config import EngineConfig
from specbench.config.method import NOT_KNOBS, method_key, tagged
from specbench.record_io import read_records
from specbench.records import FieldDeclaration, declaration
from specbench.registry import ConfigError

#: the columns the frame adds to a record's (module docstring), typed as a record's fields are
FRAME_COLUMNS = (
    FieldDeclaration("max_new_tokens", "number", True, "tokens", "frame", "The job's `max_new_tokens`.", None),
    FieldDeclaration("hetero_params", "mapping", True, "", "frame", "The job's `hetero` node.", None),
    FieldDeclaration("engine", "text", True, "", "frame", "The engine options that were on (`engine_tag`).", None),
    FieldDeclaration("device_kind", "text", True, "", "frame", "The kind of the device(s) the record decoded on, "
                     "from its `device_id` (`cpu`, `cuda`, `cpu+cuda`; `split_by_device`).", None),
    *(FieldDeclaration(name, "text", True, "", "frame", doc, None) for name, doc in (
        ("target_path", "The target's source."), ("draft_path", "The draft's source."),
        ("target_quant", "The target's quantization."),
        ("target_dtype", "The dtype the target's forwards ran in, as the job's config names it (`pair.target.dtype`; "
                         "`split_by_dtype`)."), ("job_status", "The summary's status."),
        ("job_dir", "The job folder."), ("job_error", "The summary's error."), ("device", "The summary's device."),
        ("source", "Where the row came from.")))
)


def column_types() -> dict[str, FieldDeclaration]:
    """Every column of the frame and how it is typed: the record's declared fields (``specbench.records``) and
    ``FRAME_COLUMNS``."""
    return {d.name: d for d in (*declaration(), *FRAME_COLUMNS)}


COLUMNS = tuple(column_types())
IDENTITY_KEYS = ("pair", "method", "task", "target")
ALWAYS_FROM_CONFIG = ("target_path", "draft_path", "target_quant", "target_dtype", "engine")


class DuplicateRecords(ValueError):
    """A job folder's records hold a (prompt, turn, repeat) twice (module docstring)."""


def check_unique(records: Iterable[Mapping[str, Any]], job_dir: str) -> None:
    seen: set[tuple[Any, Any, Any]] = set()
    for record in records:
        key = (record.get("prompt_id"), record.get("turn"), record.get("repeat") or 0)
        if key in seen:
            raise DuplicateRecords(
                f"{job_dir}: records.jsonl holds prompt {key[0]!r} turn {key[1]} (repeat {key[2]}) twice (two "
                "processes wrote this job at once); refusing to analyse it. Re-run that job with overwrite=true."
            )
        seen.add(key)


def _dig(obj: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(obj, Mapping) or key not in obj:
            return None
        obj = obj[key]
    return obj


#: the engine tag of our loop with every option off (plain transformers kernels; also older jobs, with no engine node)
PLAIN = "plain"


def shared_engines_dropped(engines: list[str | None], pairs: list[str | None]) -> list[str | None]:
    """The engine tags with a knob every row of a comparison shares removed: per pair, when
    every tagged row (our loop's) has the same tag, it names no variant — the sweep ran one engine — and
    is dropped, so ``specdecode`` is the baseline of ``gammatune`` whatever engine both ran (the default
    ``fast_linear=auto,verify_buckets=auto`` included); when a pair's rows ran two engines, every row keeps its
    tag (``specdecode[plain]`` beside ``specdecode[fast_linear=all]``) and no table pools them."""
    seen: dict[str | None, set[str]] = {}
    for engine, pair in zip(engines, pairs, strict=True):
        if engine is not None:
            seen.setdefault(pair, set()).add(engine)
    return [None if engine is not None and len(seen[pair]) == 1 else engine
            for engine, pair in zip(engines, pairs, strict=True)]


def engine_tag(node: Any) -> str | None:
    """The engine options that were on (``specbench.config.EngineConfig``), as ``key=value`` items
    joined by ``,`` (``fused_prefill`` alone for a boolean); None when every option is off or the
    config has none (older jobs)."""
    if not isinstance(node, Mapping):
        return None
    try:
        engine = EngineConfig.from_mapping(node)
    except ConfigError:
        return None
    items = []
    for key in ("fast_linear", "verify_buckets", "fused_prefill"):
        value = getattr(engine, key)
        if value is True:
            items.append(key)
        elif isinstance(value, Mapping):
            items.append(f"{key}=" + "/".join(f"{n}:{m}:{r}" for n, (m, r) in sorted(value.items())))
        elif value:
            items.append(f"{key}={value}")
    if engine.graphs != "eager":  # the static cache's rows never pool with the papers' eager loop's
        items.append(f"graphs={engine.graphs}")
    if engine.draft_compile:  # another draft (its logits' last bits): never pooled with the eager draft's rows
        items.append("draft_compile")
    return ",".join(items) or None


def config_columns(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """The record-like columns a job's resolved config implies (values may be None).

    ``pair``/``method``/``task`` may be a group node with a ``name`` or a plain
    string (a W&B sweep locks its parameters to the swept strings)."""
    config = config or {}

    def name_of(key: str) -> Any:
        value = config.get(key)
        return value.get("name") if isinstance(value, Mapping) else value

    method = name_of("method")
    node = config.get("method")
    runner = node.get("runner") if isinstance(node, Mapping) else None
    params = ({k: v for k, v in node.items() if k not in NOT_KNOBS}  # a knob, not a name (display)
              if isinstance(node, Mapping) else None)
    ar = runner == "ar" or method == "ar"
    return {
        "pair": name_of("pair"),
        "method": method,
        "task": name_of("task"),
        "gamma_init": None if ar else config.get("gamma"),
        "temperature": config.get("temperature"),
        "seed": config.get("seed"),
        "target": _dig(config, "pair", "target", "name"),
        "draft": None if ar else _dig(config, "pair", "draft", "name"),
        "max_new_tokens": config.get("max_new_tokens"),
        "method_params": params,
        "hetero_params": dict(config["hetero"]) if isinstance(config.get("hetero"), Mapping) else None,
        "ar_cache": (params or {}).get("cache", "dynamic") if ar else None,
        "engine": (engine_tag(config.get("engine")) or PLAIN) if runner == "speculative" else None,
        "target_path": _dig(config, "pair", "target", "path"),
        "draft_path": None if ar else _dig(config, "pair", "draft", "path"),
        "target_quant": _dig(config, "pair", "target", "quant"),
        "target_dtype": _dig(config, "pair", "target", "dtype"),
    }


def job_rows(
    records: Iterable[Mapping[str, Any]],
    summary: Mapping[str, Any] | None,
    job_dir: str = "",
    source: str = "local",
    status: str | None = None,
) -> list[dict[str, Any]]:
    """Rows of one job: its records completed from its summary (rules in the module doc)."""
    summary = summary or {}
    filled = config_columns(summary.get("config"))
    ran = summary.get("engine")
    if int((summary.get("config") or {}).get("batch_size") or 1) > 1 and isinstance(ran, Mapping):
        # a batched job (ar too): the kernels its batched runner ran, as its summary names them (``auto``
        # resolved: the same config ran the plain kernels before the batched engine took fast_linear)
        filled["engine"] = engine_tag({"fast_linear": ran.get("fast_linear") or False, "verify_buckets": False,
                                       "fused_prefill": False, "graphs": ran.get("graphs") or "eager"}) or PLAIN
    if isinstance(ran, Mapping) and ran.get("width") and filled["engine"] is not None:
        # block-invariant forwards as they ran (``engine.width``, ``auto`` resolved by the target's dtype): a variant
        # of the engine, never pooled with the same loop at free widths
        tag = f"width={ran['width']}"
        filled["engine"] = tag if filled["engine"] == PLAIN else f"{filled['engine']},{tag}"
    if status is None:
        status = str(summary.get("status") or "incomplete") if summary else "incomplete"
    provenance = summary.get("provenance")
    device = None
    if isinstance(provenance, Mapping):
        device = provenance.get("device") or provenance.get("hardware")
    rows = []
    for record in records:
        row = dict(record)
        for key, value in filled.items():
            absent = key not in row or (key in IDENTITY_KEYS and _missing(row[key]))
            if (absent or key in ALWAYS_FROM_CONFIG) and value is not None:
                row[key] = value
        if "hfbench_ttft_ms" not in row and row.get("ar_cache") is not None and row.get("ttft_ms") is not None:
            # records from before hf-bench's fields (schema 1): for autoregressive decoding they are ours
            tpot = row.get("tpot_ms")
            row.update(hfbench_ttft_ms=row["ttft_ms"], hfbench_tpot_ms=tpot,
                       hfbench_tokens_per_s=1000.0 / tpot if tpot else None)
        params = row.get("method_params")
        if isinstance(params, Mapping) and "eta" in params and "expand_on" not in params \
                and int(row.get("schema_version") or 1) < 2:
            # GammaTune before expand_on existed (schema 1) expanded when every drafted token was accepted
            row["method_params"] = {**params, "expand_on": "drafted"}
        row.update(job_status=status, job_dir=job_dir, job_error=summary.get("error"), device=device, source=source)
        rows.append(row)
    return rows


def typed_column(values: pd.Series, declared: FieldDeclaration) -> Any:
    """A column as its declaration types it (module docstring): numbers numeric (an older record's missing value
    read as ``absent`` when declared), lists as lists (else empty), mappings as mappings (else empty, or ``None``
    where the field may be null), text as ``str`` and flags as written, null as ``None``."""
    kind = declared.kind
    if kind == "number":
        numbers = pd.to_numeric(values, errors="coerce")
        return numbers if declared.absent is None else numbers.fillna(declared.absent).astype(type(declared.absent))
    if kind == "list":
        return [v if isinstance(v, list) else [] for v in values]
    if kind == "mapping":
        empty = None if declared.nullable else {}
        return [v if isinstance(v, Mapping) else (dict(empty) if empty is not None else None) for v in values]
    if kind == "text":
        return pd.Series([None if _missing(v) else str(v) for v in values], index=values.index, dtype=object)
    return pd.Series([None if _missing(v) else v for v in values], index=values.index, dtype=object)  # a flag


def variant_key(recorded: Any, method: Any, params: Any, engine: str | None, hetero: Any, hetero_params: Any) -> Any:
    """A row's method key (module docstring): the record's own ``method_key`` when it has one, else the key a job
    would write today (``specbench.config.method.method_key``); then the engine options that name a variant
    (``engine``). A method that is no name, or already a key (``[``: a frame keyed before), stays as it is."""
    if not isinstance(recorded, str) or not recorded:
        if not isinstance(method, str) or not isinstance(params, Mapping) or "[" in method:
            return method
        recorded = method_key(method, params, hetero, hetero_params)
    base, _, tags = recorded.partition("[")
    return tagged(base, [t for t in tags.rstrip("]").split(",") if t] + (engine.split(",") if engine else []))


def rows_to_frame(rows: list[Mapping[str, Any]]) -> pd.DataFrame:
    """A frame with every column present (missing ones all-null) and typed by the record's declaration
    (``column_types``), so a table may always index any column; a pair on several device kinds split
    (``split_by_device``), a target in several dtypes split (``split_by_dtype``); ``method`` keyed (module docstring)."""
    df = pd.DataFrame(list(rows))
    for name, declared in column_types().items():
        df[name] = typed_column(df[name] if name in df.columns else pd.Series(None, index=df.index, dtype=object),
                                declared)
    df = split_runs(df)
    engines = list(df["engine"])
    engines = shared_engines_dropped(engines, list(df["pair"]))
    if "gamma_mode" in df:  # one γ per round for a whole batch: a variant of the method (analysis.settings)
        engines = [",".join(filter(None, [e, "batch_gamma=shared"])) if m == "shared" else e
                   for e, m in zip(engines, df["gamma_mode"], strict=True)]
    df["method"] = [variant_key(k, m, p, e, h, hp) for k, m, p, e, h, hp in
                    zip(df["method_key"], df["method"], df["method_params"], engines, df["hetero"], df["hetero_params"],
                        strict=True)]
    return df


def read_summary(job_dir: Path) -> tuple[dict[str, Any] | None, str | None]:
    """(summary, status override): ``(None, None)`` when absent, ``({}, "unreadable")`` when broken."""
    path = job_dir / "summary.json"
    if not path.exists():
        return None, None
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}, "unreadable"
    return (summary, None) if isinstance(summary, dict) else ({}, "unreadable")


def load_records(results_dir: str | Path) -> pd.DataFrame:
    """Every record under ``results_dir`` (any depth), one row each (see module doc).

    An empty frame with the schema's columns when nothing is found. The modeled walls of an interleaved
    sweep's records are attached (``analysis.modeled.attach_modeled``, which matches its cost rows by the bare
    pair name)."""
    root = Path(results_dir)
    rows: list[dict[str, Any]] = []
    for path in sorted(root.rglob("records.jsonl")):
        job_dir = path.parent
        summary, status = read_summary(job_dir)
        rel = str(job_dir.relative_to(root)) if job_dir != root else "."
        records = read_records(path)
        check_unique(records, str(job_dir))
        rows.extend(job_rows(records, summary, job_dir=rel, status=status))
    df = rows_to_frame(rows)
    bare = [_bare_name(p, k) for p, k in zip(df["pair"], df["device_kind"], strict=True)]
    return attach_modeled(df.assign(pair=bare), root).assign(pair=df["pair"])


def complete_only(df: pd.DataFrame) -> pd.DataFrame:
    """Rows of jobs whose summary says ``complete``."""
    return df[df["job_status"] == "complete"]


def scenarios(df: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """Split by every setting that changes what is measured (``analysis.settings.scenarios``: task,
    temperature, the sampling processors in force, prompt format, ``max_new_tokens``): a speedup
    across initial γ is only meaningful within one. The suffix is ``""`` when the frame holds a
    single scenario, else e.g. ``"-spec_bench-t0"`` (``"-spec_bench-t0-m128"`` when
    ``max_new_tokens`` differs too; used in artefact file names)."""
    return split_scenarios(df)
