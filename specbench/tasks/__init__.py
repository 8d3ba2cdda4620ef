"""Tasks: where prompts come from, and how a turn is formatted for a model.

One module per dataset, registered by its name: ``TASKS`` maps the ``loader:`` of ``conf/task/<name>.yaml`` to
``specbench.tasks.<name>``, which declares it (``@dataset("<name>")`` on its ``load``; found by reading this
package's sources) and is imported the first time it is chosen (lm-evaluation-harness's lazy registry). A dataset
module declares its defaults, its rows' fields, its source and its loader (``specbench.tasks.config.TaskModule``).
A new dataset is one module here, one ``conf/task/<name>.yaml`` and one fixture, ``tests/fixtures/tasks/<name>.jsonl``
(``tests/specbench/test_task_modules.py`` says so for each; ``docs/pages/extending.md``).

What the datasets share, one concept a module (declaring no dataset):

* ``base``: ``Prompt`` (one benchmark item) and what a load found out (``LoadedRows``, ``TaskFacts``);
* ``config``: ``TaskConfig`` (the validated ``task`` node), the registry ``TASKS`` and ``TaskModule``;
* ``load``: ``load_task`` / ``load_task_facts`` (a dataset's rows, then the selections common to every task:
  ``categories``, ``per_category``, ``n_prompts``) and ``task_source`` (where a task reads, in one line);
* ``files``: rows from local files (``task.data_files``: json, jsonl, parquet);
* ``sources``: rows from public sources (a URL, the Hub), and the error saying how to give local files instead;
* ``rows``: rows into prompts (a ``task.template`` filled from a row, a reference answer, required fields);
* ``formats``: a turn formatted for the model (``task.prompt_format``: ``format_turn``, ``encode_turn``).

The names other code uses are importable from here.
"""

from specbench.tasks.base import SKIPPED_LABEL, LoadedRows, Prompt, TaskFacts
from specbench.tasks.config import TASKS, TaskConfig, TaskModule
from specbench.tasks.formats import add_special_tokens, encode_turn, format_turn, vicuna_v11_prompt
from specbench.tasks.load import load_task, load_task_facts, read_task, select, task_source

__all__ = [
    "SKIPPED_LABEL", "TASKS", "LoadedRows", "Prompt", "TaskConfig", "TaskFacts", "TaskModule", "add_special_tokens",
    "encode_turn", "format_turn", "load_task", "load_task_facts", "read_task", "select", "task_source",
    "vicuna_v11_prompt",
]
