"""Timor et al.'s heterogeneous-vocabularies paper (SLEM, TLI): its main tables (Section 5, Appendix D),
speedups over autoregressive decoding under hf-bench's definitions and ours, and the labels of their rows.

Timor et al.'s numbers come from hf-bench (keyboardAnt/hf-bench; ../shared/notes/
hf-bench-evaluation.md). ``hfbench_table`` computes them as hf-bench does, from the
``hfbench_*`` fields of the records (``specbench.records``):

* the example filter (``hf_bench/summarize_results.py: get_df_concat_filtered``, ``minimum_new_toks
  = 128`` in ``main``): an example (prompt turn) that produced fewer than ``min_new_tokens`` new
  tokens under *any* method, drafter, temperature or AR cache is dropped for all of them, within
  one target and task (hf-bench: one target, submission and dataset; here: one results folder);
* per cell (target, task, temperature, method as run, drafter, initial γ): TTFT = arithmetic mean
  of ``hfbench_ttft_ms``; TPOT = harmonic mean of ``hfbench_tpot_ms``; tokens/s = harmonic mean of
  ``hfbench_tokens_per_s`` (``get_df_summary_of_results``: ``mean`` of ttft_ms, ``hmean`` of tpot_ms
  and out_toks_per_sec);
* speedup = that tokens/s over AR's, same target, task and **temperature** (``get_df_summary_of
  _results``: merged on target, dataset_path, temperature, submission_id), for two AR baselines under
  their own column names: offloaded KV cache (``method=ar_offloaded``: how hf-bench's AR ran)
  and the dynamic cache the speculative runs use ("same cache"). A missing baseline leaves the cell
  empty with a footnote; it is never taken from another temperature.

Rows are labelled by what ran (``rule_method``: the recorded cross-vocabulary rule, ``sd`` on one
vocabulary), not guessed from model names as hf-bench's tables were (``speedups.ipynb``, cell 13:
``get_method_name``); a footnote says where hf-bench would have labelled a row differently, or where
its transformers would have run another algorithm (it compared ``config.vocab_size`` only).

``hetero_table`` gives the same cells under our own definitions (``specbench.records``), without
the paper's numbers beside them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from analysis.artefacts import SETTING, artefact
from analysis.comparison import METHOD_LINK, weigh
from analysis.comparison import notes as shared_notes
from analysis.metrics import (
    POOLINGS,
    SHARED_MARK,
    SHARED_NOTE,
    check_pooling,
    fmt_mean_std,
    fmt_num,
    hmean,
    is_aa_twin,
    method_labels,
    ordered_methods,
    shared_device_mismatch,
    throughput,
    throughput_by,
)
from analysis.paper import dataset_key, hetero_rows, model_key
from analysis.render import Table
from analysis.uncertainty import Jackknife, fmt_ci
from specbench.drafter_kinds import cross_vocabulary_kinds, drafter_kind

HETERO_KEYS = ["target", "task", "temperature", "method", "draft", "gamma_init"]
PAPER_MIN_NEW_TOKENS = 128  # hf-bench's summarize_results.py: minimum_new_toks
AR_KEYS = ("ar", "ar_offloaded", "hf_native_ar", "hf_native_ar_offloaded")  # hf_native_*: transformers' generate()
#: where hf-bench's definitions are written once (``hfbench_table``'s caption names it; ``comparison.METHOD_LINK``)
HFBENCH_DEFINITIONS = METHOD_LINK.replace("#reading-the-tables", "#hf-benchs-definitions")


def rule_method(method: str, hetero: str | None, ar_cache: str | None = None, ar_loop: str | None = None) -> str:
    """The row key of the heterogeneous tables, from what ran: ``ar`` / ``ar_offloaded`` for
    autoregressive decoding by our loop (by its KV cache), ``hf_native_ar`` / ``hf_native_ar_offloaded``
    by transformers' ``generate()`` (``method.loop: transformers``: never pooled with ours), else the
    algorithm (the recorded cross-vocabulary rule, ``sd`` on one vocabulary) followed by the γ
    policy's method when it is not the fixed γ (``slem+assistant_threshold``); the variant tags of
    ``method`` stay on the row (``slrs[max_nodes=8]`` for the fixed γ: SLRS with a knob, read
    ``SLRS (max_nodes = 8)``, not another method; ``slem+gammatune[eta=0.5]``)."""
    if isinstance(ar_cache, str) and ar_cache:
        base = "hf_native_ar" if ar_loop == "transformers" or str(method).startswith("hf_native_ar") else "ar"
        return f"{base}_offloaded" if ar_cache == "offloaded" else base
    if method in AR_KEYS:
        return method
    rule = hetero if isinstance(hetero, str) and hetero else "sd"
    policy, bracket, tags = str(method).partition("[")
    return rule + bracket + tags if policy == "specdecode" else f"{rule}+{method}"


def hfbench_label(target_path: str | None, draft_path: str | None, temperature: float) -> str | None:
    """The method label hf-bench's paper tables would print (``speedups.ipynb`` cell 13,
    ``get_method_name`` / ``is_method_sd``): SD when the drafter is of the target's family by name
    (the first ``-``-separated word of the target id found in the drafter id; never for phi targets;
    DeepSeek targets need ``llama`` or ``qwen`` in both ids), else SLEM at temperature 0 and TLI
    above. None without both ids."""
    if not isinstance(target_path, str) or not isinstance(draft_path, str):
        return None
    target, draft = target_path.lower(), draft_path.lower()
    family = target.split("-")[0]
    if "phi" in family:
        same = False
    elif "deepseek" in family:
        same = ("llama" in target and "llama" in draft) or ("qwen" in target and "qwen" in draft)
    else:
        same = family in draft
    if same:
        return "SD"
    return "SLEM" if temperature == 0 else "TLI"


def hfbench_runtime_rule(target_vocab: Any, draft_vocab: Any, temperature: float) -> str | None:
    """What hf-bench's transformers ran (``_validate_assistant`` compares ``config.vocab_size`` only):
    SD on equal sizes, else SLEM when greedy and TLI when sampling. None when the sizes are unknown."""
    try:
        a, b = int(target_vocab), int(draft_vocab)
    except (TypeError, ValueError):
        return None
    if a == b:
        return "SD"
    return "SLEM" if temperature == 0 else "TLI"


def _labelled(df: pd.DataFrame) -> pd.DataFrame:
    """Records of (target, task) groups that hold AR records, with the ``method`` column = ``rule_method``
    (A/A twins left out: ``analysis.metrics.aa_original``)."""
    data = df[df["target"].notna() & ~is_aa_twin(df["method"])]
    ar_cache = data["ar_cache"] if "ar_cache" in data.columns else pd.Series(None, index=data.index)
    ar_cache = ar_cache.where(~((data["method"] == "ar") & ar_cache.isna()), "dynamic")
    params = data["method_params"] if "method_params" in data.columns else pd.Series(None, index=data.index)
    loops = [p.get("loop") if isinstance(p, Mapping) else None for p in params]
    data = data.assign(method=[rule_method(m, h, c, lp) for m, h, c, lp in
                               zip(data["method"], data["hetero"], ar_cache, loops, strict=True)])
    with_ar = set(map(tuple, data.loc[data["method"].isin(AR_KEYS), ["target", "task"]].drop_duplicates().values))
    data = data[[(t, k) in with_ar for t, k in zip(data["target"], data["task"], strict=True)]]
    data = data.assign(draft=[None if m in AR_KEYS else d for m, d in zip(data["method"], data["draft"], strict=True)])
    return data


def _sorted(measured: pd.DataFrame) -> pd.DataFrame:
    order = {m: i for i, m in enumerate(ordered_methods(measured["method"]))}
    measured = measured.assign(_m=measured["method"].map(order))
    return measured.sort_values(["target", "task", "temperature", "_m", "draft", "gamma_init"],
                                na_position="first").drop(columns="_m")


def _hardware(group: pd.DataFrame) -> str:
    devices = group["device"].dropna()
    return str(devices.iloc[0]) if len(devices) else ""


class _Notes:
    """Numbered footnotes, each text once."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def mark(self, text: str) -> str:
        if text not in self.texts:
            self.texts.append(text)
        return f" [{self.texts.index(text) + 1}]"

    def caption(self) -> str:
        return "".join(f" [{i}] {t}" for i, t in enumerate(self.texts, start=1))


