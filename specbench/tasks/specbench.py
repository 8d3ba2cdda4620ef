"""``specbench``: Spec-Bench (Xia et al. 2024), 480 questions in 13 categories (80 two-turn MT-bench questions),
from ``data/spec_bench/question.jsonl`` of the Spec-Bench repository (``task.url``; ``conf/task/specbench.yaml``),
downloaded once into ``$SPECBENCH_DATA_CACHE`` (``specbench.tasks.sources.fetch_url``), or ``task.data_files``.
Rows: ``question_id``, ``category``, ``turns`` (a list of user turns), optionally ``reference``.
"""

from __future__ import annotations

from specbench.registry import ConfigError
from specbench.tasks.base import Prompt
from specbench.tasks.config import TaskConfig, dataset
from specbench.tasks.files import local_rows, read_rows
from specbench.tasks.rows import reference, require_fields
from specbench.tasks.sources import fetch_url, url_cache_path

URL = "https://raw.githubusercontent.com/hemingkx/Spec-Bench/main/data/spec_bench/question.jsonl"
DEFAULTS = {"url": URL}
FIELDS = ("question_id", "category", "turns")
LOCAL_FILES = True


def source(cfg: TaskConfig) -> str:
    url = cfg.setting("url")
    return f"{url} (cached at {url_cache_path(url)})"


@dataset("specbench")
def load(cfg: TaskConfig) -> list[Prompt]:
    """Spec-Bench's 480 questions (13 categories; 80 two-turn MT-bench questions)."""
    if cfg.data_files:
        rows = local_rows(cfg)
    else:
        rows = read_rows(fetch_url(cfg.setting("url"), cfg, FIELDS))
    require_fields(rows, FIELDS, cfg)
    out = []
    for r in rows:
        turns = r["turns"]
        if isinstance(turns, str):
            turns = [turns]
        if not turns or not all(isinstance(t, str) for t in turns):
            raise ConfigError(f"task specbench: question {r['question_id']}: 'turns' must be a list of strings")
        out.append(Prompt(str(r["question_id"]), str(r["category"]), tuple(turns), reference(r.get("reference"))))
    return out
