"""One job: a pair × method × task × initial γ, from a composed Hydra config to records on disk.

``validate(cfg)`` checks everything that can be checked without a model (names,
ranges, pair/method compatibility, the prompts themselves) and raises
``ConfigError``; ``run_job(cfg, job_dir)`` then loads the models (once per
process, see ``specbench.models.MODEL_CACHE``), warms up, decodes every prompt
and appends one record per prompt turn to ``records.jsonl`` as soon as it is
done, and writes ``summary.json`` atomically at the start (``running``) and at
the end (``complete``, ``failed`` or ``interrupted``).

A job whose summary says ``complete`` is skipped unless ``overwrite=true``;
otherwise prompt turns already in ``records.jsonl`` are not redone.
"""

from __future__ import annotations

import logging
import shutil
import time
import traceback
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from methods.hetero import check_supported
from methods.registry import build_policy
from runners.base import Generation
from runners.drafters import DRAFTERS, logits_width
from runners.speculative import AutoregressiveRunner, SpeculativeRunner
from specbench.loggers import JobLogger, build_logger
from specbench.models import MODEL_CACHE, ModelSpec
from specbench.provenance import provenance
from specbench.records import (
    Record,
    RecordWriter,
    aggregate,
    first_divergence,
    read_records,
    sha256_text,
    speculation_fields,
    timing_fields,
    write_json_atomic,
)
from specbench.registry import ConfigError
from specbench.tasks import Prompt, format_turn, load_task

log = logging.getLogger("specbench")

RUNNERS = ("ar", "speculative", "hf")
SAME_VOCAB_DRAFTERS = ("model",)


def _get(node: Any, key: str, default: Any = None) -> Any:
    return node.get(key, default) if isinstance(node, Mapping | DictConfig) else default


def drafter_name(cfg: DictConfig) -> str | None:
    """Which drafter a job uses: the pair's draft kind when it is not a model
    (e.g. prompt lookup), else the method's ``drafter`` (default ``model``)."""
    if cfg.method.runner == "ar":
        return None
    kind = _get(cfg.pair.draft, "kind", "model") if _get(cfg.pair, "draft") else None
    if kind is None:
        return None
    if kind != "model":
        return kind
    return _get(cfg.method, "drafter", "model") or "model"


def validate(cfg: DictConfig) -> list[Prompt]:
    """Raise ``ConfigError`` for any bad value; return the job's prompts."""
    gamma = cfg.gamma
    if not isinstance(gamma, int) or isinstance(gamma, bool) or gamma < 1:
        raise ConfigError(f"gamma must be an integer >= 1 (initial speculation length), got {gamma!r}")
    if not isinstance(cfg.temperature, int | float) or cfg.temperature < 0:
        raise ConfigError(f"temperature must be >= 0 (0 = greedy), got {cfg.temperature!r}")
    if not isinstance(cfg.max_new_tokens, int) or cfg.max_new_tokens < 1:
        raise ConfigError(f"max_new_tokens must be an integer >= 1, got {cfg.max_new_tokens!r}")
    if cfg.method.runner not in RUNNERS:
        raise ConfigError(f"method.runner {cfg.method.runner!r} is not one of {RUNNERS}")
    if cfg.method.runner != "ar":
        if not _get(cfg.pair, "draft"):
            raise ConfigError(f"method {cfg.method.name!r} needs a draft but pair {cfg.pair.name!r} has none")
        build_policy(cfg.method.policy, gamma, cfg.method)  # name and parameter ranges
        name = drafter_name(cfg)
        check_supported(cfg.method, cfg.pair)  # slrs / union: exact-evaluation only
        if name != "hf":  # transformers' own loop drafts for itself
            find_drafter(name)
        same = _get(cfg.pair, "same_tokenizer", True)
        if cfg.method.runner == "hf" and (not same or _get(cfg.pair.draft, "kind", "model") != "model"):
            raise ConfigError(
                f"method {cfg.method.name!r} runs transformers' assisted generation with a draft model of the "
                f"target's vocabulary; pair {cfg.pair.name!r} has none. Use our engine's methods instead."
            )
        if not same and name in SAME_VOCAB_DRAFTERS:
            raise ConfigError(
                f"pair {cfg.pair.name!r} has a draft with a different tokenizer than its target, "
                f"and method {cfg.method.name!r} needs one vocabulary. Use method=slem (greedy) or "
                f"method=tli (any temperature) for heterogeneous vocabularies."
            )
    for side in ("target", "draft"):
        node = _get(cfg.pair, side)
        if node and _get(node, "kind", "model") == "model":
            ModelSpec.from_cfg(node)  # dtype / quant / transform ranges
    prompts = load_task(cfg.task)
    if not prompts:
        raise ConfigError(f"task {cfg.task.name!r} selected no prompts")
    return prompts


