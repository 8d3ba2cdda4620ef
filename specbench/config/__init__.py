"""Typed configs: the composed Hydra config, validated once at the boundary into frozen dataclasses.

``run.py`` lets Hydra compose ``conf/`` into a ``DictConfig``; ``JobConfig.from_mapping`` turns its
plain-container form into the objects below, checking every value that can be checked without
a model, and raises ``ConfigError`` with a one-line message naming the offending key
(optimum-benchmark's "typed configs at the boundary"). Nothing below the job reads the raw
config: the job passes these objects down. This module is the config's public face: ``JobConfig``
and the node types it is made of, ``compose``, the value checks, ``ConfigError``.

Shapes (``conf/``), each node typed in its own module:

* ``pair`` (``specbench.config.pair``): ``name``, ``same_tokenizer`` (default true), ``target`` (a
  model node) and ``draft`` (a model node, or ``kind: prompt_lookup`` with its options). Model nodes
  live once in ``conf/model/<name>.yaml`` and pairs compose them (``defaults: [/model@target: …]``),
  so a pair file holds only what differs. Every model field not set takes ``ModelSpec``'s default.
* ``method`` (``specbench.config.method``): ``name``, ``runner`` (``ar`` | ``speculative`` | ``hf``),
  ``policy`` (a key of ``methods.policies.POLICIES``; none for ``ar``) and the policy's knobs (the
  other keys); an ``ar`` method's knobs are ``cache`` (``dynamic`` | ``offloaded``) and ``loop``
  (``specbench`` | ``transformers``, i.e. ``generate()``: ``method=hf_native_ar``).
* ``hetero`` (``specbench.config.method``): the cross-vocabulary algorithm, its own choice (``auto`` =
  SLEM at temperature 0, TLI above, on pairs whose draft has another tokenizer; nothing on
  same-tokenizer pairs).
* ``task`` (``specbench.tasks.config``), ``logger`` (``specbench.config.logger``) and ``engine``
  (``specbench.config.engine``), and the scalars (``gamma``,
  ``temperature``, the sampling processors ``top_k`` / ``top_p`` / ``typical_p``, ``max_new_tokens``, …).
* ``device``: null, or where the job moves its pair (``specbench.config.pair.on_device``: the target and the
  draft's model; ``device=cuda`` runs any pair on a GPU), applied here before the pair is typed.

Defaults are written once. The job's scalars have theirs in ``conf/config.yaml`` only: ``JobConfig``
has no field defaults, and a mapping without a scalar (a summary written before the key existed) takes
it from there (``job_defaults``). A node's defaults are its dataclass fields' (``ModelSpec``,
``HeteroConfig``, ``LoggerConfig``, …), which ``from_mapping`` reads for an absent key; YAML files that
restate one are checked against it (``tests/specbench/test_config.py``). The one deliberate difference:
``EngineConfig()`` is the plain loop (no options: what an old summary ran, what scripts get), while a
new job's engine options are ``conf/config.yaml``'s ``engine`` node.

Hydra's ConfigStore holds the model base node (``register_resolvers``: every ``ModelSpec`` field at
its default), not typed schemas: a schema-typed group makes Hydra reject a bad value while it composes,
with a multi-line merge error and before our code runs; validating here instead gives every bad value
the same one-line ``ConfigError`` (naming the key) and the same exit status, and leaves no job folder
behind. Job folder names and the drift check live in ``specbench.job_folders``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any

from specbench.checks import (
    OFF_WORDS,
    check_bool,
    check_choice,
    check_int,
    check_number,
    check_str,
    only_known,
)
from specbench.config.backend import BackendConfig
from specbench.config.engine import DEFAULT_WIDTH as DEFAULT_WIDTH
from specbench.config.engine import EngineConfig
from specbench.config.logger import LoggerConfig
from specbench.config.method import HeteroConfig, MethodConfig
from specbench.config.pair import ModelSpec, PairConfig, check_device, on_device
from specbench.drafter_kinds import auto_rule, drafter_kind
from specbench.registry import ConfigError
from specbench.resources import parse_bytes
from specbench.tasks.config import TaskConfig


def check_latency(value: Any) -> str | bool | None:
    """``latency``: null (look in the default places), false (no predictions) or a path."""
    if isinstance(value, str) and value.lower() in OFF_WORDS:
        return False
    if value is None or value is False:
        return value
    return check_str("latency", value)


# --------------------------------------------------------------------------- the job

#: the job's nodes: each typed by its own dataclass, whose defaults are its own
NODES = ("pair", "method", "task", "logger", "hetero", "engine", "backend")
#: the job's own settings: their defaults are written once, in ``conf/config.yaml`` (``job_defaults``)
SCALARS = ("gamma", "temperature", "top_k", "top_p", "typical_p", "max_new_tokens", "seed", "results_dir",
           "verify_lossless", "warmup", "warmup_per_prompt", "threads", "cache_dir", "overwrite", "model_budget",
           "on_locked", "latency", "repeats", "host_probe", "batch_size", "batch_gamma", "device")
TOP_LEVEL = NODES + SCALARS
CHECKPOINT = "checkpoint"  # a sampling processor's value from the target checkpoint's generation config
ON_LOCKED = ("skip", "wait")
#: how a batch chooses γ (config key ``batch_gamma``, record field ``gamma_mode``): ``per_row``, one policy per row;
#: ``shared``, one γ per round for the whole batch. The one declaration: the batched loop
#: (``runners.engine.batched``) and the replay (``runners.replay.replay``) check against it.
GAMMA_MODES = ("per_row", "shared")
#: what the llama.cpp backend can run (``JobConfig.check_server_backend``): γ policies and draft kinds
SERVER_POLICIES = ("fixed", "p_min")
SERVER_DRAFTS = ("model", "prompt_lookup", "hybrid")


def check_processor(key: str, value: Any) -> int | float | str | None:
    """``top_k`` (an integer >= 0; 0 = off), ``top_p`` / ``typical_p`` (in (0, 1]; 1 = off), null
    (off), or ``checkpoint``: the value in the target's ``generation_config`` (transformers'
    default when the checkpoint sets none: top_k 50, top_p 1, typical_p 1), which is what
    hf-bench's ``generate`` calls got, since it never passed them."""
    if value is None or value == CHECKPOINT:
        return value
    if key == "top_k":
        if isinstance(value, str):
            raise ConfigError(f"top_k must be an integer >= 0, null or {CHECKPOINT}, got {value!r}")
        return check_int(key, value, 0)
    if isinstance(value, str) or (check_number(key, value, lo=0.0, hi=1.0) == 0.0):
        raise ConfigError(f"{key} must be in (0, 1], null or {CHECKPOINT}, got {value!r}")
    return float(value)