def min_tokens_filter(data: pd.DataFrame, min_new_tokens: int) -> pd.DataFrame:
    """hf-bench's example filter (module docstring): drop, within each target and task, every
    example (prompt turn) on which any record produced fewer than ``min_new_tokens`` new tokens."""
    if min_new_tokens <= 0 or data.empty:
        return data
    keys = ["target", "task", "prompt_id", "turn"]
    short = data.loc[data["new_tokens"] < min_new_tokens, keys].drop_duplicates()
    bad = set(map(tuple, short.astype(object).values))
    return data[[tuple(v) not in bad for v in data[keys].astype(object).values]]


@artefact("tables/hetero_speedup", "heterogeneous-vocabulary table (hf-bench's definitions, beside the paper)",
          scope=SETTING, needs=("records", "paper", "min_new_tokens"),
          about="Timor et al.'s tables (Sec. 5, App. D) as hf-bench computes them, example filter on, beside the paper")
def hfbench_table(
    df: pd.DataFrame,
    paper: pd.DataFrame | None = None,
    min_new_tokens: int = PAPER_MIN_NEW_TOKENS,
    name: str = "hetero_speedup",
) -> Table | None:
    """Timor et al.'s tables as hf-bench computes them (module docstring), the paper's numbers for
    the same target, dataset and temperature beside the measured rows (``paper``; same definitions).
    ``min_new_tokens``: hf-bench's example filter (0: off); the ``n kept`` column says how many
    examples each cell kept out of how many it had."""
    data = _labelled(df)
    if data.empty or (~data["method"].isin(AR_KEYS)).sum() == 0:
        return None
    kept_index = min_tokens_filter(data, min_new_tokens).index
    if len(kept_index) == 0:
        return None
    notes = _Notes()
    measured = _hfbench_measured(data.assign(_kept=data.index.isin(kept_index)), notes)
    table = _beside_the_paper(measured, paper)
    display = _hfbench_display(table, method_labels(df))
    kept_how = (f"examples that produced < {min_new_tokens} new tokens under any method, drafter, temperature or "
                "AR cache of the same target and dataset are dropped from every row (hf-bench's filter; 'n kept' = "
                "examples kept / examples the row had)" if min_new_tokens > 0 else
                "no example filter (hf-bench's drops examples shorter than 128 new tokens: see hetero_speedup)")
    caption = (
        "Speedup over autoregressive decoding under hf-bench's definitions (Timor et al., Sec. 5 and Appendix D), "
        "against AR with its KV cache offloaded (hf-bench's baseline) and with the speculative runs' dynamic cache, "
        f"at the same temperature; {kept_how}. 'paper': Appendix D for the same target, dataset and temperature (its "
        f"own hardware). Definitions (TTFT, TPOT, Tok/s, the means, the row labels): {HFBENCH_DEFINITIONS}."
        + notes.caption()
    )
    return Table(name, caption, display, table)