def find_drafter(name: str) -> Any:
    """The drafter factory ``name``; drafters of optional modules register themselves on import."""
    import importlib

    for module in ("runners.prompt_lookup", "runners.hetero"):
        if name in DRAFTERS:
            break
        importlib.import_module(module)
    return DRAFTERS.get(name)  # raises with the known names


def eos_ids(model: Any, tokenizer: Any) -> list[int]:
    ids: set[int] = set()
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in (gen_eos, getattr(tokenizer, "eos_token_id", None)):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, list | tuple):
            ids.update(int(v) for v in value)
    return sorted(ids)


class Job:
    """Models, tokenizers and runners of one job (built after validation)."""

    def __init__(self, cfg: DictConfig) -> None:
        self.cfg = cfg
        cache_dir = cfg.get("cache_dir")
        self.target_spec = ModelSpec.from_cfg(cfg.pair.target)
        self.target = MODEL_CACHE.model(self.target_spec, cache_dir)
        self.tokenizer = MODEL_CACHE.tokenizer(self.target_spec, cache_dir)
        self.eos = eos_ids(self.target, self.tokenizer)
        self.temperature = float(cfg.temperature)
        self.ar = AutoregressiveRunner(self.target, self.eos, self.temperature)
        self.policy = None
        self.runner: Any = self.ar
        if cfg.method.runner == "speculative":
            self.policy = build_policy(cfg.method.policy, cfg.gamma, cfg.method)
            self.runner = SpeculativeRunner(self.target, self._drafter(cache_dir), self.policy, self.eos, self.temperature)
        elif cfg.method.runner == "hf":
            from runners.hf_assisted import HFAssistedRunner

            draft_spec = ModelSpec.from_cfg(cfg.pair.draft)
            self.runner = HFAssistedRunner(
                self.target, MODEL_CACHE.model(draft_spec, cache_dir), cfg.method, cfg.gamma, self.eos, self.temperature
            )

    def reset_policy(self) -> None:
        """A fresh policy (state carried across prompts, e.g. by warm-up, is dropped)."""
        if self.cfg.method.runner == "hf":
            self.runner.reset()
        elif self.policy is not None:
            self.policy = build_policy(self.cfg.method.policy, self.cfg.gamma, self.cfg.method)
            self.runner.policy = self.policy

    def _drafter(self, cache_dir: str | None) -> Any:
        cfg = self.cfg
        name = drafter_name(cfg)
        factory = find_drafter(name)
        draft_cfg = cfg.pair.draft
        kwargs: dict[str, Any] = {
            "draft_model": None,
            "draft_tokenizer": None,
            "target_tokenizer": self.tokenizer,
            "eos_token_ids": self.eos,
            "target_vocab_size": logits_width(self.target),
            "draft_cfg": draft_cfg,
            "method_cfg": cfg.method,
        }
        if _get(draft_cfg, "kind", "model") == "model":
            spec = ModelSpec.from_cfg(draft_cfg)
            kwargs["draft_model"] = MODEL_CACHE.model(spec, cache_dir)
            kwargs["draft_tokenizer"] = MODEL_CACHE.tokenizer(spec, cache_dir)
        return factory(**kwargs)

    def encode(self, text: str, templated: bool) -> list[int]:
        return self.tokenizer(text, add_special_tokens=not templated).input_ids

    def generator(self, seed: int) -> torch.Generator:
        return torch.Generator(device="cpu").manual_seed(int(seed))


_AR_REFERENCE: dict[tuple, Generation] = {}


def ar_reference(job: Job, prompt_ids: list[int]) -> Generation:
    """The target's own greedy decoding of a prompt, cached per process (timed once)."""
    key = (job.target_spec, tuple(prompt_ids), int(job.cfg.max_new_tokens))
    if key not in _AR_REFERENCE:
        ref = AutoregressiveRunner(job.target, job.eos, 0.0)
        _AR_REFERENCE[key] = ref.generate(prompt_ids, job.cfg.max_new_tokens)
    return _AR_REFERENCE[key]


