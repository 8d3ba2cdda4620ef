"""The transformers peer: the same method run by transformers' own assisted generation.

``HFAssistedRunner(target, assistant, policy, eos_token_ids, sampling)
.generate(prompt_ids, max_new_tokens, generator) -> Generation`` calls
``target.generate(input_ids, assistant_model=assistant, ...)`` (batch size 1, same
vocabulary) with transformers' native settings, and records per-round traces
without changing what transformers does. Checked against transformers 5.23
(``generation/candidate_generator.py``, ``generation/utils.py::_assisted_decoding``;
see ../shared/notes/transformers-assisted-generation.md).

Which transformers settings a method maps to (``hf_settings``), read from the
job's policy object (so ``runner: hf`` + the policy of one of our methods is "that
method run by transformers"; γ is the policy's initial γ):

==========================  ==============================  ================================
policy (our method)         num_assistant_tokens_schedule   assistant_confidence_threshold
==========================  ==============================  ================================
fixed (specdecode)          "constant", γ                   0 (no confidence stop)
hf_heuristic                "heuristic", γ carried          0
hf_heuristic, transient     "heuristic_transient", γ        0
assistant_threshold         "constant", γ                   ``threshold`` (τ)
==========================  ==============================  ================================

Anything else (GammaTune, ...) is not a transformers schedule: ``ConfigError``.

Settings are written, as numbers, on ``assistant.generation_config`` before every
prompt (transformers reads them from there only) and the whole config is restored
after the call, so a model object shared with a later job is left as it was.

* ``"heuristic"``: transformers writes the final γ back to the assistant's
  generation config, so it carries into the next ``generate()`` on the same
  assistant. Because the config is restored after each call, this runner reads
  that written-back value and sets it again before the next prompt itself
  (``carried_gamma``): γ persists across the prompts of one runner (one job),
  exactly as with transformers, without leaking into other jobs. ``reset()``
  goes back to the initial γ (the job calls it after warm-up, as it calls ``policy.reset()``
  for our engine's policies).
* ``assistant_threshold``: transformers 5.23 re-fits τ by ROC during a call
  whenever scikit-learn is installed, τ > 0 and the candidate generator is exactly
  ``AssistedCandidateGenerator`` (never for a subclass). ``adaptive_threshold: true``
  is that native behaviour (τ resets on the next call, as 5.23 does, so
  ``persist_threshold: true`` is refused); ``adaptive_threshold: false`` (a fixed τ,
  the rule of Mamou et al.) uses transformers' own rule that a subclass never
  adapts: the per-call candidate generator's class is switched to an empty
  subclass (``_FixedThresholdGenerator``), nothing else changes.

Traces (per round, i.e. per call of ``update_candidate_strategy``, which
transformers makes once per round):

* ``gamma_trace``: the candidate generator's ``num_assistant_tokens`` when the
  round's candidates were requested (γ before the cap by the token budget);
* ``drafted_trace``: ``scores.shape[1] - 1`` (the candidate length);
* ``accepted_trace``: draft tokens the target accepted, as our records define it.
  This is transformers' ``num_matches`` except in one case: when an accepted
  *drafted* EOS ends the sequence, transformers crops the valid tokens at the EOS
  and recomputes ``n_matches = len(valid) - 1``, so it reports that EOS as the
  target's own token (one less than accepted). The runner counts it as accepted
  (the drafted token at index ``num_matches`` equals the token that was kept);
  transformers' raw values are kept in ``last_num_matches`` for inspection.

Instrumentation: for the duration of one call, ``target._get_candidate_generator``
is shadowed by an *instance* attribute that calls the original and wraps two bound
methods of the per-call candidate generator it returns (``get_candidates`` and
``update_candidate_strategy``, again as instance attributes of that per-call
object). Nothing in transformers is patched at import or at class level; the
instance attribute is removed in a ``finally``. transformers 5.23 has no
supported argument to pass a candidate generator (a subclass would also switch
the ROC adaptation off, i.e. change behaviour).

TTFT (``ttft_ms``): from just before ``target.generate`` until the first time the
target's stopping criteria are evaluated, which transformers does right after
the first round's accepted tokens are appended to the sequence (a
``StoppingCriteria`` that marks the Timer on its first call and never stops).
Caveat: transformers has no separate prefill step, so its first new token(s)
exist only after the assistant's prefill, the first block of up to γ drafted
tokens and the target's verification of prompt + draft in one forward (up to
γ + 1 tokens arrive at once); our engine's TTFT is the target's prefill alone.
The TTFT therefore grows with γ here and the two engines' TTFTs are not the same
quantity. It also includes ``generate()``'s own set-up (config checks, cache
creation), as does ``wall_ms``.

Sampling (``temperature > 0``): transformers draws from torch's global RNG; the
runner seeds it from ``generator.initial_seed()`` inside ``torch.random.fork_rng``
(global RNG state untouched afterwards). Samples differ from our engine's for the
same seed (different RNG consumption); only their distribution is the same. The
warpers of a ``runners.engine.verify.Sampling`` are passed as ``top_k`` / ``top_p`` /
``typical_p`` (0 / 1.0 / 1.0 when off, so the checkpoint's own values never sneak in),
which transformers applies to the target and to the assistant alike.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import StoppingCriteria, StoppingCriteriaList
from transformers.generation.candidate_generator import AssistedCandidateGenerator
from transformers.utils import is_sklearn_available

from methods.base import FixedGamma, GammaPolicy
from methods.hf_heuristic import HFHeuristic
from methods.threshold import AssistantThreshold
from runners.engine.base import Generation
from runners.engine.verify import Sampling
from specbench.models import model_device
from specbench.registry import ConfigError
from specbench.rounds import Rounds
from specbench.timing import Timer


@dataclass(frozen=True)
class HFSettings:
    """What is set on ``assistant.generation_config`` (plus whether τ adapts by ROC)."""

    schedule: str  # "constant" | "heuristic" | "heuristic_transient"
    threshold: float = 0.0  # 0: no confidence stop
    adaptive_threshold: bool = False


def hf_settings(policy: GammaPolicy) -> HFSettings:
    """transformers' native settings for a policy (see the module docstring)."""
    if isinstance(policy, HFHeuristic):
        return HFSettings("heuristic_transient" if policy.transient else "heuristic", 0.0)
    if isinstance(policy, AssistantThreshold):
        stop = policy.confidence
        if stop.persist:
            raise ConfigError(
                "persist_threshold=true is transformers 4.47-4.57 behaviour; transformers 5.x (installed) resets "
                "the adapted threshold on every call. Set method.persist_threshold=false."
            )
        if stop.adaptive and stop.threshold_init > 0 and not is_sklearn_available():
            raise ConfigError(
                "adaptive_threshold=true needs scikit-learn (transformers only adapts the threshold when it is installed)"
            )
        return HFSettings("constant", stop.threshold_init, stop.adaptive and stop.threshold_init > 0)
    if type(policy) is FixedGamma:
        return HFSettings("constant", 0.0)
    raise ConfigError(
        f"policy {policy.name!r} is not a transformers schedule; runner=hf supports the policies "
        f"fixed (specdecode), hf_heuristic (transient or not) and assistant_threshold"
    )


