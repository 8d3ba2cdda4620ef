"""SpecDecode-Bench's profiled acceptance as the lab's traces.

    python -m runners.replay import specdecode-bench PATH [--proposer eagle|ngram] --out DIR
        [--draft-length K] [--no-match-p P] [--seed 42] [--commit SHA] [--sample 300]

SpecDecode-Bench (Liu et al., arXiv 2601.11580; repository ``SpecDecode-Bench/simulator``, read at commit 2fdccbd)
publishes, per request of ``data/llama3.1-8B/combined_<workload>.jsonl``, ``prompt_token_ids``,
``generated_token_ids`` and per generated position the tokens a step starting there produces
(``acc_eagle.acc_len`` / ``acc_ngram.acc_len``, the target's bonus token included). Their simulator
(``simulator.py: SpecSimulator.get_step_gen_len``) reads ``acc_len[t − 1]`` at ``t`` tokens generated, takes
``len(acc_len)`` as the generation's length (``request.py: Request.generated_len``) and drops a request with
none (``load_data``); a step of ``k`` drafted tokens produces ``min(acc_len, k + 1)``.

What a trace holds (``AcceptanceTrace``, the lab's ``runners.replay.trace_lookup.LookupTrace`` with another
``kind``; ``read_traces`` reads it as one): ``N = len(acc_len)`` tokens, no EOS (their generation ends at its
length), and at every ``t = 1 .. N − 1`` a proposal of ``L_t = min(K, N − 1 − t)`` tokens whose first
``a_t = acc_len[t − 1] − 1`` agree with the output and the rest are ``REJECTED``. The output's token ids are
the file's ``generated_token_ids`` when it holds exactly ``N``; else (EAGLE rows of another run than the ids)
``PLACEHOLDER`` ids. A replay drafting ``d`` tokens at ``t`` accepts ``min(d, a_t)``, their rule exactly.

The cap (``K``, the trace's ``gamma_max``, ``draft_cap``): ``acc_len`` is censored at the profiled engine's draft
length (``k + 1``), which the file does not state; the largest value in the file, less one, is a length every
value is exact for (a censored value is the largest possible). ``--draft-length K`` states it instead.
**Rule ``cap``** (``CAP_RULE``): a policy asking ``γ > K`` drafts ``K`` tokens, as an engine configured with
``K`` speculative tokens would, and the rounds so cut are counted (``capped_rounds``); nothing is refused.

n-gram "no match" (``--proposer ngram``): their simulator, for a non-oracle policy, treats a step at
``acc_len = 1`` as a lookup that found nothing with probability ``1 − p`` (``simulator.py:
SpecSimulator._not_matched_ngram``, ``NGRAM_MATCHING_PROBABILITY``: ``NGRAM_MATCH_P`` here), drawn anew at every
step it simulates: one token verified, no draft time. The importer draws it once per such position (``random.
Random(seed)``, ``no_match_positions``) and stores an empty proposal there, so every policy replays the same
draws (a round there proposes nothing: a plain step, no draft billed); ``--no-match-p 0`` keeps every match.

What the data cannot drive: a policy whose ``needs`` name a draft feature (confidence, entropy, margin) —
the file holds acceptance lengths only — is listed by ``not_replayable`` (in ``meta.json`` and on the command
line), never replayed silently without it; ``COSTS`` is served by the latency model.

``--sample N`` keeps ``N`` requests as their simulator draws them (``simulator.py:
SpecSimulator.simulate_like_experiment``: ``random.seed(42); random.sample(data, k=300)`` over the requests
with an ``acc_len``; ``sample_requests``), in the drawn order, after the no-match draws over the whole file.

Out of ``--out DIR``: ``trace.jsonl``, ``meta.json`` (provenance: repository, commit, file and its sha256, what
was cut), and ``latency/<pair>.json`` (their cost model: ``runners.replay.specdecode_bench.latency_model``).
The repository has no licence file: nothing of it is shipped; this reads a path the user gives.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from methods.base import FEATURES, policy_needs
from runners.replay.replay import ReplayResult
from runners.replay.specdecode_bench import SOURCE, latency_model
from runners.replay.trace import META_FILE, TRACE_FILE, write_traces
from runners.replay.trace_base import TRACE_VERSION
from runners.replay.trace_lookup import LookupTrace
from specbench.rounds import advance

REPOSITORY = "SpecDecode-Bench/simulator"
#: the proposer's acceptance field in their schema (``request.py: Request.from_json``)
FIELDS = {"eagle": "acc_eagle", "ngram": "acc_ngram"}
#: what the trace names as the draft
DRAFTS = {"eagle": "EAGLE-3 (vLLM, their profile)", "ngram": "n-gram lookup (vLLM, their profile)"}
TARGET = "meta-llama/Llama-3.1-8B-Instruct"
#: their ``NGRAM_MATCHING_PROBABILITY`` (``simulator.py``): a lookup at ``acc_len = 1`` found a match
NGRAM_MATCH_P = {"cnn": 0.4, "gsm8k": 0.2, "instructcoder": 0.8, "sharegpt": 0.2}
SEED = 42
#: a drafted token the target rejected (the file holds no draft tokens)
REJECTED = -1
#: an output token the file does not hold (its ``generated_token_ids`` are of another run)
PLACEHOLDER = -2
CAP_RULE = "cap"


@dataclass(frozen=True)
class Request:
    """One line of their file, as the lab needs it: ``id``, the prompt's length, ``acc_len``, the output ids."""

    id: str
    prompt_tokens: int
    acc_len: tuple[int, ...]
    generated: tuple[int, ...]


