"""The process's model cache (``MODEL_CACHE``) and ``load_pair``: a pair's models from a job config.

``ModelCache`` loads each distinct spec once per process, so every job of a multirun that needs the
same model reuses it, and keeps what it holds within a budget or the device's free memory (see its
docstring). ``load_pair(config)`` is the one way code loads a pair from a ``JobConfig`` (the job,
``runners.replay``'s CLI, the scripts): through the cache, from ``config.cache_dir``, within
``config.model_budget``.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Any

from specbench.config import JobConfig, ModelSpec
from specbench.models import apply_transform, eos_ids, load_model, load_tokenizer, logits_width
from specbench.models.sizes import estimate_bytes, model_bytes

log = logging.getLogger("specbench.models")


class ModelsDoNotFit(RuntimeError):
    """A job's own models cannot fit (its budget, or its device's free memory): raised before loading."""


def _key(spec: ModelSpec) -> ModelSpec:
    """The cache key of a spec: its label and, without ``hot_vocab``, its unused ``token_map`` do not make it
    another model."""
    unused = {"token_map": None} if spec.hot_vocab is None else {}
    return ModelSpec(**{**spec.__dict__, "name": None, **unused})


def _parent(key: ModelSpec) -> ModelSpec | None:
    """The cache key a derived model is made from (None: loaded from its source): a restricted head's parent is the
    model without the restriction (itself perhaps transformed), a transform's is the base."""
    if key.hot_vocab is not None:
        return _key(ModelSpec(**{**key.__dict__, "hot_vocab": None, "token_map": None}))
    if key.transform is not None:
        return _key(key.base)
    return None


def _derive(key: ModelSpec, parent: Any, tokenizer_of: Any, cache_dir: str | os.PathLike | None) -> Any:
    """``key``'s model made from its parent's (``_parent``): its LM head restricted to the token map's hot ids
    (``specbench.models.hot_vocab``), or its transform applied."""
    if key.hot_vocab is None:
        return apply_transform(parent, key.transform)
    from specbench.models.hot_vocab import load_token_map, restrict_head

    token_map = load_token_map(key.token_map, cache_dir)
    token_map.check_tokenizer(tokenizer_of(key), logits_width(parent), f"token_map {key.token_map!r}")
    return restrict_head(parent, token_map.top(key.hot_vocab))