class _FixedThresholdGenerator(AssistedCandidateGenerator):
    """transformers never ROC-adapts the threshold of a subclass (``type(self) is
    AssistedCandidateGenerator`` checks); used for ``adaptive_threshold: false``."""


class _FirstTokenMark(StoppingCriteria):
    """Marks ``timer`` "first" on its first call (the first round's tokens are in); never stops."""

    def __init__(self, timer: Timer) -> None:
        self.timer = timer
        self.marked = False

    def __call__(self, input_ids: torch.LongTensor, scores: Any, **kwargs: Any) -> torch.BoolTensor:
        if not self.marked:
            self.timer.mark("first")
            self.marked = True
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


@dataclass
class _Trace:
    gamma: list[int] = field(default_factory=list)
    drafted: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)
    num_matches: list[int] = field(default_factory=list)
    candidates: list[int] = field(default_factory=list)  # the current round's drafted tokens
    generator_class: str = ""


def _instrument(cg: Any, trace: _Trace, settings: HFSettings) -> None:
    """Wrap the per-call candidate generator's two hooks (instance attributes only)."""
    if type(cg) is not AssistedCandidateGenerator:
        raise ConfigError(
            f"runner=hf supports transformers' same-vocabulary AssistedCandidateGenerator only, "
            f"got {type(cg).__name__} (different tokenizers?)"
        )
    if settings.threshold > 0 and not settings.adaptive_threshold:
        cg.__class__ = _FixedThresholdGenerator  # transformers' own rule: subclasses never adapt
    trace.generator_class = type(cg).__name__
    get_candidates = cg.get_candidates
    update = cg.update_candidate_strategy

    def wrapped_get_candidates(input_ids: torch.LongTensor, **kwargs: Any) -> Any:
        trace.gamma.append(int(cg.num_assistant_tokens))
        candidate_ids, candidate_logits = get_candidates(input_ids, **kwargs)
        trace.candidates = candidate_ids[0, input_ids.shape[1] :].tolist()
        return candidate_ids, candidate_logits

    def wrapped_update(input_ids: torch.LongTensor, scores: torch.Tensor, num_matches: Any) -> Any:
        drafted = int(scores.shape[1]) - 1
        n = int(num_matches)
        accepted = n
        # transformers recounts n_matches after cropping at an EOS, so an accepted drafted EOS is
        # reported as the target's token; count it as accepted (see the module docstring)
        if n < drafted and n < len(trace.candidates) and int(input_ids[0, -1]) == trace.candidates[n]:
            accepted = n + 1
        trace.drafted.append(drafted)
        trace.accepted.append(accepted)
        trace.num_matches.append(n)
        return update(input_ids, scores, num_matches)

    cg.get_candidates = wrapped_get_candidates
    cg.update_candidate_strategy = wrapped_update


