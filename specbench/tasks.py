"""Tasks: where prompts come from, and how a turn is formatted for a model.

A task loader takes the ``task`` config node and returns ``Prompt`` objects; ``load_task`` applies the
selections common to every task (``categories``, ``per_category``, ``n_prompts``). Loaders are
registered in ``TASKS`` under the ``loader:`` name of ``conf/task/*.yaml`` and imported the first time
one is chosen (lm-evaluation-harness's lazy registry). The rest of the tasks, one concept a module:

* ``specbench.task_config``: ``TaskConfig`` (the validated ``task`` node) and each loader's defaults;
* ``specbench.task_loaders``: the per-dataset loaders (``embedded``, ``specbench``, ``speed_bench``,
  ``cnn_dailymail``, ``humaneval``, ``scrolls``, ``custom``);
* ``specbench.task_files``: rows from local files (``task.data_files``: json, jsonl, parquet);
* ``specbench.task_sources``: rows from each dataset's public source (a URL, the Hub, a package), and
  ``task_source``, the one-line description of where a task reads.

Here: ``Prompt``, the registry, the selection, what a load found out (``LoadedRows``, ``TaskFacts``,
``load_task_facts``), and the formatting of a turn for the model (``task.prompt_format``: ``format_turn``,
``encode_turn``).

What a load found out (issue 40, item 6): a loader may return ``LoadedRows`` instead of a list — every row it
read, the ids of rows it left out (SPEED-Bench's placeholder rows under ``task.unresolved=skip``), the source
revision asked for and the one the source resolved it to. ``load_task_facts`` returns the selection and its
``TaskFacts``: where the rows came from, the revisions, and how many rows of the *selection* were left out
(``select`` run on every row read, less the ones this run kept: 0 when the run holds the set the benchmark
would select), per category. ``TaskFacts.label`` is the task as records name it: the task's name, or
``<name>-skip<N>`` when rows of the selection were left out, so that no table pools a partial set with the
whole one; ``TaskFacts.to_json`` is what a job's summary holds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specbench.checks import check_int
from specbench.registry import ConfigError, Registry
from specbench.task_config import TaskConfig, check_prompt_format
from specbench.task_sources import task_source


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
    source says it read (a Hub commit: ``specbench.task_sources.resolved_revision``); None where there is none
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


TaskLoader = Callable[[TaskConfig], list[Prompt] | LoadedRows]
TASKS: Registry[TaskLoader] = Registry("task loader", {
    "embedded": "specbench.task_loaders:load_embedded",  # the prompts shipped in the package
    "specbench": "specbench.task_loaders:load_specbench",  # Spec-Bench's question.jsonl
    "cnn_dailymail": "specbench.task_loaders:load_cnn_dailymail",
    "humaneval": "specbench.task_loaders:load_humaneval",
    "scrolls": "specbench.task_loaders:load_scrolls",
    "speed_bench": "specbench.task_loaders:load_speed_bench",  # NVIDIA's SPEED-Bench (nvidia/SPEED-Bench)
    "custom": "specbench.task_loaders:load_custom",  # your own local rows
})


# --------------------------------------------------------------------------- selection and formatting

def select(
    prompts: Sequence[Prompt],
    categories: Sequence[str] | None,
    n_prompts: int | None,
    per_category: int | None = None,
) -> list[Prompt]:
    """Filter by ``categories``, keep the first ``per_category`` of each category (in file
    order), then the first ``n_prompts`` overall."""
    out = list(prompts)
    if isinstance(categories, str):
        categories = [categories]
    if categories:
        known = sorted({p.category for p in out})
        bad = [c for c in categories if c not in known]
        if bad:
            raise ConfigError(f"task.categories: unknown {bad}; this task has {known}")
        wanted = set(categories)
        out = [p for p in out if p.category in wanted]
    if check_int("task.per_category", per_category, 1, optional=True) is not None:
        seen: dict[str, int] = {}
        kept = []
        for p in out:
            seen[p.category] = seen.get(p.category, 0) + 1
            if seen[p.category] <= per_category:
                kept.append(p)
        out = kept
    if check_int("task.n_prompts", n_prompts, 1, optional=True) is not None:
        out = out[:n_prompts]
    return out


def load_task(cfg: TaskConfig | Mapping[str, Any]) -> list[Prompt]:
    """The prompts a task config selects (a plain mapping is validated into a ``TaskConfig`` first)."""
    return load_task_facts(cfg)[0]


def load_task_facts(cfg: TaskConfig | Mapping[str, Any]) -> tuple[list[Prompt], TaskFacts]:
    """``load_task``'s prompts and what the load found out (``TaskFacts``, module docstring)."""
    cfg = TaskConfig.from_mapping(cfg)
    loader = TASKS.get(cfg.loader)
    loaded = loader(cfg)
    if not isinstance(loaded, LoadedRows):
        loaded = LoadedRows(list(loaded))
    prompts = loaded.kept
    if not prompts:
        raise ConfigError(f"task {cfg.name!r} has no prompts ({task_source(cfg)})")
    selected = select(prompts, cfg.categories, cfg.n_prompts, cfg.per_category)
    skipped: dict[str, int] = {}
    if loaded.left_out:  # the benchmark's own selection, on every row read: the rows of it this run lacks
        for p in select(loaded.prompts, cfg.categories, cfg.n_prompts, cfg.per_category):
            if p.prompt_id in loaded.left_out:
                skipped[p.category] = skipped.get(p.category, 0) + 1
    facts = TaskFacts(cfg.name, task_source(cfg), len(selected), loaded.revision, loaded.resolved_revision, skipped)
    for prompt in selected:  # a generation from nothing measures nothing: refuse it, naming the row
        for turn, text in enumerate(prompt.turns, start=1):
            if not text.strip():
                raise ConfigError(
                    f"task {cfg.name!r}: prompt {prompt.prompt_id!r} (turn {turn}) is empty; remove the row or "
                    f"fix its prompt field ({task_source(cfg)})"
                )
    return selected, facts


