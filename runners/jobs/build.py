"""A job built: the boundary (``prepare``) and the wiring (``Job``: models, runner, drafter, policy).

``prepare(cfg)`` is the boundary: it validates the composed config once into a typed
``specbench.config.JobConfig``, builds the job's γ policy (its knobs checked), checks the drafter's
options and the cross-vocabulary algorithm, and loads the prompts — all before any model loads —
and raises ``ConfigError`` for anything wrong. Below this module only typed objects travel.

``Job(prepared)`` then loads the pair (``specbench.models.cache.load_pair``: once per process, within
``model_budget``) and wires what decodes: the sampling processors, the target alone every record compares with
(``runners.jobs.target_alone.TargetAlone``), the runner (autoregressive, speculative with its drafter and engine
options, or transformers' assisted generation; batched at ``batch_size`` > 1), and for a cross-vocabulary
algorithm the vocabulary overlap. Whatever the batch size, the job times one runner and compares it with one
target alone, both under one contract: prompts in, a
``BatchGeneration`` out (``runners.engine.contract``; a batch-1 loop behind ``OneAtATime``), so the job
has one decoding path (``runners.jobs.job.JobRun.generate``). Protocol settings applied here (README,
"Protocols"):

* sampling processors: ``top_k`` / ``top_p`` / ``typical_p`` (``checkpoint``: the target's
  generation config) become one ``runners.engine.verify.Sampling`` used by every runner and
  drafter of the job; random numbers come from ``DeviceGenerators`` (one generator per device);
* ``method.cache`` of an autoregressive method (``offloaded``: hf-bench's AR baseline), refused
  before any model loads when there is no GPU to offload from;
* ``warmup`` (``warm_up``: untimed generations before the first timed one) and
  ``warmup_per_prompt`` (``Job.untimed``: hf-bench's untimed generations of each prompt turn right
  before its timed one), the policy's and runner's state restored afterwards
  (``GammaPolicy.snapshot`` / ``restore``) so the warm-ups change nothing but the caches of the hardware.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from methods.base import GammaPolicy
from methods.policies import build_policy
from runners.drafters import DrafterContext, build_batched_drafter, build_drafter, check_drafter
from runners.engine.compiled_draft import use_compiled
from runners.engine.contract import OneAtATime
from runners.engine.factory import build_runner
from runners.engine.graphs import static_headroom as graphs_headroom
from runners.engine.graphs import use_graphs
from runners.engine.invariant import resolve_dtype, use_invariant
from runners.engine.verify import DeviceGenerators, Sampling
from runners.jobs.ar_cache import ARCache
from runners.jobs.device_share import DeviceShare
from runners.jobs.kernels import shared_kernels
from runners.jobs.predict import find_latency
from runners.jobs.target_alone import TargetAlone, warm_ups
from specbench.config import CHECKPOINT, JobConfig
from specbench.config.method import hetero_display, method_key
from specbench.drafter_kinds import drafter_kind
from specbench.models import (
    checkpoint_processors,
    config_vocab_size,
    logits_width,
    model_device,
    tokenizers_identical,
)
from specbench.models.cache import load_pair
from specbench.models.hot_vocab import hot_ids
from specbench.models.sources import check_model_source
from specbench.registry import ConfigError
from specbench.tasks import Prompt, TaskFacts, encode_turn, load_task_facts


@dataclass
class PreparedJob:
    """A validated job: its typed config, its prompts, and its γ policy (built once; None for AR)."""

    config: JobConfig
    prompts: list[Prompt]
    policy: GammaPolicy | None = None
    positions: int | None = None  # the target's positions, once ``check_inputs`` has read its config
    task_facts: TaskFacts | None = None  # what loading the task found out (revision, rows left out)


def prepare(cfg: Any) -> PreparedJob:
    """Validate everything that can be checked without a model (a ``DictConfig``, a plain mapping or a
    ``JobConfig``); raise ``ConfigError`` naming the offending key."""
    config = cfg if isinstance(cfg, JobConfig) else JobConfig.from_mapping(cfg)
    config = resolve_dtype(config)  # engine.dtype=auto: the target's dtype, named in every record from here on
    check_model_source(config.pair.target, "pair.target")
    if config.speculative and config.pair.draft is not None and config.pair.draft.model is not None:
        check_model_source(config.pair.draft.model, "pair.draft")
    policy = None
    if config.speculative:
        policy = build_policy(config.method.policy, config.gamma, config.method.params)
        if config.method.runner == "hf":
            from runners.engine.hf_assisted import hf_settings

            hf_settings(policy)  # a schedule transformers has
    if config.drafter is not None:
        check_drafter(config.drafter, config.pair.draft.options)
    if config.method.ar_cache == "offloaded":
        check_offloading(config)
    prompts, task_facts = load_task_facts(config.task)
    if not prompts:
        raise ConfigError(f"task {config.task.name!r} selected no prompts")
    return PreparedJob(config, prompts, policy, task_facts=task_facts)


def check_offloading(config: JobConfig) -> None:
    """``method.cache=offloaded`` keeps the KV cache in CPU memory while the model runs on a GPU:
    refused (one line, before any model loads) when this run has no GPU or the target is on the CPU."""
    target = config.pair.target
    on_cpu = str(target.device).startswith("cpu") and not target.device_map
    if not torch.cuda.is_available() or on_cpu:
        where = "this machine has no CUDA GPU" if not torch.cuda.is_available() else "the target runs on the CPU"
        raise ConfigError(
            f"method.cache=offloaded moves the KV cache from the GPU to the CPU, but {where}: nothing to "
            f"offload to. Use method=ar (cache dynamic) here, or run on a GPU."
        )


def resolve_sampling(config: JobConfig, target: Any) -> Sampling:
    """The job's ``Sampling``: its temperature and processors, ``checkpoint`` values read from the
    target's generation config (``specbench.models.checkpoint_processors``)."""
    from_model = checkpoint_processors(target)
    values = {}
    for key in ("top_k", "top_p", "typical_p"):
        value = getattr(config, key)
        values[key] = from_model[key] if value == CHECKPOINT else value
    try:
        return Sampling(config.temperature, **values)
    except ValueError as exc:
        raise ConfigError(f"sampling processors from the target checkpoint: {exc}") from None


