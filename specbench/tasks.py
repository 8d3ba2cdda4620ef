"""Tasks: where prompts come from, and how a turn is formatted for a model.

A task loader takes the ``task`` config node and returns ``Prompt`` objects;
``load_task`` applies the selections common to every task (``categories``,
``n_prompts``). Loaders are registered in ``TASKS`` under the ``loader:`` name
of ``conf/task/*.yaml``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from specbench.registry import ConfigError, Registry


@dataclass(frozen=True)
class Prompt:
    """One benchmark item. ``turns`` holds the user turns (one for single-turn
    tasks); a later turn is conditioned on the model's own earlier answers."""

    prompt_id: str
    category: str
    turns: tuple[str, ...]
    reference: str | None = None


TaskLoader = Callable[[Mapping[str, Any]], list[Prompt]]
TASKS: Registry[TaskLoader] = Registry("task loader")


def _read_jsonl(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@TASKS.register("embedded")
def load_embedded(cfg: Mapping[str, Any]) -> list[Prompt]:
    """The prompt set shipped inside the package (``specbench/data/prompts.jsonl``)."""
    text = resources.files("specbench").joinpath("data/prompts.jsonl").read_text(encoding="utf-8")
    return [Prompt(str(r["id"]), r["category"], (r["prompt"],)) for r in _read_jsonl(text)]


def select(prompts: Sequence[Prompt], categories: Sequence[str] | None, n_prompts: int | None) -> list[Prompt]:
    out = list(prompts)
    if categories:
        known = sorted({p.category for p in out})
        bad = [c for c in categories if c not in known]
        if bad:
            raise ConfigError(f"task.categories: unknown {bad}; this task has {known}")
        out = [p for p in out if p.category in set(categories)]
    if n_prompts is not None:
        if n_prompts < 1:
            raise ConfigError(f"task.n_prompts must be >= 1 or null, got {n_prompts}")
        out = out[:n_prompts]
    return out


def load_task(cfg: Mapping[str, Any]) -> list[Prompt]:
    loader = TASKS.get(cfg.get("loader", cfg.get("name")))
    prompts = loader(cfg)
    return select(prompts, cfg.get("categories"), cfg.get("n_prompts"))


def format_turn(
    tokenizer: Any,
    history: Sequence[tuple[str, str]],
    user: str,
    chat_template: bool | str = "auto",
) -> tuple[str, str | None]:
    """The text fed to the model for ``user`` after ``history`` (user, assistant) pairs.

    ``chat_template``: ``True`` requires the tokenizer's chat template, ``False``
    never uses it (turns are joined with blank lines), ``"auto"`` uses it when
    the tokenizer has one. Returns ``(text, template_name)`` where
    ``template_name`` is ``"chat"`` or ``None`` (plain text).
    """
    has_template = getattr(tokenizer, "chat_template", None) is not None
    if chat_template is True and not has_template:
        raise ConfigError("task.chat_template=true but the target's tokenizer has no chat template")
    if chat_template is True or (chat_template == "auto" and has_template):
        messages: list[dict[str, str]] = []
        for u, a in history:
            messages += [{"role": "user", "content": u}, {"role": "assistant", "content": a}]
        messages.append({"role": "user", "content": user})
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return text, "chat"
    parts = [f"{u}{a}" for u, a in history] + [user]
    return "\n\n".join(parts), None