#: FastChat's ``vicuna_v1.1`` conversation (``fastchat/conversation.py``: ``register_conv_template(
#: Conversation(name="vicuna_v1.1", ...))``, ``SeparatorStyle.ADD_COLON_TWO``), the template Spec-Bench
#: uses for every model (``evaluation/eval.py``: ``get_conversation_template("vicuna")``) and the prompt
#: of GammaTune's Figure 2b. Re-implemented here: FastChat (``fschat``) is unmaintained since 2024-02.
VICUNA_V11_SYSTEM = (
    "A chat between a curious user and an artificial intelligence assistant. "
    "The assistant gives helpful, detailed, and polite answers to the user's questions."
)
VICUNA_V11_ROLES = ("USER", "ASSISTANT")
VICUNA_V11_SEPS = (" ", "</s>")


def vicuna_v11_prompt(history: Sequence[tuple[str, str]], user: str) -> str:
    """``Conversation.get_prompt`` of FastChat's ``vicuna_v1.1`` (ADD_COLON_TWO): the system message,
    then ``ROLE: message`` + sep (`` `` after a user turn, ``</s>`` after an assistant turn) per
    message, and ``ASSISTANT:`` for the turn to generate. Earlier answers enter as Spec-Bench feeds
    them back: special tokens and the ``</s>`` stop string removed, then stripped."""
    messages: list[tuple[str, str | None]] = []
    for u, a in history:
        answer = a.split("</s>", 1)[0] if "</s>" in a[1:] else a
        messages += [(VICUNA_V11_ROLES[0], u), (VICUNA_V11_ROLES[1], answer.strip())]
    messages += [(VICUNA_V11_ROLES[0], user), (VICUNA_V11_ROLES[1], None)]
    text = VICUNA_V11_SYSTEM + VICUNA_V11_SEPS[0]
    for i, (role, message) in enumerate(messages):
        text += f"{role}: {message}{VICUNA_V11_SEPS[i % 2]}" if message else f"{role}:"
    return text


def add_special_tokens(prompt_format: str) -> bool:
    """Whether the formatted text is tokenized with the tokenizer's special tokens (BOS): yes for
    ``plain`` and ``vicuna_v1.1`` (Spec-Bench and hf-bench call ``tokenizer(prompt)``), no for a chat
    template, whose text already holds them."""
    return prompt_format != "chat_template"


def format_turn(
    tokenizer: Any,
    history: Sequence[tuple[str, str]],
    user: str,
    prompt_format: str = "auto",
) -> tuple[str, str]:
    """The text fed to the model for ``user`` after ``history`` (user, assistant) pairs, and the
    format used (``task.prompt_format``):

    * ``chat_template``: the tokenizer's chat template (required);
    * ``vicuna_v1.1``: FastChat's Vicuna v1.1 conversation (``vicuna_v11_prompt``), Spec-Bench's
      prompt for every model;
    * ``plain``: the turns as they are, joined with blank lines after the earlier answers
      (hf-bench's plain-text prompts);
    * ``auto``: ``chat_template`` when the tokenizer has one, else ``plain``.
    """
    prompt_format = check_prompt_format(prompt_format)
    has_template = getattr(tokenizer, "chat_template", None) is not None
    if prompt_format == "auto":
        prompt_format = "chat_template" if has_template else "plain"
    if prompt_format == "chat_template":
        if not has_template:
            raise ConfigError("task.prompt_format=chat_template but the target's tokenizer has no chat template")
        messages: list[dict[str, str]] = []
        for u, a in history:
            messages += [{"role": "user", "content": u}, {"role": "assistant", "content": a}]
        messages.append({"role": "user", "content": user})
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return text, prompt_format
    if prompt_format == "vicuna_v1.1":
        return vicuna_v11_prompt(history, user), prompt_format
    parts = [f"{u}{a}" for u, a in history] + [user]
    return "\n\n".join(parts), prompt_format


def encode_turn(
    tokenizer: Any, history: Sequence[tuple[str, str]], user: str, prompt_format: str = "auto"
) -> tuple[list[int], str]:
    """The token ids a job feeds for ``user`` after ``history`` (``format_turn``'s text, with the
    tokenizer's special tokens as ``add_special_tokens`` says), and the format used. Every place that
    decodes a task's prompts encodes them here."""
    text, fmt = format_turn(tokenizer, history, user, prompt_format)
    return list(tokenizer(text, add_special_tokens=add_special_tokens(fmt)).input_ids), fmt