def runner_kind(config: JobConfig) -> str:
    """The kind of runner a job's method times (``runners.engine.factory.RUNNER_KINDS``): its YAML's ``runner``
    (``speculative``, ``hf``, ``ar``), ``hf_ar`` for the target alone in transformers' ``generate()``
    (``ar_loop: transformers``, ``method=hf_native_ar``)."""
    if config.method.runner == "ar" and config.method.ar_loop == "transformers":
        return "hf_ar"
    return config.method.runner


def vocab_facts(target: Any, draft: Any, tokenizer: Any, draft_tokenizer: Any) -> dict[str, Any]:
    """What every record of a job with a draft model says of the two vocabularies (empty without one), and how many
    tokens the draft's head computes when restricted (``specbench.models.hot_vocab``)."""
    if draft is None:
        return {}
    hot = hot_ids(draft)
    return {"target_vocab_size": config_vocab_size(target), "draft_vocab_size": config_vocab_size(draft),
            "tokenizers_identical": tokenizers_identical(tokenizer, draft_tokenizer),
            "draft_hot_vocab": int(hot.numel()) if hot is not None else None}


def method_identity(config: JobConfig) -> tuple[str, Any, Any]:
    """``(method_key, method_display, hetero_display)``: the method's identity as it ran, written into every record
    (``specbench.config.method.method_key``; read once per job: it reads the method's YAML and the job's whole
    config), and how tables name the method and the cross-vocabulary rule that ran (their YAML's ``display``, as it
    ran: ``analysis`` reads them from the record, never from ``conf/``)."""
    key = method_key(config.method.name, config.method.params, config.hetero_rule, config.as_dict().get("hetero"))
    return key, config.method.display, hetero_display(config.hetero_rule, config.hetero)