class AcceptanceTrace(LookupTrace):
    """A trace imported from acceptance lengths (module docstring): the lab replays it as a ``LookupTrace``
    (stored proposals, no features, ``stop_drafting`` never asked)."""

    kind = "acceptance"


def _fail(path: str | os.PathLike, line: int, what: str) -> ValueError:
    return ValueError(f"{path}:{line}: {what} (expected SpecDecode-Bench's schema: id, prompt_token_ids, "
                      "generated_token_ids, acc_eagle.acc_len / acc_ngram.acc_len)")


def parse_request(obj: Any, proposer: str, path: str | os.PathLike = "?", line: int = 0) -> Request:
    """One line of their schema (``request.py: Request.from_json``), checked; ``ValueError`` in one line."""
    if proposer not in FIELDS:
        raise ValueError(f"proposer {proposer!r} is not one of {', '.join(FIELDS)}")
    if not isinstance(obj, dict):
        raise _fail(path, line, "not a JSON object")
    missing = [k for k in ("id", "prompt_token_ids", "generated_token_ids", FIELDS[proposer]) if k not in obj]
    if missing:
        raise _fail(path, line, f"no {', '.join(missing)}")
    acc = obj[FIELDS[proposer]].get("acc_len") if isinstance(obj[FIELDS[proposer]], dict) else None
    ids = (obj["prompt_token_ids"], obj["generated_token_ids"])
    if not isinstance(acc, list) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in acc):
        raise _fail(path, line, f"{FIELDS[proposer]}.acc_len is not a list of integers >= 1")
    if not all(isinstance(x, list) and all(isinstance(i, int) for i in x) for x in ids):
        raise _fail(path, line, "prompt_token_ids / generated_token_ids are not lists of token ids")
    return Request(str(obj["id"]), len(ids[0]), tuple(acc), tuple(ids[1]))


def json_lines(path: str | os.PathLike, fail: Callable[[str | os.PathLike, int, str], ValueError]
               ) -> Iterator[tuple[int, Any]]:
    """``(line number, object)`` of every non-blank line of a JSON-lines file; a line that is not JSON raises
    ``fail(path, line, "not JSON")`` (each importer's one-line error naming its schema)."""
    with open(path, encoding="utf-8") as fh:
        for i, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                yield i, json.loads(line)
            except json.JSONDecodeError:
                raise fail(path, i, "not JSON") from None


def read_requests(path: str | os.PathLike, proposer: str) -> list[Request]:
    """Every line of their file, in order (blank lines skipped)."""
    out = [parse_request(obj, proposer, path, i) for i, obj in json_lines(path, _fail)]
    if not out:
        raise ValueError(f"{path}: no request (expected SpecDecode-Bench's combined_<workload>.jsonl)")
    return out


def draft_cap(requests: Iterable[Request], draft_length: int | None = None) -> int:
    """``K``: the longest draft every trace answers exactly (module docstring): ``draft_length`` when given,
    else the file's largest ``acc_len`` less one (at least 1)."""
    if draft_length is not None:
        if draft_length < 1:
            raise ValueError(f"--draft-length must be >= 1, got {draft_length}")
        return int(draft_length)
    return max(1, max((max(r.acc_len) for r in requests if r.acc_len), default=1) - 1)


def workload_of(path: str | os.PathLike) -> str:
    """``cnn`` of ``.../combined_cnn.jsonl`` (their ``main.py`` names the files so); else the file's stem."""
    stem = Path(path).stem
    return stem.removeprefix("combined_")


def no_match_positions(acc_len: Sequence[int], p_match: float, rng: random.Random) -> set[int]:
    """Positions ``t`` (1-based, ``1 .. N − 1``) at ``acc_len[t − 1] = 1`` drawn as "no match" with
    probability ``1 − p_match``, in order (``simulator.py: SpecSimulator._not_matched_ngram``'s draw)."""
    return {t for t in range(1, len(acc_len)) if acc_len[t - 1] == 1 and not rng.random() < p_match}