@contextmanager
def _instrumented(target: Any, trace: _Trace, settings: HFSettings) -> Iterator[None]:
    """Shadow ``target._get_candidate_generator`` for one call (an instance attribute, removed after)."""
    own = vars(target).get("_get_candidate_generator")
    original = target._get_candidate_generator

    def build(*args: Any, **kwargs: Any) -> Any:
        cg = original(*args, **kwargs)
        _instrument(cg, trace, settings)
        return cg

    target._get_candidate_generator = build
    try:
        yield
    finally:
        if own is not None:
            target._get_candidate_generator = own
        else:
            del target._get_candidate_generator


@contextmanager
def assistant_settings(assistant: Any, values: Mapping[str, Any]) -> Iterator[Any]:
    """Set ``values`` on ``assistant.generation_config`` for one call; restore every field after.

    Yields the generation config, so the caller can read what transformers wrote back
    (the heuristic's final γ) before it is restored.
    """
    gc = assistant.generation_config
    saved = copy.deepcopy(vars(gc))
    try:
        for key, value in values.items():
            setattr(gc, key, value)
        yield gc
    finally:
        vars(gc).clear()
        vars(gc).update(saved)


def pad_token_id(target: Any, eos: list[int]) -> int:
    """The pad id ``generate`` is given (batch size 1 pads nothing; it only silences a warning): the
    target's generation config's, else its first EOS id, else 0."""
    pad = getattr(getattr(target, "generation_config", None), "pad_token_id", None)
    if isinstance(pad, list | tuple):
        pad = pad[0] if pad else None
    return int(pad) if pad is not None else (eos[0] if eos else 0)


def generate_kwargs(sampling: Sampling, eos: list[int], pad: int, max_new_tokens: int) -> dict[str, Any]:
    """The ``generate()`` settings of every transformers peer (assisted and autoregressive): exactly
    ``max_new_tokens`` unless an EOS of ``eos`` ends it, no length or repetition processors of the
    checkpoint's own, and the job's sampling processors exactly (0 / 1.0 = off, so the checkpoint's
    values never sneak in), as our engine applies them."""
    kwargs: dict[str, Any] = {
        "max_new_tokens": int(max_new_tokens),
        "min_new_tokens": None,
        "do_sample": not sampling.greedy,
        "pad_token_id": pad,
        # an empty list turns the model's default EOS off (as our engine with no EOS ids)
        "eos_token_id": list(eos),
        "repetition_penalty": 1.0,
        "num_beams": 1,
    }
    if not sampling.greedy:
        kwargs.update(temperature=sampling.temperature, top_k=sampling.top_k or 0, top_p=sampling.top_p or 1.0, min_p=None,
                      typical_p=sampling.typical_p or 1.0)
    return kwargs