def _hfbench_measured(data: pd.DataFrame, notes: _Notes) -> pd.DataFrame:
    """``hfbench_table``'s measured rows, one per cell (``HETERO_KEYS``) with a kept example (``_kept``): hf-bench's
    means of the kept records (module docstring), the speedups over its two AR baselines, the footnotes (``notes``)."""
    cells, examples = {}, {}
    for values, group in data.groupby(HETERO_KEYS, dropna=False, sort=True):
        if group["_kept"].any():
            cells[values] = group[group["_kept"]]
            examples[values] = len(group[["prompt_id", "turn"]].drop_duplicates())
    # hf-bench timed transformers' generate() with the offloaded cache: hf_native_ar_offloaded is its own
    # baseline; our loop with that cache (ar_offloaded) stands in where it did not run (a footnote says which)
    bases: dict[str, dict] = {"hf_native_ar_offloaded": {}, "ar_offloaded": {}, "ar": {}}
    for values, group in cells.items():
        row = dict(zip(HETERO_KEYS, values, strict=True))
        if row["method"] in bases:
            bases[row["method"]][(row["target"], row["task"], row["temperature"])] = hmean(group["hfbench_tokens_per_s"])
    rows = []
    for values, group in cells.items():
        row = dict(zip(HETERO_KEYS, values, strict=True))
        tps = hmean(group["hfbench_tokens_per_s"])
        where = (row["target"], row["task"], row["temperature"])
        native, ours, dyn = (bases[k].get(where) for k in ("hf_native_ar_offloaded", "ar_offloaded", "ar"))
        off = native or ours
        label_note = ""
        if row["method"] not in AR_KEYS:
            label_note = _label_note(row, group, notes)
        row.update(
            source="measured", hardware=_hardware(group),
            ttft_ms=float(group["hfbench_ttft_ms"].mean()), tpot_ms=hmean(group["hfbench_tpot_ms"]),
            tokens_per_s=tps,
            speedup=tps / off if off else math.nan,
            speedup_same_cache=tps / dyn if dyn else math.nan,
            n_kept=len(group[["prompt_id", "turn"]].drop_duplicates()), n_examples=examples[values],
            label_note=label_note,
            note_offloaded=(
                notes.mark("Divided by AR in transformers' generate() with the offloaded KV cache "
                           "(method=hf_native_ar_offloaded): the baseline hf-bench timed.") if native else
                notes.mark("Divided by AR in specbench's loop with the offloaded KV cache (method=ar_offloaded); "
                           "hf-bench timed transformers' generate() (method=hf_native_ar_offloaded), which did not "
                           "run here.") if ours else
                notes.mark("No AR run with an offloaded KV cache (method=hf_native_ar_offloaded or ar_offloaded, "
                           "GPU only) at this temperature for this target and dataset: hf-bench's speedup cannot be "
                           "formed (left empty, never taken from another temperature or cache).")),
            note_same="" if dyn else notes.mark(
                "No AR run with the dynamic KV cache (method=ar) at this temperature for this target and dataset: "
                "left empty."),
        )
        rows.append(row)
    return _sorted(pd.DataFrame(rows))