class ModelCache:
    """Loads each distinct model spec once per process (a multirun reuses them), within bounds.

    Before a job loads its models it calls ``make_room(specs)``: models the job does not use are
    evicted (least recently used first) when the job's new models would not fit, either in a fixed
    ``budget_bytes`` (the ``model_budget`` knob) or, without one, in the free memory of their device
    (``specbench.resources.free_bytes``: free GPU memory, available RAM). A job whose own models
    cannot fit raises ``ModelsDoNotFit`` with their sizes before anything is loaded. Sizes are
    estimated from safetensors headers before loading (``estimate_bytes``) and accounted exactly once
    loaded (``model_bytes``); with a budget, the cache never holds more than it
    (``held_bytes``/``peak_bytes``).

    A sweep loads each model once per run of consecutive jobs that use it: Hydra's basic sweeper
    varies the first swept key slowest, so put ``pair=`` first (the recipes do); a sweep that
    alternates pairs under a tight budget reloads them.

    Counters: ``loads`` (from disk/Hub), ``hits`` (reuses), ``evictions``, ``load_counts`` (loads
    per model label), ``load_seconds``.
    """

    def __init__(self, budget_bytes: int | None = None) -> None:
        from collections import OrderedDict

        self._models: OrderedDict[ModelSpec, Any] = OrderedDict()
        self._bytes: dict[ModelSpec, int] = {}
        self._labels: dict[ModelSpec, str] = {}
        self._tokenizers: dict[ModelSpec, Any] = {}
        self.budget_bytes = budget_bytes
        self.loads = 0
        self.hits = 0
        self.evictions = 0
        self.peak_bytes = 0
        self.load_seconds: dict[str, float] = {}
        self.load_counts: dict[str, int] = {}

    @property
    def held_bytes(self) -> int:
        return sum(self._bytes.values())

    def holds(self, spec: ModelSpec) -> bool:
        return _key(spec) in self._models

    def _needed(self, specs: list[ModelSpec]) -> dict[ModelSpec, str]:
        """The cache keys a job's specs need (a transform needs its base too), with their labels."""
        keys: dict[ModelSpec, str] = {}
        for spec in specs:
            chain = [_key(spec)]
            while (parent := _parent(chain[-1])) is not None:
                chain.append(parent)
            for key in reversed(chain):  # the base first
                keys.setdefault(key, spec.label + key.derivation)
        return keys

    def make_room(self, specs: list[ModelSpec], cache_dir: str | os.PathLike | None = None) -> dict[str, Any]:
        """Evict what the job does not use if its new models would not fit; raise ``ModelsDoNotFit``
        if they cannot (class docstring). Returns the sizes it planned with."""
        from specbench.resources import device_kind, fmt_bytes, free_bytes

        needed = self._needed(specs)
        missing = [k for k in needed if k not in self._models]
        # a restricted head's few rows are accounted once made (its other tensors are its parent's)
        estimates = {k: None if k.hot_vocab is not None else estimate_bytes(k, cache_dir) for k in missing}
        new_bytes = sum(b for b in estimates.values() if b)
        kept_bytes = sum(self._bytes[k] for k in needed if k in self._bytes)
        sizes = ", ".join(f"{label}: {fmt_bytes(self._bytes.get(k, estimates.get(k)))}" for k, label in needed.items())
        unused = [k for k in self._models if k not in needed]
        if self.budget_bytes is not None:
            if kept_bytes + new_bytes > self.budget_bytes:
                raise ModelsDoNotFit(f"this job's models need {fmt_bytes(kept_bytes + new_bytes)} ({sizes}), more than "
                                     f"model_budget={fmt_bytes(self.budget_bytes)}")
            while unused and self.held_bytes + new_bytes > self.budget_bytes:
                self.evict(unused.pop(0))
        by_kind: dict[str, int] = {}
        for k in missing:
            if estimates[k]:
                kind = device_kind(k.device, k.device_map)
                by_kind[kind] = by_kind.get(kind, 0) + int(estimates[k] or 0)
        for kind, need in by_kind.items():
            free = free_bytes(kind)
            if free is None or need <= free:
                continue
            freed = 0
            for k in [u for u in unused if device_kind(u.device, u.device_map).split(":")[0] == kind.split(":")[0]]:
                freed += self._bytes.get(k, 0)
                self.evict(k)
                unused.remove(k)
                if need <= free + freed:
                    break
            if kind.startswith("cuda"):
                free, freed = free_bytes(kind) or free, 0  # eviction returned the memory to the driver
            if need > free + freed:
                raise ModelsDoNotFit(f"this job's new models need {fmt_bytes(need)} on {kind} ({sizes}) but only "
                                     f"{fmt_bytes(free + freed)} is free there after evicting every other cached model")
        return {"estimated_bytes": {needed[k]: v for k, v in estimates.items()}}

    def evict(self, key: ModelSpec) -> None:
        import gc

        self._models.pop(key, None)
        self._bytes.pop(key, None)
        label = self._labels.pop(key, key.path)
        self.evictions += 1
        gc.collect()
        if str(key.device).startswith("cuda"):
            try:
                import torch

                torch.cuda.empty_cache()
            except Exception:
                pass
        log.info("evicted %s from the model cache (%d bytes still held)", label, self.held_bytes)

    def model(self, spec: ModelSpec, cache_dir: str | os.PathLike | None = None) -> Any:
        key = _key(spec)
        if key in self._models:
            self.hits += 1
            self._models.move_to_end(key)
            return self._models[key]
        t0 = time.perf_counter()
        label = spec.label + key.derivation
        parent = _parent(key)
        if parent is None:
            model = load_model(key, cache_dir)
            self.loads += 1
            self.load_counts[label] = self.load_counts.get(label, 0) + 1
        else:
            model = _derive(key, self.model(parent, cache_dir), lambda k: self.tokenizer(k, cache_dir), cache_dir)
        # a restricted head shares every tensor of its parent but its head's: only those are new
        size = model_bytes(model.get_output_embeddings() if key.hot_vocab is not None else model)
        if self.budget_bytes is not None and self.held_bytes + size > self.budget_bytes:
            from specbench.resources import fmt_bytes

            raise ModelsDoNotFit(f"{label} takes {fmt_bytes(size)} once loaded; with the {fmt_bytes(self.held_bytes)} "
                                 f"this job already holds it exceeds model_budget={fmt_bytes(self.budget_bytes)}")
        self.load_seconds[label] = time.perf_counter() - t0
        self._models[key] = model
        self._bytes[key] = size
        self._labels[key] = label
        self.peak_bytes = max(self.peak_bytes, self.held_bytes)
        return model

    def stats(self) -> dict[str, Any]:
        """What ``summary.json: model_cache`` records."""
        import socket

        return {"process": f"{socket.gethostname()}:{os.getpid()}", "loads": self.loads, "hits": self.hits, "load_seconds": dict(self.load_seconds),
                "load_counts": dict(self.load_counts), "evictions": self.evictions, "held_bytes": self.held_bytes,
                "peak_bytes": self.peak_bytes, "budget_bytes": self.budget_bytes,
                "held": sorted(self._labels[k] for k in self._models)}

    def tokenizer(self, spec: ModelSpec, cache_dir: str | os.PathLike | None = None) -> Any:
        key = spec.base
        if key not in self._tokenizers:
            self._tokenizers[key] = load_tokenizer(key, cache_dir)
        return self._tokenizers[key]

    def clear(self) -> None:
        self._models.clear()
        self._bytes.clear()
        self._labels.clear()
        self._tokenizers.clear()


