"""The ``engine`` node (``conf/config.yaml``): the speculative loop's lossless options, typed (``EngineConfig``).

They change which kernels compute the target's forwards and how its KV cache is held, never the function; the
target alone every speedup divides by runs the same ones (the baseline rule). Their implementation is
``runners.engine`` (``fast_linear``, ``verify_forward``, ``graphs``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specbench.checks import OFF_WORDS, check_bool, check_choice, check_int, field_names, only_known
from specbench.registry import ConfigError

FAST_LINEAR = (False, "head", "all", "onednn", "auto")
#: how our loops hold the KV cache (``engine.graphs``): ``eager`` (transformers' dynamic cache, cropped
#: after a rejection: the papers' loop), ``static`` (a preallocated cache rolled back by position,
#: ``runners.engine.kv.PositionCache``), ``captured`` (the static cache with CUDA-graph forwards: CUDA only)
GRAPHS = ("eager", "static", "captured")
VERIFY_BUCKETS = (False, "auto", "probe")
#: the target's dtype (``engine.dtype``): ``model`` (the one its config names) or ``auto`` (bfloat16
#: for a float32 target on a CPU with native bf16, ``runners.engine.invariant.resolve_dtype``)
DTYPES = ("model", "auto")
#: ``engine.width`` when ``auto`` turns it on (``runners.engine.invariant``): a verification of γ ≤ 7 in one forward
DEFAULT_WIDTH = 8


def _off(value: Any) -> Any:
    """``false`` / ``off`` / ``none`` / null as a string (a CLI override) or a value: ``False``."""
    return False if value is None or (isinstance(value, str) and value.lower() in OFF_WORDS) else value


@dataclass(frozen=True)
class EngineConfig:
    """How our speculative loop runs the target (``runners.engine.verify_forward``); every option is
    lossless (it changes which kernels compute the same function, or where TTFT ends), and all are off
    by default. At batch 1 they apply to our loops: the speculative loop runs its blocks on them, and the
    target alone — an ``ar`` job's loop and the reference every job of our loop divides by — steps on the
    fastest step they allow (``verify_forward.step_forward``: whatever the bucket map, whatever γ), so the
    ``ar`` jobs of a sweep over ``method=ar,specdecode`` decode the baseline its speculative jobs divide by, and
    an ``ar`` job's summary names that step as its ``engine``. Transformers' loops (``runner: hf``,
    ``hf_native_ar``) ignore them (their summary's ``engine`` is null). At ``batch_size`` > 1 only
    ``fast_linear`` applies, to the batched loop and the target alone at B alike (``ar`` jobs too;
    ``runners.engine.fast_linear.batch_kernels``).

    * ``fast_linear``: ``false`` | ``head`` | ``all`` | ``onednn`` | ``auto`` — the target's forwards, the target
      alone's steps alike, through a private copy of the target (``runners.engine.fast_linear``): ``all``, blocks
      of 1..16 tokens (one row as the first of two equal rows; at B > 1: 2 to
      ``runners.engine.fast_linear.BATCH_MAX_ROWS`` rows) with ``nn.Linear`` layers computing ``(W·xᵀ)ᵀ``;
      ``head``: the LM head only; ``onednn``: every ``nn.Linear`` on oneDNN's matmul with its weight reordered once
      (CPU; a second copy of the linear weights in memory); ``auto``: the fastest of the plain forward, ``all`` and
      ``onednn``, measured on a CPU model; off on GPU, where it is unmeasured);
    * ``verify_buckets``: ``false`` | ``auto`` (probe once per process on CPU, off on GPU) | ``probe``
      (probe on any device) | ``{n: [m, r]}`` (pad an ``n``-token block to ``m`` tokens, LM head on
      ``r`` rows, ``n <= r <= m``);
    * ``bucket_k_max``: the longest block the probe measures (null: ``max(9, gamma + 1)``, at most 17, for the
      loop's blocks; 17 for the target alone's step, which takes no γ);
    * ``fused_prefill``: ``false`` | ``true`` | ``auto`` (on for CPU models, off on GPU) — the first
      round drafts from the prompt and the target verifies prompt + draft in its prefill forward (as
      transformers does); TTFT is then the end of that round;
    * ``width``: ``false`` | ``n`` ≥ 2 | ``auto`` — block-invariant forwards (``runners.engine.invariant``): after the
      prefill every forward of the target, the loop's blocks and the target alone's steps alike, feeds exactly ``n``
      tokens (padded; a longer block in pieces of ``n``) on a static cache, so a position's logits are the same bits
      whichever block computed them: what makes a bfloat16 target lossless against itself (``auto``: on, at
      ``DEFAULT_WIDTH``, for a half-precision CPU target of our batch-1 loop; off otherwise, GPU included);
    * ``dtype``: ``model`` (the default: the dtype the target's config names) | ``auto`` (bfloat16 for a float32
      target of our batch-1 loop on a CPU with native bf16, AMX or AVX-512 BF16; the records then name the target
      bfloat16, a different target from the float32 one);
    * ``graphs``: ``eager`` (the default: transformers' dynamic cache, cropped after a rejection, the loop the
      papers timed) | ``static`` (every forward of the target and of a draft model on a preallocated cache rolled
      back by position, ``runners.engine.kv.PositionCache``; at batch 1 and B, the target alone too) |
      ``captured`` (the static cache, the batch-1 forwards replayed from CUDA graphs, ``runners.engine.graphs``:
      CUDA only, refused on a CPU model and at ``batch_size`` > 1);
    * ``draft_compile``: ``false`` (the default) | ``true`` — the draft model's forwards after its prefill compiled by
      ``torch.compile`` on a static cache (``runners.engine.compiled_draft``; CPU, batch 1; compiled when the job
      starts, once per process). The draft's logits change in their last bits (fused kernels), so a draft token can
      differ from the eager draft's at a tie; the output stays the target's own, and the target alone is not touched.

    A job's defaults are ``conf/config.yaml``'s ``engine`` node: ``fast_linear`` and ``verify_buckets``
    ``auto`` (on where they were measured to pay: the CPU; README, "Where the time goes"). ``EngineConfig()``
    itself is all off: the plain loop, what scripts and the replay take when they are given no options,
    and what a summary without an ``engine`` node (written before the options existed) ran.
    """

    fast_linear: bool | str = False
    verify_buckets: bool | str | Mapping[int, tuple[int, int]] = False
    bucket_k_max: int | None = None
    fused_prefill: bool | str = False
    graphs: str = "eager"
    width: bool | int | str = False
    dtype: str = "model"
    draft_compile: bool = False

    @classmethod
    def from_mapping(cls, node: Mapping[str, Any] | None) -> EngineConfig:
        values = only_known(node or {}, "engine", field_names(cls))
        fast = _off(values.get("fast_linear", cls.fast_linear))
        if fast not in FAST_LINEAR or fast is True:
            raise ConfigError(f"engine.fast_linear {fast!r} is not one of false, head, all, onednn, auto")
        spec = _off(values.get("verify_buckets", cls.verify_buckets))
        if isinstance(spec, Mapping):
            spec = _buckets(spec)
        elif spec not in VERIFY_BUCKETS:
            raise ConfigError(f"engine.verify_buckets {spec!r} is not one of false, auto, probe or a mapping "
                              f"{{n: [m, r]}}")
        fused = values.get("fused_prefill", cls.fused_prefill)
        fused = "auto" if isinstance(fused, str) and fused.lower() == "auto" else check_bool("engine.fused_prefill", fused)
        k_max = check_int("engine.bucket_k_max", values.get("bucket_k_max", cls.bucket_k_max), 2, optional=True)
        graphs = check_choice("engine.graphs", values.get("graphs", cls.graphs), GRAPHS)
        width = _off(values.get("width", cls.width))
        if isinstance(width, str) and width.lower() == "auto":
            width = "auto"
        elif width is not False:
            width = check_int("engine.width", width, 2)
        dtype = check_choice("engine.dtype", values.get("dtype", cls.dtype), DTYPES)
        draft_compile = check_bool("engine.draft_compile", _off(values.get("draft_compile", cls.draft_compile)))
        if width not in (False, "auto") and graphs == "captured":
            raise ConfigError("engine.width with engine.graphs=captured is not yet exercised on a GPU; "
                              "engine.graphs=static runs block-invariant forwards uncaptured")
        if width not in (False, "auto") and fused is True:
            raise ConfigError("engine.width feeds every forward after the prefill at one width; "
                              "engine.fused_prefill=true verifies the first round inside the prefill: set one of them")
        return cls(fast, spec, k_max, fused, graphs, width, dtype, draft_compile)

    @property
    def any(self) -> bool:
        return bool(self.fast_linear or self.verify_buckets or self.fused_prefill or self.graphs != "eager"
                    or self.width or self.dtype != "model" or self.draft_compile)


def _buckets(spec: Mapping[Any, Any]) -> dict[int, tuple[int, int]]:
    """``{n: [m, r]}`` with integers ``1 <= n <= r <= m``."""
    out: dict[int, tuple[int, int]] = {}
    for n, mr in spec.items():
        try:
            key, (m, r) = int(n), (int(mr[0]), int(mr[1]))
            if len(mr) != 2 or not 1 <= key <= r <= m:
                raise ValueError
        except (TypeError, ValueError, IndexError, KeyError):
            raise ConfigError(f"engine.verify_buckets: {n}: {mr!r} must be [m, r] with 1 <= n <= r <= m") from None
        out[key] = (m, r)
    return out
