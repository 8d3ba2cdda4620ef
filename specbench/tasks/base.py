"""What a task is made of: ``Prompt`` (one benchmark item), and what a load found out (``LoadedRows``,
``TaskFacts``).

What a load found out: a dataset's loader may return ``LoadedRows`` instead of a list — every
row it read, the ids of rows it left out (SPEED-Bench's placeholder rows under ``task.unresolved=skip``), the source
revision asked for and the one the source resolved it to. ``specbench.tasks.load_task_facts`` returns the
selection and its ``TaskFacts``: where the rows came from, the revisions, and how many rows of the *selection*
were left out (``specbench.tasks.select`` run on every row read, less the ones this run kept: 0 when the run
holds the set the benchmark would select), per category. ``TaskFacts.label`` is the task as records name it:
the task's name, or ``<name>-skip<N>`` when rows of the selection were left out, so that no table pools a
partial set with the whole one; ``TaskFacts.to_json`` is what a job's summary holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Prompt:
    """One benchmark item. ``turns`` holds the user turns (one for single-turn
    tasks); a later turn is conditioned on the model's own earlier answers."""

    prompt_id: str
    category: str
    turns: tuple[str, ...]
    reference: str | None = None


@dataclass(frozen=True)
class LoadedRows:
    """What a loader may return instead of its prompts alone: ``prompts``, every row read (source order);
    ``left_out``, the ids of those it leaves out of the task (SPEED-Bench's rows still holding the placeholder,
    ``task.unresolved=skip``); ``revision``, the source revision asked for, and ``resolved_revision``, the one the
    source says it read (a Hub commit: ``specbench.tasks.sources.resolved_revision``); None where there is none
    (local files) or it does not say."""

    prompts: list[Prompt]
    left_out: frozenset[str] = frozenset()
    revision: str | None = None
    resolved_revision: str | None = None

    @property
    def kept(self) -> list[Prompt]:
        return [p for p in self.prompts if p.prompt_id not in self.left_out]


#: the task's name in records when rows of its selection were left out (``TaskFacts.label``)
SKIPPED_LABEL = "{name}-skip{n}"


@dataclass(frozen=True)
class TaskFacts:
    """What loading a task found out that its config cannot say (module docstring): ``name`` (the config's),
    ``source`` (``task_source``), ``revision`` asked for and ``resolved_revision`` (``LoadedRows``), ``prompts``
    selected, and ``skipped``: the rows the benchmark's own selection holds that were left out, by category."""

    name: str
    source: str
    prompts: int
    revision: str | None = None
    resolved_revision: str | None = None
    skipped: Mapping[str, int] = field(default_factory=dict)

    @property
    def n_skipped(self) -> int:
        return sum(self.skipped.values())

    @property
    def label(self) -> str:
        """The task as records name it: ``name``, or ``SKIPPED_LABEL`` when rows of the selection were left out."""
        return SKIPPED_LABEL.format(name=self.name, n=self.n_skipped) if self.n_skipped else self.name

    def to_json(self) -> dict[str, Any]:
        """A job summary's ``task``."""
        return {"name": self.name, "label": self.label, "source": self.source, "revision": self.revision,
                "resolved_revision": self.resolved_revision, "prompts": self.prompts, "skipped": self.n_skipped,
                "skipped_by_category": dict(sorted(self.skipped.items()))}