MODEL_CACHE = ModelCache()


@dataclass(frozen=True)
class LoadedPair:
    """A pair's models as a job uses them: the target, its tokenizer and the ids that end a generation
    (``specbench.models.eos_ids``); the draft model and its tokenizer (None when the pair has no draft
    model, e.g. prompt lookup, or when they were not asked for)."""

    target: Any
    tokenizer: Any
    eos: list[int]
    draft: Any = None
    draft_tokenizer: Any = None


def load_pair(config: JobConfig, with_draft: bool = True) -> LoadedPair:
    """The models of ``config.pair`` through ``MODEL_CACHE`` (each loaded once per process), from
    ``config.cache_dir``: first ``make_room`` under ``config.model_budget`` (models this pair does not use
    are evicted if its own would not fit; ``ModelsDoNotFit`` when they cannot), then the target and its
    tokenizer, then the draft model and its tokenizer when the pair has one and ``with_draft`` (an
    autoregressive job loads its target only)."""
    cache_dir, pair = config.cache_dir, config.pair
    draft_spec = pair.draft.model if with_draft and pair.draft is not None else None
    MODEL_CACHE.budget_bytes = config.model_budget
    MODEL_CACHE.make_room([pair.target] + ([draft_spec] if draft_spec is not None else []), cache_dir)
    target = MODEL_CACHE.model(pair.target, cache_dir)
    tokenizer = MODEL_CACHE.tokenizer(pair.target, cache_dir)
    if draft_spec is None:
        return LoadedPair(target, tokenizer, eos_ids(target, tokenizer))
    draft = MODEL_CACHE.model(draft_spec, cache_dir)
    return LoadedPair(target, tokenizer, eos_ids(target, tokenizer), draft, MODEL_CACHE.tokenizer(draft_spec, cache_dir))
