"""``speed_bench``: SPEED-Bench (Abramovich et al. 2026, NVIDIA: a unified benchmark for speculative decoding),
the Hub's ``nvidia/SPEED-Bench`` through ``datasets`` (``specbench.tasks.sources.hub_dataset``), or
``task.data_files`` (``conf/task/speed_bench.yaml``). ``load``'s docstring says what it holds and where each fact
was read. Rows: ``question_id``, ``category``, ``turns`` (or ``messages``), ``sub_category``, ``source``,
``src_id``, ``difficulty``, ``multiturn``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from specbench.registry import ConfigError
from specbench.tasks.base import LoadedRows, Prompt
from specbench.tasks.config import TaskConfig, dataset
from specbench.tasks.files import local_rows
from specbench.tasks.rows import require_fields
from specbench.tasks.sources import hub_dataset, hub_source

log = logging.getLogger(__name__)

PATH = "nvidia/SPEED-Bench"  # Abramovich et al. 2026; ``load``'s docstring says where this is read
#: the Hub revision SPEED-Bench is read at unless ``task.revision`` names another: its default branch, named
#: (no commit of the dataset could be read where this was written, so none is pinned); a job's summary records
#: it and the commit ``datasets`` resolved it to (``specbench.tasks.TaskFacts``). Pin a commit with
#: ``task.revision=<sha>``.
REVISION = "main"
#: what the public SPEED-Bench copy holds instead of a prompt whose source forbids redistribution (or is
#: gated: ``cais/hle``); NVIDIA's prepare scripts replace it with the source's text (Model-Optimizer
#: ``examples/specdec_bench/specdec_bench/datasets/speed.py``: ``TURNS_PLACEHOLDER``).
PLACEHOLDER = "FULL BENCHMARK DATA SHOULD BE FETCHED FROM THE SOURCE USING SPECDEC_BENCH"
DEFAULTS = {"path": PATH, "subset": "qualitative", "split": "test", "revision": REVISION, "unresolved": "error"}
FIELDS = ("question_id", "category", "turns")  # also sub_category, source, src_id, difficulty, multiturn
LOCAL_FILES = True


def source(cfg: TaskConfig) -> str:
    return hub_source(cfg)


def _turns(row: Mapping[str, Any], cfg: TaskConfig) -> tuple[str, ...]:
    """A SPEED-Bench row's user turns: ``turns`` (the Hub's schema), else the user ``content`` of
    ``messages`` (the ``<config>.jsonl`` of NeMo-Skills' prepare script, which vLLM's loader reads)."""
    if "turns" in row:
        turns = row["turns"]
        turns = [turns] if isinstance(turns, str) else list(turns or [])
    elif "messages" in row:
        turns = [m.get("content") for m in row["messages"] or [] if isinstance(m, Mapping) and m.get("role") == "user"]
    else:
        raise ConfigError(f"task {cfg.name!r}: question {row['question_id']} has no 'turns' (nor 'messages')")
    if not turns or not all(isinstance(t, str) for t in turns):
        raise ConfigError(f"task {cfg.name!r}: question {row['question_id']}: 'turns' must be a list of strings")
    return tuple(turns)


@dataset("speed_bench")
def load(cfg: TaskConfig) -> LoadedRows:
    """SPEED-Bench (Abramovich et al. 2026, NVIDIA: a unified benchmark for speculative decoding): its
    ``qualitative`` config holds 880 prompts, 80 in each of 11 categories (``coding``, ``humanities``,
    ``math``, ``multilingual``, ``qa``, ``rag``, ``reasoning``, ``roleplay``, ``stem``,
    ``summarization``, ``writing``); the ``throughput_1k`` ... ``throughput_32k`` configs
    (``task.subset``) hold 1,536 long prompts each, in the categories ``low_entropy``, ``mixed``,
    ``high_entropy``. One prompt per row: id ``question_id``, category ``category``, the user turns
    ``turns`` (several for a multi-turn row: a later turn is asked after the model's own answer, as
    for Spec-Bench and as NVIDIA's client does); the rows carry no reference answer.

    Where this was read: the dataset card of ``nvidia/SPEED-Bench`` on the Hub (configs ``qualitative``,
    ``throughput_{1,2,8,16,32}k``, split ``test`` only; fields ``question_id``, ``category``,
    ``sub_category``, ``turns``, ``source``, ``src_id``, ``difficulty``, ``multiturn``); NVIDIA
    Model-Optimizer ``examples/specdec_bench``: ``specdec_bench/datasets/speed.py`` (``SPEEDBench._load_dataset``:
    ``load_dataset("nvidia/SPEED-Bench", config, split="test")`` or a local parquet file or folder;
    ``_fetch_all_turns_data``, ``TURNS_PLACEHOLDER``), ``run.py`` (``run_loop``: every turn appended
    to the chat after the previous answer) and ``prepare_data.py``; NeMo-Skills
    ``nemo_skills/dataset/speed-bench/prepare.py`` (``prepare_data``: writes ``<config>.jsonl`` with
    ``messages`` = one user message per turn, the file that vLLM's ``vllm bench serve --dataset-name
    speed_bench`` reads); the 11 category names from AIPerf's ``aiperf/dataset/loader/speed_bench.py``
    (``SpeedBenchLoader``) and its SPEED-Bench tutorial. None of these was run here, and no row of the
    dataset was read: the test fixture's rows are invented in its schema.

    Placeholders: the public copy replaces the text of rows whose source forbids redistribution or is
    gated (``cais/hle``) by ``PLACEHOLDER``; NVIDIA's prepare scripts fetch it from the 14
    source datasets. A row still holding it is refused (``task.unresolved=error``, the default, as
    NVIDIA's ``SPEEDBench`` and AIPerf refuse it) or left out with a warning that counts them per
    category (``task.unresolved=skip``); the rows left out are returned as ``LoadedRows.left_out``, so the
    selection's missing rows are counted (``specbench.tasks.TaskFacts``) and the records' task is named
    ``speed_bench-skip<N>`` (``TaskFacts.label``): the placeholder rows cluster by category (their sources), so
    a set without them is another benchmark, never pooled with the whole one. For the full set, give the
    prepared file as ``task.data_files`` (``test.parquet`` of Model-Optimizer's ``prepare_data.py``, or
    ``qualitative.jsonl`` of NeMo-Skills'); both schemas are read.

    Revision: read at ``task.revision`` (default ``REVISION``, the Hub's ``main`` named: no commit could be read
    where this was written), returned with the commit ``datasets`` resolved it to
    (``specbench.tasks.sources.hub_dataset``); local files have neither.
    """
    revision = resolved_revision = None
    if cfg.data_files:
        rows = local_rows(cfg)
        where = f"local files {cfg.data_files!r}"
    else:
        path, subset, split = cfg.setting("path"), cfg.setting("subset"), cfg.setting("split")
        revision = cfg.setting("revision")
        rows, resolved_revision = hub_dataset(cfg, path, subset, split, FIELDS)
        where = f"{path} ({subset}, {split}, revision {revision})"
    require_fields(rows, ("question_id", "category"), cfg)
    prompts = [Prompt(str(r["question_id"]), str(r["category"]), _turns(r, cfg)) for r in rows]
    resolved = [p for p in prompts if not any(PLACEHOLDER in t for t in p.turns)]
    if len(resolved) == len(prompts):
        return LoadedRows(prompts, frozenset(), revision, resolved_revision)
    unresolved = [p for p in prompts if any(PLACEHOLDER in t for t in p.turns)]
    counts: dict[str, int] = {}
    for p in unresolved:
        counts[p.category] = counts.get(p.category, 0) + 1
    per_category = ", ".join(f"{c} {n}" for c, n in sorted(counts.items()))
    what = (f"{len(unresolved)} of {len(prompts)} rows of {where} hold SPEED-Bench's placeholder instead of "
            f"their text ({per_category})")
    if cfg.setting("unresolved") == "skip":
        log.warning("task %s: %s; left out (task.unresolved=skip): %d prompts remain", cfg.name, what, len(resolved))
        return LoadedRows(prompts, frozenset(p.prompt_id for p in unresolved), revision, resolved_revision)
    raise ConfigError(
        f"task {cfg.name!r}: {what}. Resolve them once with NVIDIA's prepare script (Model-Optimizer "
        "examples/specdec_bench/prepare_data.py --dataset speed, or NeMo-Skills nemo_skills/dataset/speed-bench/"
        "prepare.py) and give its output as task.data_files=/path/to/test.parquet (or qualitative.jsonl), or "
        f"set task.unresolved=skip to run the {len(resolved)} rows that ship with their text."
    )
