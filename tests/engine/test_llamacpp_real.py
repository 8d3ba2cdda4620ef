"""One real job on llama.cpp's server (``backend=llamacpp``): the project's build of llama.cpp b11434 (cached under
the user's cache directory; CI builds it before the suite), Gemma-3-270M F32 with its Q8_0 draft, two prompts. Every
record is lossless against the same build's target alone, its rounds are recorded, and no ``llama-server`` is left
running (by the pids the job started)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from runners.engine.llamacpp import binary as binaries
from runners.engine.llamacpp.server import Server

from helpers import run_sweep

VERSION = "11434.0.0"


def children_running(binary: Path) -> list[int]:
    """Pids of this process's children whose executable is ``binary`` and that have not ended."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text().rpartition(")")[2].split()
            if int(stat[1]) == os.getpid() and stat[0] not in ("Z", "X") and \
                    os.path.realpath(proc / "exe") == os.path.realpath(binary):
                found.append(int(proc.name))
        except (OSError, IndexError, ValueError):
            continue
    return found


@pytest.mark.slow
def test_a_real_job_on_llama_server_is_lossless_and_leaves_no_server(tmp_path, monkeypatch):
    build = binaries.find(VERSION)
    if build is None:
        pytest.skip(f"no llama.cpp build {VERSION} for this CPU in {binaries.cache_dir()} (CI builds it first: "
                    f"python -c 'from runners.engine.llamacpp import binary; binary.ensure(\"{VERSION}\")')")
    started: list[Server] = []
    real_start = Server.start
    monkeypatch.setattr(Server, "start", lambda self: started.append(self) or real_start(self))
    # no warm-up requests (what is checked is the output and the processes, not the times): about half the test's time
    proc = run_sweep(["backend=llamacpp", "method=specdecode", "gamma=3", "task.n_prompts=2", "max_new_tokens=16",
                      "warmup=0", "pair=gemma3-270m_gemma3-270m-int8"], None, tmp_path, in_process=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = [json.loads(line) for path in tmp_path.glob("*/records.jsonl") for line in path.read_text().splitlines()]
    assert len(records) == 2
    for record in records:
        assert record["backend"] == "llamacpp" and record["lossless"] is True
        assert record["new_tokens"] == 16 and record["speedup"] > 0
        assert record["rounds"] == len(record["drafted_trace"]) > 0
        assert 0 < sum(record["drafted_trace"]) and max(record["drafted_trace"]) <= 3
        assert record["backend_info"]["build"]["root"] == build.root
    assert len(started) == 2 and all(s.proc is not None and s.proc.returncode is not None for s in started)
    assert not children_running(build.server)
