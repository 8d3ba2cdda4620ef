"""The papers' own reported numbers (``analysis/data/paper_numbers.csv``) and the
name matching that puts them beside measured ones.

CSV columns: ``paper`` (gammatune | heterogeneous-vocabularies), ``table``,
``source`` (section/table in the paper), ``target``, ``drafter``, ``pair`` (our
pair name, GammaTune Table 2 only; ``average`` for its Average column),
``dataset``, ``hardware``, ``method`` (our method key; ``hf_sd`` is Hugging Face
Transformers' standard SD, which has no exact twin here), ``method_label`` (the
paper's), ``temperature``, ``metric``, ``value``, ``std``, ``unit``, ``note``.

Models are matched by ``model_key``: lower case, organisation prefix and a
trailing ``*`` dropped, and the suffixes ``-instruct``/``-it``/``-hf``/``-vX.Y`` and the
quantization tags ``-int4``/``-int8`` removed (so ``lmsys/vicuna-13b-v1.5`` and ``vicuna-13b`` match, and GammaTune
Table 1's ``Llama-3.1-8B`` matches our ``llama-3.1-8b-instruct``). Datasets by
``dataset_key`` (``openai_humaneval`` = ``humaneval``, ``cnn_dm`` =
``cnn_dailymail``, ``spec_bench`` = ``specbench``).
"""

from __future__ import annotations

import re
from importlib import resources

import pandas as pd

_DEVICE = re.compile(r"@[a-z+]+$")
_SUFFIXES = re.compile(r"(-instruct|-it|-hf|-chat|-v\d+(\.\d+)*|-int4|-int8)$")
_DATASET_ALIASES = {"openai_humaneval": "humaneval", "cnn_dm": "cnn_dailymail", "cnndm": "cnn_dailymail",
                    "spec_bench": "specbench", "spec-bench": "specbench"}


def model_key(name: object) -> str:
    """A model's name as the papers' tables are matched by: lower case, no Hub owner, no ``-instruct``-like suffix,
    and no device kind (``analysis.run_names.split_by_device`` names a target run on two devices ``<name>@cuda``)."""
    if name is None or (isinstance(name, float) and name != name):
        return ""
    key = _DEVICE.sub("", str(name).strip()).lower().rsplit("/", 1)[-1].rstrip("*").replace("_", "-")
    previous = None
    while previous != key:
        previous, key = key, _SUFFIXES.sub("", key)
    return key


def dataset_key(name: object) -> str:
    if name is None or (isinstance(name, float) and name != name):
        return ""
    key = str(name).strip().lower()
    return _DATASET_ALIASES.get(key, key)


def load_paper_numbers() -> pd.DataFrame:
    """The transcribed tables, with ``target_key``/``drafter_key``/``dataset_key`` added."""
    with resources.files("analysis").joinpath("data/paper_numbers.csv").open("r", encoding="utf-8") as fh:
        df = pd.read_csv(fh, keep_default_na=False, na_values=[""])
    df["target_key"] = df["target"].map(model_key)
    df["drafter_key"] = df["drafter"].map(model_key)
    df["dataset_key"] = df["dataset"].map(dataset_key)
    return df


def gammatune_table1(paper: pd.DataFrame) -> pd.DataFrame:
    """GammaTune Table 1: ``target``, ``target_key``, ``ms_per_token``, ``note``."""
    rows = paper[(paper["paper"] == "gammatune") & (paper["table"] == "table1")]
    return rows[["target", "target_key", "value", "note"]].rename(columns={"value": "ms_per_token"})


def gammatune_table2(paper: pd.DataFrame) -> pd.DataFrame:
    """GammaTune Table 2: ``pair``, ``method``, ``mean``, ``std`` (pair ``average`` = its Average column)."""
    rows = paper[(paper["paper"] == "gammatune") & (paper["table"] == "table2")]
    return rows[["pair", "method", "value", "std"]].rename(columns={"value": "mean"}).reset_index(drop=True)


def hetero_rows(paper: pd.DataFrame) -> pd.DataFrame:
    """Heterogeneous-vocabularies Appendix D, one row per (table, target, dataset,
    hardware, method, drafter) with columns ttft_ms, tpot_ms, tokens_per_s, speedup."""
    rows = paper[paper["paper"] == "heterogeneous-vocabularies"].copy()
    rows["drafter"] = rows["drafter"].fillna("")
    keys = ["table", "source", "target", "target_key", "dataset", "dataset_key", "hardware", "method",
            "method_label", "drafter", "temperature"]
    wide = rows.pivot_table(index=keys, columns="metric", values="value", aggfunc="first", sort=False)
    return wide.reset_index()