@contextmanager
def seeded_global_rng(sampling: Sampling, generator: Any, device: torch.device) -> Iterator[None]:
    """Sampling: seed torch's global RNG (which transformers draws from) from ``generator``, inside
    ``fork_rng`` so the caller's RNG state is left as it was. Greedy: nothing."""
    if sampling.greedy or generator is None:
        yield
        return
    cuda = device.type == "cuda"
    with torch.random.fork_rng(devices=[device.index or 0] if cuda else []):
        seed = int(generator.initial_seed())
        torch.manual_seed(seed)
        if cuda:
            torch.cuda.manual_seed(seed)
        yield


class HFAssistedRunner:
    """``target.generate(assistant_model=assistant)`` with per-round traces (see the module docstring)."""

    def __init__(
        self,
        target: Any,
        assistant: Any,
        policy: GammaPolicy,
        eos_token_ids: Iterable[int],
        sampling: Sampling | float = 0.0,
    ) -> None:
        self.settings = hf_settings(policy)
        vocab = [m.config.get_text_config().vocab_size for m in (target, assistant)]
        if vocab[0] != vocab[1]:
            raise ConfigError(
                f"runner=hf needs a draft with the target's vocabulary (vocab sizes {vocab[0]} and {vocab[1]}); "
                f"transformers' different-tokenizer paths are not supported as a peer"
            )
        self.target = target
        self.assistant = assistant
        self.gamma_init = policy.gamma_init
        self.carried_gamma = self.gamma_init  # "heuristic": transformers' written-back γ
        self.eos = sorted(set(int(e) for e in eos_token_ids))
        self.sampling = Sampling.of(sampling)
        self.device = model_device(target)
        self.pad_token_id = pad_token_id(target, self.eos)
        self.last_num_matches: list[int] = []
        self.last_generator_class = ""

    def reset(self) -> None:
        """Back to the initial γ (drops the γ the "heuristic" schedule carried from earlier prompts)."""
        self.carried_gamma = self.gamma_init

    def _assistant_values(self) -> dict[str, Any]:
        gamma = self.carried_gamma if self.settings.schedule == "heuristic" else self.gamma_init
        return {
            "num_assistant_tokens": int(gamma),
            "num_assistant_tokens_schedule": self.settings.schedule,
            "assistant_confidence_threshold": float(self.settings.threshold),
        }

    def _generate_kwargs(self, max_new_tokens: int) -> dict[str, Any]:
        return generate_kwargs(self.sampling, self.eos, self.pad_token_id, max_new_tokens)

    def _seeded(self, generator: Any) -> Any:
        return seeded_global_rng(self.sampling, generator, self.device)

    @torch.inference_mode()
    def generate(self, prompt_ids: list[int], max_new_tokens: int, generator: Any = None) -> Generation:
        if max_new_tokens < 1:
            raise ValueError("max_new_tokens must be >= 1")
        n_prompt = len(prompt_ids)
        inp = torch.tensor([prompt_ids], device=self.device)
        mask = torch.ones_like(inp)
        timer = Timer(self.device)
        trace = _Trace()
        kwargs = self._generate_kwargs(max_new_tokens)
        with assistant_settings(self.assistant, self._assistant_values()) as gc, self._seeded(generator):
            with _instrumented(self.target, trace, self.settings):
                timer.start()
                out = self.target.generate(
                    inp,
                    attention_mask=mask,
                    assistant_model=self.assistant,
                    stopping_criteria=StoppingCriteriaList([_FirstTokenMark(timer)]),
                    **kwargs,
                )
                timer.mark("end")
            if self.settings.schedule == "heuristic":
                self.carried_gamma = int(gc.num_assistant_tokens)  # written back by transformers
        t = timer.read()
        tokens = out[0, n_prompt:].tolist()
        self.last_num_matches = trace.num_matches
        self.last_generator_class = trace.generator_class
        return Generation(
            tokens=tokens,
            ttft_ms=t.get("first", t["end"]),
            wall_ms=t["end"],
            first_round_ms=t.get("first", t["end"]),
            stop_reason="eos" if tokens and tokens[-1] in self.eos else "max_new_tokens",
            rounds=Rounds(list(trace.gamma), list(trace.drafted), list(trace.accepted)),
            speculative=True,
        )
