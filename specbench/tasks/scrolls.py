"""``scrolls``: SCROLLS (Shaham et al. 2022) long-context inputs (``task.subset``, qasper by default), as in the
heterogeneous-vocabularies benchmark (Timor et al. 2025; ``conf/task/scrolls.yaml``). ``tau/scrolls`` is a
script-only dataset that ``datasets`` >= 4 no longer runs, so the repository's ``<subset>.zip`` (the file its script
downloads) is fetched with ``huggingface_hub`` (``zip_path``) and ``<subset>/<split>.jsonl`` read from it
(``read_zip``); or ``task.data_files``. Rows: ``id``, ``pid``, ``input``, ``output`` (empty in the test split).
"""

from __future__ import annotations

import io
import os
import zipfile
from dataclasses import replace
from pathlib import Path

from specbench.registry import ConfigError
from specbench.tasks.base import Prompt
from specbench.tasks.config import TaskConfig, dataset
from specbench.tasks.files import local_rows, rows_from_json_text
from specbench.tasks.rows import templated
from specbench.tasks.sources import unreachable

# The prompt wording of hf-bench (github.com/keyboardAnt/hf-bench, hf_bench/benchmark.py), the benchmark code of
# Timor et al. 2025, whose paper does not print its prompts: a summary whatever the subset, as plain text.
TEMPLATE = "Summarize the following text:\n{input}\nSummary:\n"
SUBSETS = ("gov_report", "summ_screen_fd", "qmsum", "narrative_qa", "qasper", "quality", "contract_nli")
DEFAULTS = {"path": "tau/scrolls", "subset": "qasper", "split": "test", "template": TEMPLATE}
FIELDS = ("id", "pid", "input", "output")
LOCAL_FILES = True


def zip_path(cfg: TaskConfig) -> Path:
    """The Hub repository's ``<subset>.zip`` (the file ``scrolls.py`` downloads), via the HF cache."""
    subset, repo = cfg.setting("subset"), cfg.setting("path")
    what = f"{subset}.zip of the dataset repository {repo!r}"
    try:
        from huggingface_hub import hf_hub_download

        return Path(
            hf_hub_download(repo, f"{subset}.zip", repo_type="dataset", revision=cfg.revision or None)
        )
    except Exception as exc:
        raise unreachable(cfg, what, FIELDS, exc) from exc


def read_zip(path: str | os.PathLike, subset: str, split: str) -> list[dict]:
    """The rows of ``<subset>/<split>.jsonl`` (else the one ``<split>.jsonl``) in the zip at ``path``."""
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        member = f"{subset}/{split}.jsonl"
        if member not in names:
            alt = [n for n in names if n.rsplit("/", 1)[-1] == f"{split}.jsonl"]
            if not alt:
                splits = sorted(n.rsplit("/", 1)[-1].removesuffix(".jsonl") for n in names if n.endswith(".jsonl"))
                raise ConfigError(f"task.split {split!r} is not in {str(path)!r}; it has {splits}")
            member = alt[0]
        with zf.open(member) as f:
            return rows_from_json_text(io.TextIOWrapper(f, encoding="utf-8").read(), f"{path}:{member}")


def source(cfg: TaskConfig) -> str:
    path, subset, split = cfg.setting("path"), cfg.setting("subset"), cfg.setting("split")
    return f"huggingface_hub: {path}/{subset}.zip -> {subset}/{split}.jsonl"


@dataset("scrolls")
def load(cfg: TaskConfig) -> list[Prompt]:
    """SCROLLS long-context tasks (``task.subset``; qasper by default): one prompt per row, in the
    split's stored order, as hf-bench takes them (``hf_bench/benchmark.py``: ``dataset.take(N)``,
    the example id its position; no de-duplication), so ``task.n_prompts=30`` is hf-bench's first
    30 rows. A row repeating an earlier row's ``id`` (several reference outputs) keeps its own
    prompt, id ``<id>#<k>`` for its ``k``-th repeat, so every prompt id stays unique."""
    subset = cfg.setting("subset")
    if subset not in SUBSETS:
        raise ConfigError(f"task.subset {subset!r} is not a SCROLLS subset; known: {', '.join(SUBSETS)}")
    template = cfg.setting("template")
    if cfg.data_files:
        rows = local_rows(cfg)
    else:
        rows = read_zip(zip_path(cfg), subset, cfg.setting("split"))
    prompts = templated(cfg, rows, template, "id", "output", (cfg.category or subset))
    repeats: dict[str, int] = {}
    for i, prompt in enumerate(prompts):
        k = repeats.get(prompt.prompt_id, 0)
        repeats[prompt.prompt_id] = k + 1
        if k:
            prompts[i] = replace(prompt, prompt_id=f"{prompt.prompt_id}#{k}")
    return prompts