@functools.lru_cache(maxsize=1)
def job_defaults() -> Mapping[str, Any]:
    """The job's scalar defaults (``SCALARS``), as ``conf/config.yaml`` writes them: the one place they are
    written. A config composed by Hydra holds every one; a mapping without one (a summary written before
    the key existed, a hand-made config) takes it from here."""
    from omegaconf import OmegaConf

    from specbench.paths import CONF_DIR

    node = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "config.yaml"), resolve=False)
    missing = [k for k in SCALARS if k not in node]
    if missing:
        raise ConfigError(f"conf/config.yaml has no default for {missing[0]!r}")
    return MappingProxyType({k: node[k] for k in SCALARS})


@dataclass(frozen=True)
class JobConfig:
    """One job: a pair × method × task × initial γ (and the run settings), validated. No field has a
    default: ``from_mapping`` fills an absent scalar from ``conf/config.yaml`` (``job_defaults``) and an
    absent node from its dataclass (``HeteroConfig()``, ``LoggerConfig()``, ``EngineConfig()``)."""

    pair: PairConfig
    method: MethodConfig
    task: TaskConfig
    hetero: HeteroConfig
    logger: LoggerConfig
    engine: EngineConfig
    backend: BackendConfig
    gamma: int
    temperature: float
    top_k: int | str | None
    top_p: float | str | None
    typical_p: float | str | None
    max_new_tokens: int
    seed: int
    results_dir: str
    verify_lossless: bool
    warmup: int
    warmup_per_prompt: int
    threads: int | None
    cache_dir: str | None
    overwrite: bool
    model_budget: int | None  # bytes the process's model cache may hold (None: the device's free memory)
    on_locked: str  # another process runs this job: skip it, or wait for it to finish
    latency: str | bool | None  # the latency model for predicted wall times (``runners.jobs.predict``)
    repeats: int  # timings of each prompt turn (records carry ``repeat``); more repeats extend a job folder
    host_probe: bool  # time a fixed target forward before each timed generation (``runners.jobs.probe``)
    batch_size: int  # prompt turns decoded together (``runners.engine.batched``; 1: the batch-1 loop)
    batch_gamma: str  # batch_size > 1: ``per_row`` (a policy per row) or ``shared`` (one γ per round)
    device: str | None  # where the pair's models were moved (``specbench.config.pair.on_device``); null: their files' own
    resolved: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_mapping(cls, cfg: Mapping[str, Any]) -> JobConfig:
        """The typed job of a composed config (a ``DictConfig`` is resolved to plain containers first)."""
        resolved = _plain(cfg)
        values = only_known(resolved, "config", TOP_LEVEL)
        if "pair" not in values or "method" not in values or "task" not in values:
            raise ConfigError("the config needs pair, method and task")
        values = {**job_defaults(), **values}
        device = check_device(values["device"])
        if device is not None:  # the summary's config names where the models ran
            values["pair"] = resolved["pair"] = on_device(values["pair"], device)
        scalars = {
            "gamma": check_int("gamma", values["gamma"], 1),
            "temperature": check_number("temperature", values["temperature"], lo=0.0),
            "top_k": check_processor("top_k", values["top_k"]),
            "top_p": check_processor("top_p", values["top_p"]),
            "typical_p": check_processor("typical_p", values["typical_p"]),
            "max_new_tokens": check_int("max_new_tokens", values["max_new_tokens"], 1),
            "seed": check_int("seed", values["seed"]),
            "results_dir": check_str("results_dir", values["results_dir"]),
            "verify_lossless": check_bool("verify_lossless", values["verify_lossless"]),
            "warmup": check_int("warmup", values["warmup"], 0),
            "warmup_per_prompt": check_int("warmup_per_prompt", values["warmup_per_prompt"], 0),
            "threads": check_int("threads", values["threads"], 1, optional=True),
            "cache_dir": check_str("cache_dir", values["cache_dir"], optional=True),
            "overwrite": check_bool("overwrite", values["overwrite"]),
            "model_budget": parse_bytes(values["model_budget"], "model_budget"),
            "on_locked": check_choice("on_locked", values["on_locked"], ON_LOCKED),
            "latency": check_latency(values["latency"]),
            "repeats": check_int("repeats", values["repeats"], 1),
            "host_probe": check_bool("host_probe", values["host_probe"]),
            "batch_size": check_int("batch_size", values["batch_size"], 1),
            "batch_gamma": check_choice("batch_gamma", values["batch_gamma"], GAMMA_MODES),
            "device": device,
        }
        job = cls(
            pair=PairConfig.from_mapping(values["pair"]),
            method=MethodConfig.from_mapping(values["method"]),
            task=TaskConfig.from_mapping(values["task"]),
            hetero=HeteroConfig.from_mapping(values.get("hetero")),
            logger=LoggerConfig.from_mapping(values.get("logger")),
            engine=EngineConfig.from_mapping(values.get("engine")),
            backend=BackendConfig.from_mapping(values.get("backend")),
            resolved=resolved,
            **scalars,
        )
        job.check_combination()
        return job

    # ------------------------------------------------------------------ derived choices
    @property
    def speculative(self) -> bool:
        return self.method.runner != "ar"

    @property
    def hetero_rule(self) -> str | None:
        """The cross-vocabulary algorithm this job runs (None: one vocabulary, or no draft)."""
        if not self.speculative or self.pair.draft is None or self.hetero.name == "none":
            return None
        if self.hetero.name == "auto":
            if self.pair.same_tokenizer:
                return None
            return auto_rule(self.temperature)  # its declaration: SLEM at temperature 0, TLI above
        return self.hetero.name

    @property
    def drafter(self) -> str | None:
        """The drafter registry key (``runners.drafters.DRAFTERS``): the pair's draft kind, or the
        cross-vocabulary algorithm's drafter for a model draft of another tokenizer."""
        if not self.speculative or self.pair.draft is None or self.method.runner == "hf":
            return None
        return self.hetero_rule or self.pair.draft.kind

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def check_combination(self) -> None:
        """What no single node can check: the method against the pair and the temperature, the batch size
        against the method and the engine."""
        pair, method = self.pair, self.method
        if not self.backend.ours:
            self.check_server_backend()
        if self.batch_size > 1:
            self.check_batch()
        if self.engine.graphs != "eager":
            self.check_graphs()
        if self.engine.draft_compile:
            self.check_draft_compile()
        if self.batch_size > 1 and self.engine.width not in (False, "auto"):
            raise ConfigError(f"engine.width={self.engine.width} runs our batch-1 loop's forwards at one width; "
                              f"batch_size={self.batch_size} runs the batched engine: use batch_size=1 or engine.width=false")
        if method.runner == "ar":
            return
        draft = pair.draft
        if draft is None:
            raise ConfigError(f"method {method.name!r} needs a draft but pair {pair.name!r} has none")
        declared = drafter_kind(draft.kind)  # what the pair's drafter is (specbench.drafter_kinds)
        if method.runner == "hf" and (not pair.same_tokenizer or not declared.plain_model):
            raise ConfigError(
                f"method {method.name!r} runs transformers' assisted generation with a draft model of the "
                f"target's vocabulary; pair {pair.name!r} has none. Use our engine's methods instead."
            )
        rule = self.hetero_rule
        if rule is None and not pair.same_tokenizer and declared.plain_model:
            raise ConfigError(
                f"pair {pair.name!r} has a draft with a different tokenizer than its target, and hetero=none "
                f"needs one vocabulary. Use hetero=auto, hetero=slem (greedy) or hetero=tli (any temperature), "
                f"or hetero=union / hetero=slrs."
            )
        if declared.loads_model and not declared.plain_model and not pair.same_tokenizer:
            raise ConfigError(f"pair {pair.name!r}: a {draft.kind} draft proposes target tokens with its draft model, "
                              f"which needs the target's tokenizer (same_tokenizer: true)")
        if rule is not None and not declared.plain_model:
            raise ConfigError(f"hetero={rule} needs a draft model with its tokenizer; pair {pair.name!r} drafts "
                              f"with {draft.kind!r}")

    def check_server_backend(self) -> None:
        """What llama.cpp's server can express (``runners.engine.llamacpp``): the target alone, a fixed γ or its
        p-min stop, with a same-vocabulary draft model, its n-gram lookup or both; greedy, one request at a time
        (``concurrency`` sends several), on the CPU. Anything else is refused before anything starts."""
        method, pair, engine = self.method, self.pair, self.engine
        why = None
        if method.runner == "hf" or method.ar_loop == "transformers" or method.ar_cache == "offloaded":
            why = f"method {method.name!r} runs transformers' loop or cache"
        elif self.speculative and method.policy not in SERVER_POLICIES:
            why = (f"method {method.name!r} ({method.display}) chooses γ by a rule llama.cpp has no flag for; it "
                   f"drafts at a fixed γ (method=specdecode) or stops on the draft's confidence (method=p_min)")
        elif self.speculative and (not pair.same_tokenizer or self.hetero_rule is not None):
            why = f"pair {pair.name!r} drafts with another vocabulary; llama.cpp needs the target's tokenizer"
        elif self.speculative and pair.draft is not None and pair.draft.kind not in SERVER_DRAFTS:
            why = (f"pair {pair.name!r} drafts with {pair.draft.kind!r}; llama.cpp has a draft model, n-gram lookup "
                   f"({', '.join(SERVER_DRAFTS)})")
        elif self.batch_size > 1:
            why = f"batch_size={self.batch_size} is our batched loop; the server's concurrent regime is scripts/bench_serving.py"
        elif not self.greedy:
            why = "temperature > 0: the server backend is measured greedy (lossless against its own target alone)"
        elif self.device not in (None, "cpu"):
            why = f"device={self.device}: the project builds llama.cpp for the CPU"
        elif engine.graphs != "eager" or engine.draft_compile or engine.dtype != "model" or \
                engine.width not in (False, "auto"):
            why = "the engine.* options are our engine's (graphs, draft_compile, dtype, width)"
        if why is not None:
            raise ConfigError(f"backend={self.backend.name}: {why}")

    def check_graphs(self) -> None:
        """``engine.graphs`` other than ``eager`` is our loops' cache (``runners.engine.kv.PositionCache``):
        transformers' loops and the offloaded cache keep their own."""
        method, graphs = self.method, self.engine.graphs
        if method.runner == "hf" or method.ar_loop == "transformers":
            raise ConfigError(f"engine.graphs={graphs}: method {method.name!r} runs transformers' generate() on its "
                              f"own cache; use engine.graphs=eager")
        if method.ar_cache == "offloaded":
            raise ConfigError(f"engine.graphs={graphs}: the offloaded KV cache is a dynamic one; use engine.graphs=eager")
        if graphs == "captured" and self.batch_size > 1:
            raise ConfigError(f"engine.graphs=captured is built for batch_size=1 (one graph per width); at "
                              f"batch_size={self.batch_size} use engine.graphs=static")

    def check_draft_compile(self) -> None:
        """``engine.draft_compile`` compiles our batch-1 loop's draft model (``runners.engine.compiled_draft``):
        transformers' loops and the batched drafter call the draft their own way."""
        method = self.method
        if method.runner == "hf":
            raise ConfigError(f"engine.draft_compile: method {method.name!r} runs transformers' assisted generation, "
                              f"which calls the draft itself; use engine.draft_compile=false")
        if self.batch_size > 1:
            raise ConfigError(f"engine.draft_compile compiles the batch-1 draft's step; at batch_size={self.batch_size} "
                              f"use engine.draft_compile=false")

    def check_batch(self) -> None:
        """``batch_size`` > 1 runs ``runners.engine.batched``: our loop (not transformers'), the dynamic
        cache; of the engine options only ``fast_linear`` (the batch-1 ``verify_buckets`` and ``fused_prefill``:
        ``auto`` turns them off there)."""
        method, engine = self.method, self.engine
        why = None
        if method.runner == "hf" or method.ar_loop == "transformers":
            why = f"method {method.name!r} runs transformers' generate(), one sequence at a time"
        elif method.ar_cache == "offloaded":
            why = "the offloaded KV cache is a batch-1 baseline"
        else:
            on = [k for k in ("verify_buckets", "fused_prefill")
                  if getattr(engine, k) not in (False, None, "auto")]
            if on:
                why = f"engine.{on[0]} is a batch-1 option (set it to auto or false)"
        if why is not None:
            raise ConfigError(f"batch_size={self.batch_size}: {why}; use batch_size=1")

    def as_dict(self) -> dict[str, Any]:
        """The resolved config as plain containers (what summary.json and W&B record)."""
        return dict(self.resolved)