class Job:
    """Models, tokenizers, the drafter and the runner of one job (built once, after ``prepare``): the job's
    composition root. The parts are built where they are defined: the pair (``load_pair``), the kernels
    (``_kernels``), the target alone (``runners.jobs.target_alone``), the runner (``runners.engine.factory``)."""

    def __init__(self, prepared: PreparedJob, sweep_dir: str | Path | None = None) -> None:
        config = self.config = prepared.config
        self.policy, self.positions, self.task_facts = prepared.policy, prepared.positions, prepared.task_facts
        self.policies: list[GammaPolicy] = [self.policy] if self.policy is not None else []
        self.share: DeviceShare | None = None  # set by JobRun.start while the job decodes
        self.ar_cache: ARCache | None = None  # set by JobRun.start for greedy verify_lossless
        self.name = ""
        self.server: Any = None  # a server backend's engine (``runners.engine.llamacpp``), stopped by ``close``
        self.backend_info: dict[str, Any] | None = None
        if not config.backend.ours:
            self._server_backend()
            return
        pair = load_pair(config, with_draft=config.speculative)  # an AR job loads its target only
        self.target, self.tokenizer, self.eos = pair.target, pair.tokenizer, pair.eos
        self.draft_model: Any = pair.draft  # the draft model the job drafts with (None: AR, prompt lookup)
        self.draft_tokenizer: Any = pair.draft_tokenizer
        self.activate()
        self.sampling = resolve_sampling(config, self.target)
        self.forward, step, self.batch_kernels = self._kernels(sweep_dir)
        #: the target alone every record compares with (the baseline rule, the one module every baseline decode
        #: goes through)
        self.target_alone = TargetAlone(self.target, self.eos, self.sampling, config, step, self.batch_kernels)
        self.vocab_facts = vocab_facts(self.target, self.draft_model, self.tokenizer, self.draft_tokenizer)
        hot = hot_ids(self.draft_model)
        #: a restricted draft head's tokens (``specbench.models.hot_vocab``), for each record's ``hot_coverage``
        self.hot_tokens: frozenset[int] | None = frozenset(hot.tolist()) if hot is not None else None
        self.latency, self.latency_path = find_latency(config)  # predicted wall times (runners.jobs.predict)
        self.method_key, self.method_display, self.hetero_display = method_identity(config)  # as it ran
        self.shared_target: torch.Tensor | None = None  # hetero: target ids with a string in the draft vocabulary
        self.vocabulary: dict[str, Any] | None = None  # hetero: the pair's vocabulary overlap (``_overlap``)
        #: ``runner``: what is timed, under the one runner contract (``runners.engine.contract``); ``loop``: the
        #: batch-1 loop behind it (None at B > 1: no batch-1 loop is built there)
        self.loop: Any = None
        self.runner = self._runner()
        #: the job's records are their own reference (an ``ar`` job of our loop), chosen once
        self.own_reference = self.runner is self.target_alone.runner

    def _server_backend(self) -> None:
        """A job on llama.cpp's server: our tokenizer (the prompts and the records' texts), the server's engine, its
        two loops as the runner and the target alone; no torch model is loaded."""
        from runners.engine.llamacpp import LlamaCppEngine
        from runners.jobs.target_alone import ServerTargetAlone
        from specbench.models import load_generation_eos
        from specbench.models.cache import MODEL_CACHE

        config = self.config
        self.tokenizer = MODEL_CACHE.tokenizer(config.pair.target, config.cache_dir)  # once per process
        self.eos = load_generation_eos(config.pair.target, self.tokenizer, config.cache_dir)
        self.target = self.draft_model = self.draft_tokenizer = None
        self.sampling = Sampling(config.temperature)
        self.forward = self.batch_kernels = None
        self.server = LlamaCppEngine(config, self.tokenizer)
        self.backend_info = self.server.describe()
        self.target_alone = ServerTargetAlone(self.server.target_alone, config, self.backend_info)
        self.vocab_facts, self.hot_tokens = {}, None
        self.latency, self.latency_path = None, None
        self.method_key, self.method_display, self.hetero_display = method_identity(config)
        self.shared_target, self.vocabulary = None, None
        self.loop = self.server.method or self.server.target_alone
        self.runner = OneAtATime(self.loop) if self.server.method is not None else self.target_alone.runner
        self.own_reference = self.runner is self.target_alone.runner

    def close(self) -> None:
        """Stop what the job started (a server backend's processes); idempotent."""
        if self.server is not None:
            self.server.close()

    def activate(self) -> None:
        """Give the job's models the job's cache kinds: ``engine.graphs`` for every cache our loops build for the
        target and the draft model (the target alone's too: the baseline rule) and, for our batch-1 loop,
        ``engine.width``'s static target cache (``runners.engine.invariant``). A cache kind is set per model object
        for the process, and a model loaded once serves a sweep's jobs: so the job sets its own when it is built and
        again before each of its decodes (``JobRun.generate``, and the interleaved launcher's warm-up, per-call
        costs and paired target alone), where a process holds several jobs of one model at once."""
        config = self.config
        if self.server is not None:  # a server backend holds no cache kinds of ours
            return
        own_tokens = config.drafter is not None and drafter_kind(config.drafter).own_vocabulary  # a draft's own tokens
        use_graphs(config.engine.graphs, (self.target, self.draft_model), config.max_new_tokens,
                   uncaptured=(self.draft_model,) if own_tokens else ())
        if self.draft_model is not None:  # after use_graphs: a compiled draft keeps a static cache whatever it says
            if config.engine.draft_compile and self.draft_model is self.target:
                raise ConfigError("engine.draft_compile compiles the draft model's forwards, and this pair's draft "
                                  "model is the target itself (its forwards would be compiled too)")
            use_compiled(self.draft_model, config.engine.draft_compile, graphs_headroom(config.max_new_tokens))
        if self._ours():
            use_invariant(self.target, config.engine, config.max_new_tokens)

    def _kernels(self, sweep_dir: str | Path | None) -> tuple[Any, Any, Any]:
        """``(forward, step, batch_kernels)``: our loop's at batch 1 (the engine options), the target alone's 1-token
        step on the same (the baseline rule), the batched kernels at B > 1 (the loop's and the baseline's alike);
        choices measured on this machine (engine options ``auto``) are shared with the sweep's other jobs
        (``runners.jobs.kernels``)."""
        config = self.config
        with shared_kernels(self.target, config.pair.target, sweep_dir):
            step = self._step_forward()  # first: its probe (up to PROBE_K_MAX) holds the loop's shorter one
            forward = self._engine_forward()
            if config.batch_size == 1:
                return forward, step, None
            from runners.engine.fast_linear import batch_kernels

            return forward, step, batch_kernels(self.target, config.engine)

    def _runner(self) -> Any:
        """What the job times, built by the one factory (``runners.engine.factory.build_runner``): the kind its
        method names (``runner_kind``) with the parts it decodes with. Our target alone (``method=ar``) is the job's
        ``target_alone.runner`` itself; a batch-1 loop goes behind ``OneAtATime``."""
        config = self.config
        kind = runner_kind(config)
        if kind == "ar":
            self.loop = self.target_alone.loop if config.batch_size == 1 else None
            return self.target_alone.runner
        parts = self._drafting() if kind == "speculative" else {"policy": self.policy}
        built = build_runner(kind, self.target, self.eos, self.sampling, draft_model=self.draft_model,
                             batch_size=config.batch_size, cache=config.method.ar_cache or "dynamic", **parts)
        if config.batch_size > 1:
            return built
        self.loop = built
        return OneAtATime(built)

    def _drafting(self) -> dict[str, Any]:
        """The parts of our speculative loop: the drafter and the policy; at batch 1 the engine options
        (``verify_forward.engine_options``), at B > 1 the drafter's declared batched form (``specbench.drafter_kinds``:
        a same-vocabulary model's) or one drafter per row (any other), the batched kernels and ``batch_gamma``
        (``per_row``: one policy per row slot, the job's own in slot 0 and copies of it in the others; ``shared``:
        the job's policy alone). A cross-vocabulary job also notes the pair's vocabulary overlap (``_overlap``)."""
        config = self.config
        assert self.policy is not None
        if config.batch_size > 1:
            from runners.engine.batch_drafters import PerRowDrafters

            if config.batch_gamma == "per_row":
                self.policies = [self.policy, *(copy.deepcopy(self.policy) for _ in range(config.batch_size - 1))]
            if config.hetero_rule is not None:  # the pair's vocabulary overlap, for the summary
                self._overlap(self._drafter())
            drafter = build_batched_drafter(config.drafter, self._drafter_context()) or PerRowDrafters(self._drafter)
            return {"drafter": drafter, "policy": self.policies, "kernels": self.batch_kernels,
                    "gamma_mode": config.batch_gamma}
        from runners.engine.verify_forward import engine_options

        drafter = self._drafter()
        engine = engine_options(self.target, config.engine, config.gamma, self.forward) if self.forward is not None else {}
        if config.hetero_rule is not None:
            self._overlap(drafter)
        return {"drafter": drafter, "policy": self.policy, "engine": engine}

    def _ours(self) -> bool:
        """Whether the job decodes with our loop at batch 1 (speculative, or the target alone of ``method=ar``)."""
        return runner_kind(self.config) in ("speculative", "ar") and self.config.batch_size == 1

    def _engine_forward(self) -> Any:
        """Our loop's ``VerifyForward`` at batch 1 (``engine_forward``: the engine options, probed once per model):
        for a job of our speculative loop or our autoregressive loop (an ``ar`` job times its step on
        ``step_forward``; this one's blocks are what the interleaved sweep's per-call costs time, ``sweep_costs``);
        None for transformers' loops (assisted generation, ``method=hf_native_ar``: they run transformers' kernels)
        and at batch size > 1."""
        if not self._ours():
            return None
        from runners.engine.verify_forward import engine_forward

        return engine_forward(self.target, self.config.engine, self.config.gamma)

    def _step_forward(self) -> Any:
        """The target alone's forward at batch 1 under the job's engine options (``verify_forward.step_forward``:
        the fastest step the loop's kernels allow, whatever the bucket map and γ); None (plain kernels) where the
        compared loop is transformers' or at batch size > 1."""
        if not self._ours():
            return None
        from runners.engine.verify_forward import step_forward

        return step_forward(self.target, self.config.engine)

    def devices(self) -> list[str]:
        """Every device the job's models have parameters on (a server backend: the CPU)."""
        if self.server is not None:
            return ["cpu"]
        models = [m for m in (self.target, self.draft_model) if m is not None]
        return sorted({str(p.device) for m in models for p in m.parameters()} or {str(model_device(self.target))})

    def _drafter(self) -> Any:
        return build_drafter(self.config.drafter, self._drafter_context())

    def _drafter_context(self) -> DrafterContext:
        config = self.config
        return DrafterContext(
            target_tokenizer=self.tokenizer,
            eos_token_ids=self.eos,
            target_vocab_size=logits_width(self.target),
            draft_model=self.draft_model,
            draft_tokenizer=self.draft_tokenizer,
            options=config.pair.draft.options,
            hetero=config.hetero,
        )

    def _overlap(self, drafter: Any) -> None:
        """The pair's vocabulary overlap (``summary.json: hetero.vocabulary``) and the shared target ids."""
        from runners.drafters.vocab_map import drafter_mapping, overlap_summary

        mapping = getattr(drafter, "mapping", None) or drafter_mapping(drafter, logits_width(self.target))
        self.vocabulary = overlap_summary(mapping, self.tokenizer, drafter.dtok.tok)
        self.shared_target = torch.zeros(mapping.target_vocab_size, dtype=torch.bool)
        self.shared_target[mapping.shared_target_ids] = True

    def reset(self) -> None:
        """The policy as configured (state carried across prompts, e.g. by the warm-up, is dropped)."""
        for policy in self.policies:
            policy.reset()
        if hasattr(self.loop, "reset"):
            self.loop.reset()

    def generator(self, seed: int) -> DeviceGenerators:
        """Random numbers for one generation: a generator per device (target and draft may differ)."""
        return DeviceGenerators(seed)

    def untimed(self, prompts: list[list[int]], max_new_tokens: int, seed: int) -> None:
        """A warm-up decoding of ``prompts`` (a batch: one prompt at batch size 1) that leaves the policy and the
        loop as it found them (a carried-over γ or an adapted threshold must come from the timed prompts only):
        the policy's ``snapshot`` before, its ``restore`` after."""
        saved = [p.snapshot() for p in self.policies]
        saved_carry = getattr(self.loop, "carried_gamma", None)
        self.runner.generate(prompts, max_new_tokens, self.generator(seed))
        for policy, state in zip(self.policies, saved):
            policy.restore(state)
        if saved_carry is not None:
            self.loop.carried_gamma = saved_carry


def warm_up(job: Job, prompts: list[Prompt]) -> None:
    """Untimed generations so one-off costs (allocations, kernels) stay out of the records."""
    config = job.config
    if config.warmup <= 0:
        return
    ids, _ = encode_turn(job.tokenizer, [], prompts[0].turns[0], config.task.prompt_format)
    n_tokens = min(16, config.max_new_tokens)
    prompts = [ids] * config.batch_size  # the batch's shapes: B copies of the warm-up prompt
    decodes = [lambda k: job.runner.generate(prompts, n_tokens, job.generator(config.seed))]
    if config.verify_lossless and config.greedy and not job.own_reference:  # the baseline's own warm-ups
        decodes.append(lambda k: job.target_alone.untimed(prompts, n_tokens))
    warm_ups(config.warmup, *decodes)
