"""``sharegpt``: ShareGPT conversations (the Vicuna training scrape), one conversation's opening turn per prompt:
the file ``ShareGPT_V3_unfiltered_cleaned_split.json`` of the Hub dataset repository
``anon8231489123/ShareGPT_Vicuna_unfiltered``, fetched with ``huggingface_hub`` (``hub_file``), or
``task.data_files``. One of SpecDecode-Bench's four workloads (``combined_sharegpt.jsonl``, whose traces the policy
lab imports: ``runners.replay.import_specdecode_bench``), the open-ended chat one, so a real engine's acceptance on
it can be set beside ours. Rows: ``id``, ``conversations`` (a list of ``{"from": "human" | "gpt", "value": text}``
turns); the file is one JSON array of them, which ``task.data_files`` reads as it reads JSON lines
(``specbench.tasks.files``). The prompt is the first turn's ``value``, the reference the second's; a prompt's id is
the row's ``id``.

Source. SpecDecode-Bench builds the workload with vLLM's benchmark datasets as its fork holds them
(``SpecDecode-Bench/vllm``). ``scripts/common.py: get_dataset`` (read at 00ff3b4 and a6ccf87, the versions the
index holds; none at 20be7b3; the same for this workload) makes ``ShareGPTDataset(dataset_path=<a local
ShareGPT_V3_unfiltered_cleaned_split.json>, random_seed=SEED)``, ``SEED = 42`` (the path hard-coded there; their
README, 197dadb, says ``$SHAREGPT_PATH``), the file downloaded by ``scripts/run-l3-8b.sh`` (75a86ce) with
``huggingface-cli download anon8231489123/ShareGPT_Vicuna_unfiltered ShareGPT_V3_unfiltered_cleaned_split.json
--repo-type dataset`` (no revision: the repository's default branch). ``vllm/benchmarks/datasets_bench.py`` (commit
20be7b3): ``ShareGPTDataset.load_data`` reads the file with ``json.load``, keeps the entries with ``conversations``
of two turns or more, then ``random.seed(42)`` and ``random.shuffle``; ``ShareGPTDataset.sample`` takes, in that
order, ``conversations[0]["value"]`` as the prompt (whatever its ``from``: the first turn, the human's in the usual
row) and ``conversations[1]["value"]`` as the completion, applies the tokenizer's chat template to the prompt as one
user message (``prompt_format: auto`` does the same where the tokenizer has one), and skips a row failing
``is_valid_sequence`` on token counts (the templated prompt and the completion each at least 4 tokens, the prompt at
most 1024, both together at most 2048; ``scripts/bench_latency.py`` calls ``sample`` with ``output_len=None``, so
the completion's own length counts) until it has ``--num_reqs`` requests (500 in their run scripts). We keep the
same rows and shuffle them the same way (``conversations``; ``random.Random(42)`` is the generator
``random.seed(42)`` sets up), so our order is theirs.

What differs: the token-count filter is not applied (it needs the target's tokenizer, which loading a task does not
have), so the first ``n_prompts`` here are their first requests plus the rows their filter skips in between (a prompt
too long for the target is refused or cut by ``task.truncate``); the file's bytes are not pinned (they pin no
revision either: ``task.revision`` pins one).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from specbench.registry import ConfigError
from specbench.tasks.base import Prompt
from specbench.tasks.config import TaskConfig, dataset
from specbench.tasks.files import local_rows, read_rows
from specbench.tasks.rows import templated
from specbench.tasks.sources import unreachable

#: the file of the Hub repository SpecDecode-Bench downloads (``scripts/run-l3-8b.sh``)
FILE = "ShareGPT_V3_unfiltered_cleaned_split.json"
#: their shuffle's seed (``scripts/common.py: SEED``, given to ``ShareGPTDataset`` as ``random_seed``)
SEED = 42
#: the first turn as it stands (``ShareGPTDataset.sample``: ``prompt``, chat-templated later, as ours is)
TEMPLATE = "{prompt}"
DEFAULTS = {"path": "anon8231489123/ShareGPT_Vicuna_unfiltered", "template": TEMPLATE, "category": "conversation"}
FIELDS = ("id", "conversations")
LOCAL_FILES = True


def hub_file(cfg: TaskConfig) -> Path:
    """``FILE`` of the Hub dataset repository ``task.path`` (at ``task.revision``), via the HF cache."""
    repo = cfg.setting("path")
    what = f"{FILE} of the dataset repository {repo!r}" + (f" at revision {cfg.revision!r}" if cfg.revision else "")
    try:
        from huggingface_hub import hf_hub_download

        return Path(hf_hub_download(repo, FILE, repo_type="dataset", revision=cfg.revision or None))
    except Exception as exc:
        raise unreachable(cfg, what, FIELDS, exc) from exc


def conversations(cfg: TaskConfig, rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The rows ``ShareGPTDataset.load_data`` keeps (``conversations`` of two turns or more) as prompt fields
    (``opening``), in its order: shuffled by a generator seeded with ``SEED``, as ``random.seed(SEED);
    random.shuffle(data)`` shuffles (the permutation depends on the list's length alone)."""
    kept = [opening(cfg, row, i) for i, row in enumerate(rows) if len(row.get("conversations") or ()) >= 2]
    random.Random(SEED).shuffle(kept)
    return kept


def opening(cfg: TaskConfig, row: Mapping[str, Any], index: int) -> dict[str, Any]:
    """A conversation as a prompt's fields: ``id``, ``prompt`` (the first turn's ``value``) and ``completion`` (the
    second's), the names ``ShareGPTDataset.sample`` gives them; a turn without a text ``value`` is refused, naming
    the row (its number among the rows read) and its id."""
    turns = row["conversations"]
    texts = [turn.get("value") if isinstance(turn, Mapping) else None for turn in turns[:2]]
    if not all(isinstance(text, str) for text in texts):
        raise ConfigError(
            f"task {cfg.name!r}: row {index} (id {row.get('id')!r}): its first two turns must be "
            f'{{"from": ..., "value": <text>}} objects, got {turns[:2]!r}'
        )
    return {"id": row.get("id"), "prompt": texts[0], "completion": texts[1]}


def source(cfg: TaskConfig) -> str:
    revision = f" revision={cfg.revision}" if cfg.revision else ""
    return f"huggingface_hub: {cfg.setting('path')}/{FILE}{revision}"


@dataset("sharegpt")
def load(cfg: TaskConfig) -> list[Prompt]:
    """ShareGPT conversations in SpecDecode-Bench's order (one prompt each: the first turn, the second the
    reference), from the Hub's file or ``task.data_files``."""
    rows = local_rows(cfg) if cfg.data_files else read_rows(hub_file(cfg))
    fields = conversations(cfg, rows)
    return templated(cfg, fields, cfg.setting("template"), "id", "completion", cfg.setting("category"))
