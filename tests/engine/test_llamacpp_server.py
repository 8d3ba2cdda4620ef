"""llama-server's life and one loop on it (``runners.engine.llamacpp``: ``server``, ``ServerLoop``), against the fake
server of ``helpers.fake_llama_server`` (a process of its own that replays the recorded streams): the port it
reports, the ``/health`` deadline, crashes, stops and signals that leave no process behind (checked by pid), the
probe that marks a build failed, and a loop's tokens, rounds, times and its checks of speculation."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import runners.engine.llamacpp as llamacpp
from runners.engine.llamacpp import LlamaCppEngine, ServerLoop, check_tokenizer, spec_args
from runners.engine.llamacpp import binary as binaries
from runners.engine.llamacpp import server as server_module
from runners.engine.llamacpp.files import ModelFile
from runners.engine.llamacpp.server import LISTENING, Server, ServerDied
from runners.engine.llamacpp.stream import parse_sse, rounds_of
from specbench.config import JobConfig

from helpers import compose
from helpers.fake_llama_server import ended, fake_build, gone, wrapper

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "llamacpp"
ALONE = ["-m", "/models/target-F32.gguf", "-t", "2", "-np", "1", "--metrics", "--no-cache-prompt"]
DRAFT = [*ALONE, "--spec-type", "draft-simple", "-md", "/models/target-F32-Q8_0.gguf", "--spec-draft-n-max", "5"]


def fixture(name: str) -> tuple[list[int], list[int], tuple]:
    """``(prompt ids, tokens, rounds)`` of a recorded request."""
    stream = parse_sse((0.0, line) for line in (FIXTURES / f"{name}.sse").read_bytes().splitlines())
    return json.loads((FIXTURES / f"{name}.prompt.json").read_text()), stream.tokens, rounds_of(stream)[:2]


@pytest.fixture
def make(tmp_path):
    """``make(fault, argv, startup_s)``: a ``Server`` on the fake (not started); every one is stopped afterwards."""
    made: list[Server] = []

    def make(fault: str | None = None, argv: list[str] = ALONE, startup_s: float = 20.0) -> Server:
        made.append(Server(wrapper(tmp_path / (fault or "plain"), fault), argv, startup_s))
        return made[-1]

    yield make
    for server in made:
        server.stop()
        if server.log_path is not None:
            server.log_path.unlink(missing_ok=True)


def wait_for(condition, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


# ----------------------------------------------------------------------------- the process


def test_the_port_is_the_one_the_server_reported_on_loopback(make):
    server = make().start()
    assert server.command[-4:] == ["--host", "127.0.0.1", "--port", "0"]
    log = server.log()
    assert int(LISTENING.search(log).group(1)) == server.port
    assert f"fake llama-server pid {server.pid} " in log  # the pid held is the server's own
    assert server.get("/health") == (200, {"status": "ok"})
    assert server in server_module.live()


def test_a_server_that_exits_before_its_port_fails_with_its_log(make):
    server = make("exit_early")
    with pytest.raises(ServerDied, match=r"exited with 1 before it came up(.|\n)*error loading model"):
        server.start()
    assert ended(server.pid) and server not in server_module.live()


def test_a_server_never_healthy_fails_at_the_deadline_and_is_stopped(make):
    server = make("never_healthy", startup_s=1.0)
    t0 = time.monotonic()
    with pytest.raises(ServerDied, match=r"longer than 1 s to answer /health"):
        server.start()
    assert 1.0 <= time.monotonic() - t0 < 10.0
    assert server.port is not None  # it had reported its port: only /health kept it out
    assert ended(server.pid)


def test_stop_ends_the_server_by_its_pid(make):
    server = make().start()
    pid, log = server.pid, server.log_path
    assert not ended(pid)
    server.stop()
    assert ended(pid) and not Path(f"/proc/{pid}").exists()
    assert not log.exists()  # a clean stop removes the log
    server.stop()  # idempotent
    assert server not in server_module.live()


def test_a_crash_mid_stream_fails_the_request_and_the_server_shows_its_log(make):
    server = make("crash_stream", DRAFT).start()
    prompt, _, _ = fixture("draft_0")
    with pytest.raises((ServerDied, ValueError)):  # cut short: no partial generation comes back
        ServerLoop(server, 5, True, False).generate(prompt, 64)
    assert wait_for(lambda: not server.alive(), 5)
    with pytest.raises(ServerDied, match=r"exited with 134(.|\n)*GGML_ASSERT failed mid-stream"):
        server.check_alive()


def test_a_crash_mid_stream_fails_the_request_with_the_log_s_last_lines(make):
    server = make("crash_stream", DRAFT).start()
    prompt, _, _ = fixture("draft_0")
    with pytest.raises(ServerDied, match=r"GGML_ASSERT failed mid-stream"):
        ServerLoop(server, 5, True, False).generate(prompt, 64)


CHILD = """
import importlib.util, sys, time
spec = importlib.util.spec_from_file_location("llamacpp_server", sys.argv[1])
server = importlib.util.module_from_spec(spec)
sys.modules["llamacpp_server"] = server
spec.loader.exec_module(server)
s = server.Server(sys.argv[2], ["-m", "model.gguf"], 20.0).start()
print(s.pid, s.log_path, flush=True)
time.sleep(120)
"""


@pytest.fixture
def child(tmp_path):
    """A Python process that started a fake server (``server.py`` loaded alone: no torch); ``(process, server pid,
    its log)``. Both are killed afterwards if a test left them."""
    started: list[tuple[subprocess.Popen, int, Path]] = []

    def child() -> tuple[subprocess.Popen, int, Path]:
        proc = subprocess.Popen([sys.executable, "-c", CHILD, server_module.__file__, str(wrapper(tmp_path / "bin"))],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = proc.stdout.readline().split()
        assert line, proc.communicate(timeout=30)
        started.append((proc, int(line[0]), Path(line[1])))
        return started[-1]

    yield child
    for proc, pid, log in started:
        proc.kill()
        proc.communicate(timeout=10)
        if not gone(pid):
            os.kill(pid, signal.SIGKILL)
        log.unlink(missing_ok=True)


def test_sigterm_to_the_process_that_started_a_server_leaves_none(child):
    proc, pid, log = child()
    assert not gone(pid)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode != -signal.SIGTERM and "KeyboardInterrupt" in err  # SIGTERM became an interruption
    assert ended(pid)  # stopped and reaped by the process itself
    assert not log.exists()  # by its stop(), not by the kernel


def test_sigkill_of_the_process_that_started_a_server_leaves_none(child):
    proc, pid, _ = child()
    assert not gone(pid)
    proc.kill()  # no atexit, no handler: only the kernel's parent-death signal can end the server
    proc.wait(10)
    assert wait_for(lambda: gone(pid), 10), f"llama-server {pid} outlived the process that started it"


def test_a_probe_killed_by_sigill_marks_the_build_failed(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECBENCH_LLAMACPP_CACHE", str(tmp_path / "cache"))
    root = binaries.cache_dir() / f"11434.0.0-{binaries.cpu_key()}"
    fake_build(root, "sigill")
    assert binaries.find("11434.0.0") is not None
    target = ModelFile(str(tmp_path / "target-F32.gguf"), "F32", "0" * 64, ["llama-quantize"])
    monkeypatch.setattr(llamacpp, "pair_files", lambda *args, **kwargs: (target, None))
    started: list[Server] = []
    real_start = Server.start
    monkeypatch.setattr(Server, "start", lambda self: started.append(self) or real_start(self))
    config = JobConfig.from_mapping(compose("backend=llamacpp", "method=ar"))
    with pytest.raises(RuntimeError, match="illegal instruction: the next job rebuilds it portable"):
        LlamaCppEngine(config, tokenizer=None, progress=False)
    assert len(started) == 1 and started[0].proc.returncode in binaries.SIGILL_CODES
    assert binaries.find("11434.0.0") is None  # the next ensure() rebuilds it portable
    info = json.loads((root / "build.json").read_text())
    assert info["probes"] == {"F32": "failed"} and "illegal instruction" in info["probe_log"]
    assert ended(started[0].pid)
    started[0].log_path.unlink()  # a server that died keeps its log


# ----------------------------------------------------------------------------- a loop on the server


def test_a_loop_on_a_speculative_server_reads_tokens_rounds_and_times(make):
    server = make(argv=DRAFT).start()
    loop = ServerLoop(server, 5, True, False)
    prompt, tokens, (drafted, accepted) = fixture("draft_1")
    assert tokens != fixture("draft_0")[1]  # the fake answers the prompt's own recording
    for _ in range(2):  # the /metrics cross-check holds on every request, not only the first
        gen = loop.generate(prompt, 64)
        assert gen.tokens == tokens and gen.stop_reason == "max_new_tokens" and gen.speculative
        assert gen.rounds.drafted == drafted and gen.rounds.accepted == accepted == [5] * 10 + [2]
        assert gen.rounds.gamma == [5] * 11
        assert 0 < gen.ttft_ms <= gen.first_round_ms <= gen.wall_ms
        assert set(gen.phase_ms) == {"prompt_ms", "predicted_ms"}
    short = loop.generate(prompt, 16)  # n_predict is the job's max_new_tokens
    assert short.tokens == tokens[:16] and 1 + sum(a + 1 for a in short.rounds.accepted) >= 16


def test_a_loop_on_the_target_alone_records_no_rounds(make):
    loop = ServerLoop(make().start(), None, False, False)
    prompt, tokens, _ = fixture("alone_2")
    gen = loop.generate(prompt, 64)
    assert gen.tokens == tokens and not gen.speculative and len(gen.rounds.drafted) == 0
    assert gen.first_round_ms is None
    assert loop.payload(prompt, 64)["cache_prompt"] is False  # no prompt cache between turns


def test_a_speculative_server_that_drafts_nothing_fails_its_first_request(make):
    server = make("no_draft", DRAFT).start()
    prompt, tokens, _ = fixture("draft_0")
    with pytest.raises(RuntimeError, match="drafted nothing on its first request: speculation is not on"):
        ServerLoop(server, 5, True, False).generate(prompt, 64)
    gen = ServerLoop(server, 5, False, False).generate(prompt, 64)  # an n-gram drafter may find nothing to draft
    assert gen.tokens == tokens and set(gen.rounds.drafted) == {0}


def test_metrics_that_disagree_with_the_stream_fail_the_request(make):
    server = make("bad_metrics", DRAFT).start()
    prompt, _, _ = fixture("draft_0")
    with pytest.raises(RuntimeError, match=r"/metrics counted \(53\.0, 52\.0\).*its stream \(52, 52\)"):
        ServerLoop(server, 5, True, False).generate(prompt, 64)


def test_a_token_with_no_chunk_is_read_from_an_unstreamed_repeat(make):
    loop = ServerLoop(make("drop_chunk").start(), None, False, False)
    prompt, tokens, _ = fixture("alone_0")
    gen = loop.generate(prompt, 64)
    assert loop.last_missing == 1 and gen.tokens == tokens


def test_a_token_with_no_chunk_on_a_speculative_server_keeps_the_metrics_check(make):
    loop = ServerLoop(make("drop_chunk", DRAFT).start(), 5, True, False)
    prompt, tokens, _ = fixture("draft_0")
    gen = loop.generate(prompt, 64)
    assert loop.last_missing == 1 and gen.tokens == tokens and sum(gen.rounds.drafted) == 52


def test_the_tokenizer_check_compares_the_server_s_ids_with_ours(make):
    server = make().start()
    ids = json.loads((FIXTURES / "tokenize.json").read_text())

    def ours(text, add_special_tokens):
        return {"input_ids": ids[text]}

    check_tokenizer(server, ours)
    ids["Hello world, this is a test."] = [*ids["Hello world, this is a test."][:-1], 0]
    with pytest.raises(RuntimeError, match="tokenizer differs from ours on 'Hello world"):
        check_tokenizer(server, ours)


@pytest.mark.parametrize("setting", ["draft", "hybrid"])
def test_the_speculation_flags_are_those_the_fixtures_were_recorded_with(setting):
    """The flags the recorded server ran with (``meta.json``): ``--spec-type`` among them (``-md`` alone silently
    runs without speculation)."""
    meta = json.loads((FIXTURES / "meta.json").read_text())["settings"][setting]
    config = JobConfig.from_mapping(compose(f"pair={meta['pair']}", f"method={meta['method']}", "backend=llamacpp",
                                            "gamma=5"))
    recorded = meta["flags"][meta["flags"].index("--spec-type"):]
    draft = recorded[recorded.index("-md") + 1]
    assert spec_args(config, draft, 2) == recorded