def _plain(cfg: Any) -> dict[str, Any]:
    from omegaconf import DictConfig, OmegaConf

    if isinstance(cfg, DictConfig):
        return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    if not isinstance(cfg, Mapping):
        raise ConfigError(f"a config must be a mapping, got {type(cfg).__name__}")
    return dict(cfg)


# --------------------------------------------------------------------------- Hydra

def compose(overrides: Sequence[str] = (), config_dir: str | Path | None = None) -> Any:
    """Compose ``conf/config.yaml`` with ``overrides`` outside ``run.py`` (CLIs, scripts, tests)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from specbench.paths import CONF_DIR

    register_resolvers()
    if GlobalHydra.instance().is_initialized():
        return hydra_compose(config_name="config", overrides=list(overrides))
    with initialize_config_dir(config_dir=str(config_dir or CONF_DIR), version_base="1.3"):
        return hydra_compose(config_name="config", overrides=list(overrides))


def register_resolvers() -> None:
    """What ``conf/`` needs before Hydra composes it: the ``job_dirname`` resolver (``specbench.job_folders``),
    the launcher resolvers (``${specbench_gpus:}``, ``${specbench_cpus:}``: ``specbench.resources``), and the
    model base node in Hydra's ConfigStore (``model/base``: every ``ModelSpec`` field at its default, so a pair's
    ``pair.target.dtype=...`` override finds its key whichever fields the model file sets)."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    from specbench.job_folders import job_dirname
    from specbench.resources import register_launcher_resolvers

    OmegaConf.register_new_resolver("job_dirname", job_dirname, replace=True)
    register_launcher_resolvers()
    base = {f.name: (None if f.default is MISSING else f.default) for f in fields(ModelSpec)}
    ConfigStore.instance().store(group="model", name="base", node=base)
