"""How a turn is formatted for a model (``task.prompt_format``): ``format_turn``, ``encode_turn``.

Every place that decodes a task's prompts encodes them with ``encode_turn``: the text of ``format_turn``,
tokenized with the tokenizer's special tokens as ``add_special_tokens`` says.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specbench.registry import ConfigError
from specbench.tasks.config import check_prompt_format

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
