"""``gsm8k``: GSM8K grade-school math word problems (Cobbe et al. 2021), one problem per prompt: the Hub's
``openai/gsm8k`` (subset ``main``, split ``test``: 1,319 problems) through ``datasets``
(``specbench.tasks.sources.hub_rows``), or ``task.data_files``. One of SpecDecode-Bench's four workloads
(``combined_gsm8k.jsonl``, whose traces the policy lab imports: ``runners.replay.import_specdecode_bench``), so a
real engine's acceptance on it can be set beside ours on the same questions. Rows: ``question``, ``answer``
(the worked solution ending in ``#### <number>``: the reference). The rows have no id: a prompt's id is its row
number.
"""

from __future__ import annotations

from specbench.tasks.base import Prompt
from specbench.tasks.config import TaskConfig, dataset
from specbench.tasks.rows import templated
from specbench.tasks.sources import hub_source, task_rows

TEMPLATE = "{question}"  # the question as it stands (no few-shot exemplars, no instruction)
DEFAULTS = {"path": "openai/gsm8k", "subset": "main", "split": "test", "template": TEMPLATE, "category": "math"}
FIELDS = ("question", "answer")
LOCAL_FILES = True


def source(cfg: TaskConfig) -> str:
    return hub_source(cfg)


@dataset("gsm8k")
def load(cfg: TaskConfig) -> list[Prompt]:
    """GSM8K math word problems (one question per prompt, its worked answer the reference)."""
    rows = task_rows(cfg, FIELDS)
    return templated(cfg, rows, cfg.setting("template"), "id", "answer", cfg.setting("category"))