def to_trace(req: Request, cap: int, no_match: set[int] | frozenset[int] = frozenset(), **names: Any) -> AcceptanceTrace:
    """The trace of one request (module docstring): ``N = len(acc_len)`` tokens, a proposal of
    ``min(cap, N − 1 − t)`` tokens at each ``t``, of which the first ``acc_len[t − 1] − 1`` agree; empty at
    ``no_match``."""
    n = len(req.acc_len)
    if n < 1:
        raise ValueError(f"request {req.id}: no acc_len (their simulator drops it)")
    tokens = list(req.generated) if len(req.generated) == n else [PLACEHOLDER] * n
    proposals = []
    for t in range(1, n):
        if t in no_match:
            proposals.append([])
            continue
        length = min(cap, n - 1 - t)
        agree = min(req.acc_len[t - 1] - 1, length)
        proposals.append(tokens[t:t + agree] + [REJECTED] * (length - agree))
    return AcceptanceTrace(prompt_id=req.id, turn=1, prompt_tokens=req.prompt_tokens, max_new_tokens=n,
                           gamma_max=cap, eos=(), tokens=tokens, proposals=proposals, stop_reason="length",
                           extra={"tokens": "generated_token_ids" if len(req.generated) == n else "placeholder",
                                  "no_match": len(no_match)}, **names)


def not_replayable(labels: Iterable[str]) -> dict[str, str]:
    """Of the lab's method labels (``runners.replay.lab.method_spec``), those whose policy ``needs`` a draft
    feature the data lacks, with why (module docstring)."""
    from runners.replay.lab import method_spec

    out = {}
    for label in labels:
        missing = sorted(policy_needs(method_spec(label, None).build(1)) & FEATURES)
        if missing:
            out[label] = f"needs the draft's {', '.join(missing)}: the data holds acceptance lengths only"
    return out


def lab_methods() -> list[str]:
    """The lab's replayed methods (``conf/experiment/policy_lab.yaml``: ``replay.methods``)."""
    from runners.replay.lab import LAB_METHODS

    return list(LAB_METHODS)


def capped_rounds(res: ReplayResult, cap: int) -> int:
    """Rounds of a replay whose budget ``min(γ, N − t − 1)`` exceeded ``cap`` (rule ``cap``: drafted ``cap``)."""
    t, n, out = 1, res.new_tokens, 0
    for gamma, accepted in zip(res.rounds.gamma, res.rounds.accepted):
        out += min(gamma, n - t - 1) > cap
        t = advance(t, accepted, n)
    return out


def sample_requests(traces: Sequence[AcceptanceTrace], k: int, seed: int = SEED) -> list[AcceptanceTrace]:
    """``k`` of ``traces`` as ``random.seed(seed); random.sample(traces, k)`` draws them (their
    ``simulate_like_experiment``), in the drawn order (all of them, shuffled, when ``k`` is not below their
    number)."""
    if k < 1:
        raise ValueError(f"--sample must be >= 1, got {k}")
    return [traces[i] for i in random.Random(seed).sample(range(len(traces)), min(k, len(traces)))]


