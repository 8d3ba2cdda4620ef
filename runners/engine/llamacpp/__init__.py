"""llama.cpp's server as a backend (``backend=llamacpp``): the same jobs, records and tables as our engine.

``LlamaCppEngine(config, tokenizer)`` is one job's engine value: it builds (once per release and CPU) or finds the
binaries (``binary``), makes the pair's GGUF files (``files``), checks that the server tokenizes as our tokenizer
does, and starts two servers on loopback (``server``): the target alone, and the method's (the same binary and
flags plus the draft). Each is a batch-1 loop of the runner contract (``ServerLoop.generate``: prompt ids in, a
``Generation`` out, its rounds read from the stream, ``stream``). ``close`` stops both.

What the server cannot express is refused by the job's config before anything starts
(``specbench.config.JobConfig.check_server_backend``).
"""

from __future__ import annotations

import json
import time
from typing import Any

from runners.engine.base import Generation
from runners.engine.llamacpp import binary as binaries
from runners.engine.llamacpp.files import pair_files
from runners.engine.llamacpp.server import Server, ServerDied
from runners.engine.llamacpp.stream import ACCEPTED_TOTAL, DRAFT_TOTAL, metric_values, parse_sse, rounds_of
from runners.engine.verify import Sampling
from specbench.config import JobConfig
from specbench.rounds import Rounds

#: the pair's draft kind → llama.cpp's ``--spec-type`` (``JobConfig.check_server_backend`` refuses any other)
SPEC_TYPES = {"model": "draft-simple", "prompt_lookup": "ngram-simple", "hybrid": "ngram-simple,draft-simple"}
#: the texts the server's ``/tokenize`` must cut as our tokenizer does before anything is timed
TOKENIZER_PROBES = ("Hello world, this is a test.", "def fib(n):\n    return n if n < 2 else fib(n - 1)",
                    "Ünïcödé — 東京 ✓ 12345")