def _summary(cfg: DictConfig, status: str, records: list[dict], extra: Mapping[str, Any] | None = None) -> dict:
    device = str(_get(cfg.pair.target, "device", "cpu"))
    dtypes = {side: str(_get(_get(cfg.pair, side), "dtype")) for side in ("target", "draft") if _get(cfg.pair, side)}
    return {
        "status": status,
        "config": OmegaConf.to_container(cfg, resolve=True),
        "provenance": provenance(device, dtypes),
        "aggregates": aggregate(records),
        "model_cache": {"loads": MODEL_CACHE.loads, "hits": MODEL_CACHE.hits, "load_seconds": MODEL_CACHE.load_seconds},
        **(extra or {}),
    }


def is_complete(job_dir: Path) -> bool:
    import json

    path = job_dir / "summary.json"
    try:
        return json.loads(path.read_text()).get("status") == "complete"
    except (OSError, ValueError):
        return False


def run_job(cfg: DictConfig, job_dir: str | Path, progress: bool = True) -> dict:
    """Validate, run and record one job; returns its summary (see module docstring)."""
    job_dir = Path(job_dir)
    existed_before = (job_dir / "records.jsonl").exists() or (job_dir / "summary.json").exists()
    try:
        prompts = validate(cfg)
    except ConfigError:
        if not existed_before:  # leave nothing behind for a bad config
            shutil.rmtree(job_dir, ignore_errors=True)
        raise
    records_path = job_dir / "records.jsonl"
    if cfg.get("overwrite"):
        records_path.unlink(missing_ok=True)
        (job_dir / "summary.json").unlink(missing_ok=True)
    elif is_complete(job_dir):
        log.info("job %s is complete; skipped (overwrite=true to redo)", job_dir)
        import json

        return json.loads((job_dir / "summary.json").read_text())
    done = {(r["prompt_id"], r["turn"]): r for r in read_records(records_path)}
    if done:
        _rewrite_whole_lines(records_path, list(done.values()))
    write_json_atomic(job_dir / "summary.json", _summary(cfg, "running", list(done.values())))
    logger = build_logger(cfg)
    logger.start(OmegaConf.to_container(cfg, resolve=True), job_name=job_dir.name)
    summary: dict = {}
    failed = True
    try:
        for record in done.values():  # on resume, so the logged table is complete
            logger.log_record(record)
        if cfg.get("threads"):
            torch.set_num_threads(int(cfg.threads))
        t_load = time.perf_counter()
        job = Job(cfg)
        load_s = time.perf_counter() - t_load
        _warmup(job, prompts)
        job.reset_policy()  # timed prompts start from the configured initial gamma
        with RecordWriter(records_path) as writer:
            _decode_all(job, prompts, done, writer, progress, logger)
        records = read_records(records_path)
        extra = {"load_s": load_s, "policy_state": job.policy.state() if job.policy else None}
        summary = _summary(cfg, "complete", records, extra)
        write_json_atomic(job_dir / "summary.json", summary)
        failed = False
        return summary
    except KeyboardInterrupt:
        summary = _summary(cfg, "interrupted", read_records(records_path))
        write_json_atomic(job_dir / "summary.json", summary)
        raise
    except Exception as exc:
        summary = _summary(
            cfg, "failed", read_records(records_path),
            {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()},
        )
        write_json_atomic(job_dir / "summary.json", summary)
        raise
    finally:
        logger.finish(summary or {"status": "failed"}, failed=failed)