def file_sha256(path: str | os.PathLike) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def import_traces(path: str | os.PathLike, proposer: str, draft_length: int | None = None,
                  no_match_p: float | None = None, seed: int = SEED,
                  commit: str | None = None,
                  sample: int | None = None) -> tuple[list[AcceptanceTrace], dict[str, Any]]:
    """The traces of their file, in file order, and what ``meta.json`` says of them (provenance, the cap and
    its rule, the draws, what was cut). ``no_match_p``: the probability of "no match" at ``acc_len = 1``
    (n-gram only; default ``1 −`` their workload's ``NGRAM_MATCH_P``); ``commit``: the repository's commit the
    file was read at, as the user states it (the file's sha256 is recorded in any case); ``sample``: keep that
    many requests (``sample_requests``, seeded by ``seed``)."""
    requests = read_requests(path, proposer)
    workload = workload_of(path)
    cap = draft_cap(requests, draft_length)
    if proposer == "ngram" and no_match_p is None:
        if workload not in NGRAM_MATCH_P:
            raise ValueError(f"{path}: workload {workload!r} has no n-gram match probability of theirs "
                             f"({', '.join(NGRAM_MATCH_P)}); give --no-match-p")
        no_match_p = 1.0 - NGRAM_MATCH_P[workload]
    no_match_p = 0.0 if proposer != "ngram" else float(no_match_p)
    if not 0.0 <= no_match_p <= 1.0:
        raise ValueError(f"--no-match-p must be in [0, 1], got {no_match_p}")
    rng = random.Random(seed)
    pair = f"specdecode-bench_llama3.1-8b_{proposer}"
    names = {"pair": pair, "task": workload, "category": workload, "target": TARGET, "draft": DRAFTS[proposer]}
    kept = [r for r in requests if r.acc_len]
    traces = [to_trace(r, cap, no_match_positions(r.acc_len, 1.0 - no_match_p, rng) if no_match_p else set(), **names)
              for r in kept]
    over = sum(max(0, v - 1 - cap) > 0 for r in kept for v in r.acc_len[:-1])
    drawn = len(traces)
    if sample is not None:
        traces = sample_requests(traces, sample, seed)
    meta = {
        "trace_version": TRACE_VERSION, "kind": AcceptanceTrace.kind, "pair": pair, "task": workload,
        "proposer": proposer, "gamma_max": cap, "cap_rule": CAP_RULE,
        "cap": (f"exact for gamma <= {cap}: " + ("--draft-length" if draft_length else "the file's largest acc_len - 1")
                + f"; a policy asking more drafts {cap} (rule {CAP_RULE}: counted by capped_rounds, not refused)"),
        "source": {"repository": REPOSITORY, "commit": commit, "file": str(path), "sha256": file_sha256(path),
                   "paper": "arXiv 2601.11580", "costs": SOURCE},
        "no_match": {"p": no_match_p, "seed": seed, "positions": sum(tr.extra["no_match"] for tr in traces)},
        "cut": {
            "requests_without_acc_len": len(requests) - len(kept),
            "last_position": "acc_len[N-1] of every request (no step starts at N)",
            "values_above_cap": over,
            "tokens_placeholder": sum(tr.extra["tokens"] == "placeholder" for tr in traces),
            "prompt_token_ids": "lengths only",
        },
        "requests": len(traces), "tokens": sum(tr.n for tr in traces),
        **({"sample": {"k": sample, "seed": seed, "of": drawn,
                       "rule": "random.seed(seed); random.sample(requests, k) (their simulate_like_experiment)"}}
           if sample is not None else {}),
    }
    return traces, meta


def write_import(out: str | os.PathLike, traces: Sequence[AcceptanceTrace], meta: Mapping[str, Any],
                 proposer: str) -> Path:
    """``trace.jsonl``, ``meta.json`` and ``latency/<pair>.json`` (their cost model) into ``out``."""
    from specbench.record_io import write_json_atomic

    folder = Path(out)
    write_traces(folder / TRACE_FILE, traces)
    write_json_atomic(folder / META_FILE, {**meta, "status": "complete"})
    latency_model(proposer).save(folder / "latency" / f"{meta['pair']}.json")
    return folder / TRACE_FILE


def add_parser(sub: Any) -> Any:
    """``import specdecode-bench PATH ...`` under the simulator's command line (``runners.replay.commands``); returns the
    ``import`` command's sources, for the other importers (``runners.replay.import_vllm``)."""
    i = sub.add_parser("import", help="import a peer's acceptance data as traces")
    sources = i.add_subparsers(dest="source", required=True)
    s = sources.add_parser("specdecode-bench", help="SpecDecode-Bench's combined_<workload>.jsonl")
    s.add_argument("path", help="their data/llama3.1-8B/combined_<workload>.jsonl (a path you give; not shipped)")
    s.add_argument("--proposer", choices=tuple(FIELDS), default="eagle", help="acc_eagle or acc_ngram (default eagle)")
    s.add_argument("--out", required=True, help="folder for trace.jsonl, meta.json, latency/<pair>.json")
    s.add_argument("--draft-length", type=int, help="the profiled engine's draft length K (default: the file's "
                                                     "largest acc_len - 1, exact whatever K was)")
    s.add_argument("--no-match-p", type=float, help="n-gram: probability of no match at acc_len 1 (default: 1 - "
                                                   "theirs per workload)")
    s.add_argument("--seed", type=int, default=SEED, help="seed of the no-match draws (default %(default)s)")
    s.add_argument("--commit", help="the repository's commit the file comes from (recorded in meta.json)")
    s.add_argument("--sample", type=int,
                   help="keep N requests drawn as their simulator draws them (seeded by --seed)")
    return sources


def main(args: Any) -> int:
    """The ``import specdecode-bench`` command: write the traces, say what the data cannot drive."""
    import sys

    try:
        traces, meta = import_traces(args.path, args.proposer, args.draft_length, args.no_match_p, args.seed,
                                     args.commit, args.sample)
        meta = {**meta, "not_replayable": not_replayable(lab_methods())}
        path = write_import(args.out, traces, meta, args.proposer)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{meta['requests']} requests, {meta['tokens']} tokens, exact for gamma <= {meta['gamma_max']} "
          f"(rule {CAP_RULE}); n-gram no-match positions: {meta['no_match']['positions']}", file=sys.stderr)
    for label, why in meta["not_replayable"].items():
        print(f"not replayable: {label}: {why}", file=sys.stderr)
    print(path)
    return 0
