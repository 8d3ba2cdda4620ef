"""``instructcoder``: InstructCoder code editing (Li et al. 2023, arXiv:2310.20329), one edit request per prompt: the
Hub's ``likaixin/InstructCoder`` (split ``train``) through ``datasets`` (``specbench.tasks.sources.hub_rows``), or
``task.data_files``. One of SpecDecode-Bench's four workloads (``combined_instructcoder.jsonl``, whose traces the
policy lab imports: ``runners.replay.import_specdecode_bench``), the one where drafting pays most (an edit copies
most of its input), so a real engine's acceptance on it can be set beside ours. Rows: ``instruction``, ``input`` (the
code to edit), ``output`` (the edited code: the reference). The rows have no id: a prompt's id is its row number.

Source. SpecDecode-Bench builds the workload with vLLM's benchmark datasets as its fork holds them
(``SpecDecode-Bench/vllm``, commit 20be7b3): ``scripts/common.py: get_dataset`` reads ``likaixin/InstructCoder``,
split ``train``, no subset and no revision (the Hub's default branch), and
``vllm/benchmarks/datasets_bench.py: InstructCoderDataset.sample`` makes each prompt
``f"{item['input']}\\n\\n{item['instruction']} Just output the code, do not include any explanation."``, then applies
the tokenizer's chat template (``prompt_format: auto`` does the same where the tokenizer has one). The row format
(``instruction``, ``input``, ``output``: "114,239 instruction-input-output triplets") is the dataset card's, as
that class's docstring quotes it. What differs: their ``HuggingFaceDataset.load_data`` streams the split and
shuffles it with seed 42 (``scripts/common.py: SEED``); we read the split in its own order and take the first
``n_prompts`` rows, so the prompts are the workload's kind and wording, not its exact rows.
"""

from __future__ import annotations

from specbench.tasks.base import Prompt
from specbench.tasks.config import TaskConfig, dataset
from specbench.tasks.rows import templated
from specbench.tasks.sources import hub_source, task_rows

#: SpecDecode-Bench's prompt (``InstructCoderDataset.sample``): the code, a blank line, the instruction, and the
#: request for code only
TEMPLATE = "{input}\n\n{instruction} Just output the code, do not include any explanation."
DEFAULTS = {"path": "likaixin/InstructCoder", "split": "train", "template": TEMPLATE, "category": "code_editing"}
FIELDS = ("instruction", "input", "output")
LOCAL_FILES = True


def source(cfg: TaskConfig) -> str:
    return hub_source(cfg)


@dataset("instructcoder")
def load(cfg: TaskConfig) -> list[Prompt]:
    """InstructCoder edit requests (one per prompt, the edited code the reference)."""
    rows = task_rows(cfg, FIELDS)
    return templated(cfg, rows, cfg.setting("template"), "id", "output", cfg.setting("category"))