def _beside_the_paper(measured: pd.DataFrame, paper: pd.DataFrame | None) -> pd.DataFrame:
    """The measured rows, each target × dataset × temperature followed by the paper's rows for it (``paper``)."""
    blocks = []
    published = hetero_rows(paper) if paper is not None else None
    for (target, task, temp), group in measured.groupby(["target", "task", "temperature"], sort=False, dropna=False):
        blocks.append(group)
        if published is None:
            continue
        hit = published[(published["target_key"] == model_key(target)) & (published["dataset_key"] == dataset_key(task))
                        & np.isclose(published["temperature"].astype(float), float(temp))]
        if not hit.empty:
            blocks.append(pd.DataFrame({
                "target": target, "task": task, "temperature": temp, "method": hit["method"].values,
                "draft": hit["drafter"].values, "gamma_init": math.nan, "source": "paper",
                "hardware": hit["hardware"].values, "ttft_ms": hit["ttft_ms"].values, "tpot_ms": hit["tpot_ms"].values,
                "tokens_per_s": hit["tokens_per_s"].values, "speedup": hit["speedup"].values,
                "speedup_same_cache": math.nan, "n_kept": math.nan, "n_examples": math.nan,
                "label_note": "", "note_offloaded": "", "note_same": "",
                "paper_label": (hit["method_label"] + " / " + hit["target"] + " / " + hit["dataset"]).values,
            }))
    return pd.concat(blocks, ignore_index=True)


def _hfbench_display(table: pd.DataFrame, label: Callable[[str], str]) -> pd.DataFrame:
    """The reader's frame of ``hfbench_table``."""
    paper_row = table["source"] == "paper"
    return pd.DataFrame({
        "Target": table["target"], "Dataset": table["task"], "T": table["temperature"].map(lambda v: fmt_num(v, 1)),
        "Method": [label(m) + n for m, n in zip(table["method"], table["label_note"], strict=True)],
        "Drafter": [d if (m not in AR_KEYS and isinstance(d, str) and d) else "—"
                    for m, d in zip(table["method"], table["draft"], strict=True)],
        "γ": table["gamma_init"].map(lambda v: fmt_num(v, 0)), "Source": table["source"], "Hardware": table["hardware"],
        "TTFT (ms, hf-bench)": table["ttft_ms"].map(lambda v: fmt_num(v, 1)),
        "TPOT (ms, hf-bench)": table["tpot_ms"].map(lambda v: fmt_num(v, 1)),
        "Tok/s (hf-bench)": table["tokens_per_s"].map(lambda v: fmt_num(v, 1)),
        "Speedup vs offloaded AR (as hf-bench)": [fmt_mean_std(v) + n for v, n in
                                                  zip(table["speedup"], table["note_offloaded"], strict=True)],
        "Speedup vs same-cache AR": [fmt_mean_std(v) + n for v, n in
                                     zip(table["speedup_same_cache"], table["note_same"], strict=True)],
        "n kept": ["" if p else f"{int(k)}/{int(e)}" for p, k, e in
                   zip(paper_row, table["n_kept"], table["n_examples"], strict=True)],
    })


