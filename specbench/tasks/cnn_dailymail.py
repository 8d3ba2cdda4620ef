"""``cnn_dailymail``: CNN/DailyMail 3.0.0 news summarization, one article per prompt, as in the
heterogeneous-vocabularies benchmark (Timor et al. 2025; ``conf/task/cnn_dailymail.yaml``): the Hub's
``abisee/cnn_dailymail`` through ``datasets`` (``specbench.tasks.sources.hub_rows``), or ``task.data_files``.
Rows: ``article``, ``highlights`` (the reference summary), ``id``.
"""

from __future__ import annotations

from specbench.tasks.base import Prompt
from specbench.tasks.config import TaskConfig, dataset
from specbench.tasks.rows import templated
from specbench.tasks.sources import hub_source, task_rows

# The prompt wording of the heterogeneous-vocabularies benchmark (Timor et al. 2025). The paper does not
# print its prompts; this is the one of its benchmark code (github.com/keyboardAnt/hf-bench,
# hf_bench/benchmark.py), which feeds it to the tokenizer as plain text, and takes the first 30 rows of
# the validation split.
TEMPLATE = "Summarize the following article:\n{article}\nSummary:\n"
DEFAULTS = {"path": "abisee/cnn_dailymail", "subset": "3.0.0", "split": "validation", "template": TEMPLATE,
            "category": "summarization"}
FIELDS = ("article", "highlights", "id")
LOCAL_FILES = True


def source(cfg: TaskConfig) -> str:
    return hub_source(cfg)


@dataset("cnn_dailymail")
def load(cfg: TaskConfig) -> list[Prompt]:
    """CNN/DailyMail news summarization (one article per prompt)."""
    template = cfg.setting("template")
    rows = task_rows(cfg, FIELDS)
    return templated(cfg, rows, template, "id", "highlights", cfg.setting("category"))