def _rewrite_whole_lines(path: Path, records: list[dict]) -> None:
    """Drop a torn last line (a kill mid-write) and duplicates before appending again."""
    import json
    import os

    tmp = path.with_suffix(".jsonl.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _warmup(job: Job, prompts: list[Prompt]) -> None:
    """Untimed generations so one-off costs (allocations, kernels) stay out of the records."""
    n = int(job.cfg.get("warmup", 1) or 0)
    if n <= 0:
        return
    text, template = format_turn(job.tokenizer, [], prompts[0].turns[0], job.cfg.task.get("chat_template", "auto"))
    ids = job.encode(text, template is not None)
    for _ in range(n):
        job.runner.generate(ids, min(16, job.cfg.max_new_tokens), job.generator(job.cfg.seed))
        if job.cfg.get("verify_lossless") and job.temperature == 0 and job.runner is not job.ar:
            job.ar.generate(ids, min(16, job.cfg.max_new_tokens))


STOP_REQUESTED = False  # set by a Ctrl-C that came during a job's last prompt: later jobs do not start


class StopAfterCurrentPrompt:
    """Ctrl-C (SIGINT) once: finish the prompt in flight, record it, then stop.
    Twice: stop at once (the prompt in flight is lost; everything before it is kept)."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None

    def _handler(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        log.warning("Ctrl-C: stopping after the current prompt (press again to stop now)")

    def __enter__(self) -> StopAfterCurrentPrompt:
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        import signal

        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


def _decode_all(
    job: Job, prompts: list[Prompt], done: dict, writer: RecordWriter, progress: bool, logger: JobLogger
) -> None:
    from tqdm.auto import tqdm

    cfg = job.cfg
    total = sum(len(p.turns) for p in prompts)
    bar = tqdm(total=total, desc=f"{cfg.method.name} γ={cfg.gamma}", unit="turn", disable=not progress, leave=False)
    tokens = 0
    seconds = 0.0
    with StopAfterCurrentPrompt() as stop, bar:
        for prompt in prompts:
            if stop.requested:
                raise KeyboardInterrupt("stopped after the current prompt")
            history: list[tuple[str, str]] = []
            for turn, user in enumerate(prompt.turns, start=1):
                prev = done.get((prompt.prompt_id, turn))
                if prev is not None:
                    history.append((user, prev["output_text"]))
                    bar.update(1)
                    continue
                record = decode_turn(job, prompt, turn, history, user)
                writer.write(record)
                logger.log_record(asdict(record))
                history.append((user, record.output_text))
                tokens += record.new_tokens
                seconds += record.wall_ms / 1000.0
                bar.update(1)
                bar.set_postfix(tok_s=f"{tokens / seconds:.1f}" if seconds else "-")
        if stop.requested:  # the last prompt finished after Ctrl-C: the job is complete, the sweep stops
            global STOP_REQUESTED
            STOP_REQUESTED = True


def decode_turn(job: Job, prompt: Prompt, turn: int, history: list[tuple[str, str]], user: str) -> Record:
    cfg = job.cfg
    text, template = format_turn(job.tokenizer, history, user, cfg.task.get("chat_template", "auto"))
    ids = job.encode(text, template is not None)
    gen = job.runner.generate(ids, cfg.max_new_tokens, job.generator(cfg.seed))
    output_text = job.tokenizer.decode(gen.tokens, skip_special_tokens=True)
    fields: dict[str, Any] = {}
    if gen.speculative:
        fields.update(speculation_fields(gen.gamma_trace, gen.drafted_trace, gen.accepted_trace))
        fields["confidence_trace"] = gen.confidence_trace
    if cfg.get("verify_lossless") and job.temperature == 0:
        ref = gen if job.runner is job.ar else ar_reference(job, ids)
        div = first_divergence(gen.tokens, ref.tokens)
        fields.update(lossless=div is None, first_divergence=div)
        ref_t = timing_fields(ref.wall_ms, ref.ttft_ms, len(ref.tokens))
        fields.update(ar_tokens_per_s=ref_t["tokens_per_s"], ar_wall_ms=ref.wall_ms)
    timing = timing_fields(gen.wall_ms, gen.ttft_ms, len(gen.tokens))
    if fields.get("ar_tokens_per_s"):
        fields["speedup"] = timing["tokens_per_s"] / fields["ar_tokens_per_s"]
    draft = _get(cfg.pair, "draft")
    return Record(
        pair=cfg.pair.name,
        target=_get(cfg.pair.target, "name") or cfg.pair.target.path,
        draft=(_get(draft, "name") or _get(draft, "path")) if draft and cfg.method.runner != "ar" else None,
        method=cfg.method.name,
        task=cfg.task.name,
        category=prompt.category,
        prompt_id=prompt.prompt_id,
        turn=turn,
        gamma_init=cfg.gamma if cfg.method.runner != "ar" else None,
        temperature=float(cfg.temperature),
        seed=int(cfg.seed),
        prompt_tokens=len(ids),
        new_tokens=len(gen.tokens),
        output_text=output_text,
        output_sha=sha256_text(output_text),
        stop_reason=gen.stop_reason,
        chat_template=template,
        **timing,
        **fields,
    )