def rule_labels() -> dict[str, str]:
    """hf-bench's labels of what ran: ``SD`` on one vocabulary, and the algorithms transformers chooses by itself for
    a draft of another tokenizer (their declared ``auto_at``: SLEM and TLI), upper-cased as hf-bench prints them."""
    return {"sd": "SD", **{rule: rule.upper() for rule in cross_vocabulary_kinds() if drafter_kind(rule).auto_at}}


def _label_note(row: dict, group: pd.DataFrame, notes: _Notes) -> str:
    """A footnote marker when hf-bench would have labelled or run this row differently (module doc)."""
    ran = row["method"].split("+", 1)[0].split("[", 1)[0]
    ran_label = rule_labels().get(ran)
    if ran_label is None:
        return ""
    first = group.iloc[0]
    temp = float(row["temperature"])
    label = hfbench_label(first.get("target_path"), first.get("draft_path"), temp)
    runtime = hfbench_runtime_rule(first.get("target_vocab_size"), first.get("draft_vocab_size"), temp)
    same_tok = first.get("tokenizers_identical")
    parts = []
    if label is not None and label != ran_label:
        parts.append(f"hf-bench's tables would have labelled it {label} (guessed from the model names)")
    if runtime is not None and runtime != ran_label:
        sizes = f"vocab_size {int(first['target_vocab_size'])} and {int(first['draft_vocab_size'])}"
        tok = ("" if same_tok is None else
               ", although the tokenizers are the same" if same_tok and runtime != "SD" else
               ", although the tokenizers differ" if not same_tok and runtime == "SD" else "")
        parts.append(f"its transformers would have run {runtime} ({sizes}{tok})")
    if not parts:
        return ""
    text = f"{row['target']} with {row['draft']}, T = {fmt_num(temp, 1)}: {ran_label} ran here; " + "; ".join(parts) + "."
    return notes.mark(text)


@artefact("tables/hetero_speedup_unfiltered", "heterogeneous-vocabulary table (hf-bench's definitions, unfiltered)",
          scope=SETTING, needs=("records",), when=lambda inputs: inputs.min_new_tokens > 0,
          about="hetero_speedup without hf-bench's example filter (every example), without the paper's numbers")
def hfbench_unfiltered_table(df: pd.DataFrame) -> Table | None:
    """``hfbench_table`` of every example (no example filter) and without the paper's numbers; made
    when the filtered one drops examples (``--min-new-tokens`` > 0)."""
    return hfbench_table(df, None, 0, name="hetero_speedup_unfiltered")


@artefact("tables/hetero_speedup_ours", "heterogeneous-vocabulary table (our definitions)", scope=SETTING,
          needs=("records", "pooling"),
          about="Timor et al.'s cells under specbench's definitions: TTFT, TPOT, tokens/s, speedup over AR, 95 % CIs")