class ServerLoop:
    """A batch-1 loop on one server (module docstring): greedy, no prompt cache, speculation as started."""

    def __init__(self, server: Server, gamma: int | None, check_draft: bool, ignore_eos: bool,
                 check_counters: bool = True) -> None:
        self.server, self.gamma, self.ignore_eos = server, gamma, ignore_eos
        self.check_counters = check_counters  # /metrics deltas against the stream: one request at a time only
        self.speculative = gamma is not None
        self.sampling = Sampling(0.0)  # greedy: the only regime the backend runs
        self.last_missing = 0
        self._check_draft = check_draft  # the first request must draft (draft_n > 0): speculation is on

    def payload(self, prompt_ids: list[int], max_new_tokens: int) -> dict[str, Any]:
        return {"prompt": list(map(int, prompt_ids)), "n_predict": int(max_new_tokens), "stream": True,
                "timings_per_token": True, "return_tokens": True, "cache_prompt": False, "temperature": 0.0,
                "top_k": 1, "ignore_eos": self.ignore_eos}

    def generate(self, prompt_ids: list[int], max_new_tokens: int, generator: Any = None) -> Generation:
        self.server.check_alive()
        before = self._counters() if self.check_counters and self.speculative else None
        stream = self._request(self.payload(prompt_ids, max_new_tokens))
        after = self._counters() if before is not None else None  # before any repeat below drafts again
        tokens = stream.tokens
        if stream.missing:  # a token inside a UTF-8 character sent no chunk: the ids from an unstreamed repeat
            again = self.server.post("/completion", {**self.payload(prompt_ids, max_new_tokens), "stream": False})
            tokens = [int(t) for t in again["tokens"]]
        gen = Generation(tokens=tokens, ttft_ms=stream.ttft_ms, wall_ms=stream.wall_ms,
                         stop_reason=stream.stop_reason(), speculative=self.speculative)
        if self.speculative:
            drafted, accepted, ends = rounds_of(stream)
            gen.rounds = Rounds(gamma=[int(self.gamma)] * len(drafted), drafted=drafted, accepted=accepted)
            gen.first_round_ms = ends[0] if ends else stream.wall_ms
            if before is not None and after is not None:
                counted = (after[0] - before[0], after[1] - before[1])
                if counted != (sum(drafted), sum(accepted)):
                    raise RuntimeError(f"llama-server's /metrics counted {counted} drafted/accepted tokens for one "
                                       f"request, its stream {(sum(drafted), sum(accepted))}")
            if self._check_draft:
                self._check_draft = False
                if not sum(drafted):
                    raise RuntimeError("llama-server drafted nothing on its first request: speculation is not on "
                                       f"(its command: {' '.join(self.server.command)})")
        timings = stream.final.get("timings") or {}
        gen.phase_ms = {k: float(timings[k]) for k in ("prompt_ms", "predicted_ms") if k in timings}
        self.last_missing = stream.missing
        return gen

    def _request(self, payload: dict[str, Any]):
        conn = self.server.connection()
        try:
            t0 = time.perf_counter()
            conn.request("POST", "/completion", body=json.dumps(payload), headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            if resp.status != 200:
                raise RuntimeError(f"llama-server answered /completion with {resp.status}: {resp.read()[:500]!r}")
            lines = [((time.perf_counter() - t0) * 1e3, raw) for raw in resp]
        except OSError as exc:
            self.server.check_alive(grace=2.0)
            raise ServerDied(f"llama-server did not answer /completion: {exc}") from exc
        finally:
            conn.close()
        stream = parse_sse(lines)
        if not any(chunk.get("stop") for _, chunk in stream.chunks):  # a chunked body cut short reads as an end
            self.server.check_alive(grace=2.0)
            raise ServerDied(f"llama-server's stream ended without its final chunk; its log ends:\n{self.server.tail()}")
        return stream

    def _counters(self) -> tuple[float, float] | None:
        status, text = self.server.get("/metrics")
        if status != 200 or not isinstance(text, str):
            return None
        values = metric_values(text)
        return values.get(DRAFT_TOTAL, 0.0), values.get(ACCEPTED_TOTAL, 0.0)

    def describe(self) -> dict[str, Any]:
        return {"backend": "llamacpp", "command": self.server.command}


class LlamaCppEngine:
    """One job's llama.cpp (module docstring): ``target_alone`` and ``method`` loops (``method`` is None for ``ar``)."""

    def __init__(self, config: JobConfig, tokenizer: Any, progress: bool = True) -> None:
        backend = config.backend
        self.config = config
        self.threads = backend.threads or config.threads or 2
        self.build = binaries.ensure(backend.version, backend.build_jobs, progress)
        pair = config.pair
        draft_model = pair.draft.model if config.speculative and pair.draft is not None else None
        self.target_file, self.draft_file = pair_files(self.build, pair.target, draft_model, backend.target_type,
                                                       backend.draft_type, self.threads)
        self.servers: list[Server] = []
        try:
            base = ["-m", self.target_file.path, "-t", str(self.threads), "-tb", str(self.threads), "-np", "1",
                    "-c", str(backend.ctx_size), "--no-cache-prompt", "--metrics", "--no-webui",
                    "--no-cache-idle-slots"]
            alone = self._start(base)
            self._probe(alone, self.target_file.type)
            check_tokenizer(alone, tokenizer)
            self.target_alone = ServerLoop(alone, None, False, backend.ignore_eos)
            self.method: ServerLoop | None = None
            if config.speculative:
                argv = [*base, *spec_args(config, self.draft_file.path if self.draft_file else None, self.threads)]
                kind = pair.draft.kind if pair.draft is not None else "model"
                self.method = ServerLoop(self._start(argv), config.gamma, "draft" in SPEC_TYPES[kind],
                                         backend.ignore_eos)
                self._check_slots(self.method.server)
                if self.draft_file is not None:
                    self._probe(self.method.server, self.draft_file.type)
        except BaseException:
            self.close()
            raise

    def _start(self, argv: list[str]) -> Server:
        server = Server(self.build.server, argv, self.config.backend.startup_s)
        self.servers.append(server)
        return server.start()

    def _probe(self, server: Server, gguf_type: str) -> None:
        """The build's first forward on weights of ``gguf_type`` (the AMX case dies on the first quantized one): a
        crash marks the build for a portable rebuild and fails the job with the server's log."""
        if binaries.probed(self.build, gguf_type):
            return
        try:
            server.post("/completion", {"prompt": [1, 2, 3], "n_predict": 2, "cache_prompt": False})
        except Exception as exc:
            dead = server.proc is not None and server.proc.poll() in binaries.SIGILL_CODES
            if dead:
                binaries.mark_probe(self.build, gguf_type, False, server.tail())
            why = "an illegal instruction: the next job rebuilds it portable" if dead else str(exc)
            raise RuntimeError(f"llama.cpp's build failed its probe on {gguf_type} weights ({why}); its log "
                               f"ends:\n{server.tail()}") from exc
        binaries.mark_probe(self.build, gguf_type, True)

    def _check_slots(self, server: Server) -> None:
        status, slots = server.get("/slots")
        if status == 200 and isinstance(slots, list) and slots and not slots[0].get("speculative"):
            raise RuntimeError(f"llama-server's /slots says speculation is off (its command: {' '.join(server.command)})")

    def describe(self) -> dict[str, Any]:
        """What every record and the summary say of the backend: the build, the files, the servers' commands."""
        out: dict[str, Any] = {"name": "llamacpp", "build": self.build.describe(),
                               "target_file": self.target_file.describe(), "threads": self.threads,
                               "target_alone_command": self.target_alone.server.command}
        if self.draft_file is not None:
            out["draft_file"] = self.draft_file.describe()
        if self.method is not None:
            out["command"] = self.method.server.command
        return out

    def close(self) -> None:
        for server in self.servers:
            server.stop()


def spec_args(config: JobConfig, draft_path: str | None, threads: int) -> list[str]:
    """The speculation flags of a job: ``--spec-type`` from the pair's draft kind, γ as the draft's and the n-gram's
    length, ``n-min 0``, ``p-min`` 0 (``specdecode``) or the method's (``p_min``)."""
    pair, method = config.pair, config.method
    kind = pair.draft.kind if pair.draft is not None else "model"
    options = dict(pair.draft.options) if pair.draft is not None else {}
    args = ["--spec-type", SPEC_TYPES[kind]]
    if "draft" in SPEC_TYPES[kind]:
        n_max = int(options.get("max_model_tokens") or config.gamma) if kind == "hybrid" else config.gamma
        p_min = float(method.params.get("p_min", 0.0)) if method.policy == "p_min" else 0.0
        n_min = int(method.params.get("n_min", 0)) if method.policy == "p_min" else 0
        args += ["-md", str(draft_path), "-td", str(threads), "-tbd", str(threads), "--spec-draft-n-max", str(n_max),
                 "--spec-draft-n-min", str(n_min), "--spec-draft-p-min", str(p_min)]
    if "ngram" in SPEC_TYPES[kind]:
        args += ["--spec-ngram-simple-size-n", str(int(options.get("max_ngram_size") or 3)),
                 "--spec-ngram-simple-size-m", str(config.gamma)]
    return args


def check_tokenizer(server: Server, tokenizer: Any) -> None:
    """The server's ``/tokenize`` against our tokenizer's ids (no special tokens) on ``TOKENIZER_PROBES``."""
    for text in TOKENIZER_PROBES:
        theirs = server.post("/tokenize", {"content": text, "add_special": False})["tokens"]
        ours = tokenizer(text, add_special_tokens=False)["input_ids"]
        if list(map(int, theirs)) != list(map(int, ours)):
            raise RuntimeError(f"llama-server's tokenizer differs from ours on {text!r}: {theirs} vs {ours}")
