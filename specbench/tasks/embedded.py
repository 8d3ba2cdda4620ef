"""``embedded``: the prompt set shipped inside the package (``specbench/data/prompts.jsonl``), the default task:
no network, and no ``task.data_files`` (``conf/task/embedded.yaml``). Rows: ``id``, ``category``, ``prompt``.
"""

from __future__ import annotations

from importlib import resources

from specbench.tasks.base import Prompt
from specbench.tasks.config import TaskConfig, dataset
from specbench.tasks.files import rows_from_json_text

DEFAULTS: dict[str, str] = {}
FIELDS = ("id", "category", "prompt")
LOCAL_FILES = False  # the package's own rows, whatever task.data_files says


def source(cfg: TaskConfig) -> str:
    return "specbench/data/prompts.jsonl (in the package)"


@dataset("embedded")
def load(cfg: TaskConfig) -> list[Prompt]:
    """The prompt set shipped inside the package (``specbench/data/prompts.jsonl``)."""
    text = resources.files("specbench").joinpath("data/prompts.jsonl").read_text(encoding="utf-8")
    return [Prompt(str(r["id"]), r["category"], (r["prompt"],)) for r in rows_from_json_text(text, "prompts.jsonl")]