def hetero_table(df: pd.DataFrame, pooling: str = "pooled") -> Table | None:
    """The heterogeneous-vocabulary cells under **our** definitions (``specbench.records``): TTFT
    (ms) = mean per-prompt ``ttft_ms`` (the target's prefill); TPOT (ms) = mean per-prompt
    ``tpot_ms``; tokens/s as ``pooling`` says; speedup = tokens/s over AR's (dynamic KV cache, the
    speculative runs' own) for the same target, task and temperature; none at that temperature:
    empty cell and a footnote. No paper numbers here: they follow hf-bench's definitions
    (``hfbench_table``). Tok/s and speedup with their paired jackknife CI (``analysis.uncertainty``),
    ``≈`` on a row not resolved from its neighbour by Tok/s within its target, task and temperature."""
    check_pooling(pooling)
    data = _labelled(df)
    if data.empty or (~data["method"].isin(AR_KEYS)).sum() == 0:
        return None
    ar = data[data["method"] == "ar"]
    base = {(r["target"], r["task"], r["temperature"]): r["tokens_per_s"]
            for r in throughput_by(ar, ["target", "task", "temperature"], pooling).to_dict("records")}
    jackknife = Jackknife(data, pooling)
    notes = _Notes()
    rows = []
    for values, group in data.groupby(HETERO_KEYS, dropna=False, sort=True):
        row = dict(zip(HETERO_KEYS, values, strict=True))
        tps = throughput(group, pooling)
        ar_tps = base.get((row["target"], row["task"], row["temperature"]))
        ar_rows = ar[(ar["target"] == row["target"]) & (ar["task"] == row["task"])
                     & (ar["temperature"] == row["temperature"])]
        estimate = jackknife.estimate(group)
        row.update(source="measured", hardware=_hardware(group), ttft_ms=float(group["ttft_ms"].mean()),
                   tpot_ms=float(group["tpot_ms"].mean()), tokens_per_s=tps,
                   speedup=tps / ar_tps if ar_tps else math.nan, n_records=len(group), note="",
                   shared_device=row["method"] != "ar" and shared_device_mismatch(pd.concat([group, ar_rows])),
                   _estimate=estimate, _speedup=estimate / jackknife.estimate(ar_rows))
        if not ar_tps:
            row["note"] = notes.mark("No AR run (dynamic cache) at this temperature for this target and task: "
                                     "speedup left empty, never taken from another temperature.")
        rows.append(row)
    table = _sorted(pd.DataFrame(rows))
    groups = table.groupby(["target", "task", "temperature"], dropna=False, sort=False).ngroup()
    weighed = {stat: weigh({(g, i): e for g, i, e in zip(groups, table.index, table[stat], strict=True)},
                           ranked=lambda key, stat=stat: stat == "_estimate")  # a speedup shares its row's rank
               for stat in ("_estimate", "_speedup")}
    for stat, column in (("_estimate", "tokens_per_s"), ("_speedup", "speedup")):
        bounds = [weighed[stat][(g, i)].interval for g, i in zip(groups, table.index, strict=True)]
        table[f"{column}_lo"], table[f"{column}_hi"] = [b[0] for b in bounds], [b[1] for b in bounds]
    ranked = [weighed["_estimate"][(g, i)] for g, i in zip(groups, table.index, strict=True)]
    table["rank"] = pd.array([w.rank for w in ranked], dtype="Int64")
    table["resolved"] = [w.resolved for w in ranked]
    display = pd.DataFrame({
        "Target": table["target"], "Dataset": table["task"], "T": table["temperature"].map(lambda v: fmt_num(v, 1)),
        "Method": table["method"].map(method_labels(df)),
        "Drafter": [d if (m not in AR_KEYS and isinstance(d, str) and d) else "—"
                    for m, d in zip(table["method"], table["draft"], strict=True)],
        "γ": table["gamma_init"].map(lambda v: fmt_num(v, 0)), "Hardware": table["hardware"],
        "TTFT (ms)": table["ttft_ms"].map(lambda v: fmt_num(v, 1)),
        "TPOT (ms)": table["tpot_ms"].map(lambda v: fmt_num(v, 1)),
        "Tok/s": table["tokens_per_s"].map(lambda v: fmt_num(v, 1)),
        "Tok/s 95 % CI": [fmt_ci(w.interval, 1) + w.mark for w in ranked],
        "Speedup vs AR": [fmt_mean_std(v) + (SHARED_MARK if shared else "") + n for v, n, shared in
                          zip(table["speedup"], table["note"], table["shared_device"], strict=True)],
        "Speedup 95 % CI": [fmt_ci(e.interval(), 2, "×") for e in table["_speedup"]],
        "n": table["n_records"],
    })
    caption = (
        "Heterogeneous vocabularies under specbench's own definitions (hf-bench's, beside the paper's numbers: "
        f"hetero_speedup); Tok/s = {POOLINGS[pooling]}; speedup over AR with the dynamic KV cache, same target, "
        "dataset and temperature; unfiltered; methods labelled by what ran (SD = one vocabulary). The speedup's "
        "interval carries AR's uncertainty too. "
        + shared_notes(jackknife, "within its target, dataset and T by Tok/s (their speedups share AR's denominator)")
        + notes.caption()
    )
    if table["shared_device"].any():
        caption += " " + SHARED_NOTE
    return Table("hetero_speedup_ours", caption, display, table.drop(columns=["_estimate", "_speedup"]))

