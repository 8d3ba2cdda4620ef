"""A sweep's kernel choices are made once and shared by its jobs, in any process (runners.jobs.kernels, issue 40):
``engine.fast_linear=auto`` and ``engine.verify_buckets=auto`` measure on the machine, and two jobs of one
comparison measuring apart could run different kernels. The timings are faked (no test asserts on real time)."""

from __future__ import annotations

import json

import pytest

from runners.engine import fast_linear, linear_kernels
from runners.engine import verify_forward as vf
from runners.jobs.kernels import KERNELS_SUBDIR, shared_kernels
from specbench.config import EngineConfig, JobConfig

from helpers import compose, tiny

ENGINE = EngineConfig.from_mapping({"fast_linear": "auto", "verify_buckets": "auto"})
#: the forwards ``auto`` times against each other: the plain one, the transposed copy and, where oneDNN is, its copy
KERNELS = 3 if linear_kernels.onednn_available() else 2
#: the block forwards one ``auto`` measurement times: each kernel on every block, the 1-token one ``STEP_REPEATS``
#: rounds, the others 3
BLOCK_CALLS = KERNELS * (3 * (len(fast_linear.PAY_BLOCKS) - 1) + fast_linear.STEP_REPEATS)


@pytest.fixture
def measured(monkeypatch):
    """Counts the engine's measurements; the fake clock makes the transposed copy pay and a 1-token block cheaper
    padded to 2."""
    calls = {"block": 0, "probe": 0}

    def block_ms(runs, cache, context, k, warmup=False):
        calls["block"] += 1
        return 1.0 if isinstance(runs.lm_head, linear_kernels.TransposedLinear) else 2.0

    def probe(executor, k_max, context=128, warmup=1, repeats=5):
        calls["probe"] += 1
        return {m: 10.0 + m for m in range(1, k_max + 1)}, {r: (30.0 if r == 1 else 5.0) for r in range(1, k_max + 1)}

    monkeypatch.setattr(fast_linear, "_block_ms", block_ms)
    monkeypatch.setattr(fast_linear, "probe_costs", probe)
    return calls


def _spec():
    return JobConfig.from_mapping(compose()).pair.target


def test_a_second_process_takes_the_first_jobs_kernels(measured, tmp_path):
    first = tiny.tiny_model(300, seed=3)
    with shared_kernels(first, _spec(), tmp_path):
        kernels = vf.engine_forward(first, ENGINE, 4)
    assert measured == {"block": BLOCK_CALLS, "probe": 1}
    assert kernels.describe()["fast_linear"] == "all" and kernels.buckets[1] == (2, 2)
    (entry,) = (tmp_path / KERNELS_SUBDIR).glob("*.json")
    assert json.loads(entry.read_text())["fast_linear"] == "all"
    measured.update(block=0, probe=0)
    second = tiny.tiny_model(300, seed=3)  # another process's model: nothing measured for it in this one
    with shared_kernels(second, _spec(), tmp_path):
        again = vf.engine_forward(second, ENGINE, 4)
    assert measured == {"block": 0, "probe": 0} and again.describe() == kernels.describe()
    alone = tiny.tiny_model(300, seed=3)  # no sweep folder: this process measures for itself
    with shared_kernels(alone, _spec(), None):
        vf.engine_forward(alone, ENGINE, 4)
    assert measured == {"block": BLOCK_CALLS, "probe": 1}


def test_a_measurement_of_another_machine_or_target_is_not_taken(measured, tmp_path):
    first = tiny.tiny_model(300, seed=3)
    with shared_kernels(first, _spec(), tmp_path):
        vf.engine_forward(first, ENGINE, 4)
    (entry,) = (tmp_path / KERNELS_SUBDIR).glob("*.json")
    data = json.loads(entry.read_text())
    data["key"]["threads"] += 1  # written by a job at other threads: its key no longer matches
    entry.write_text(json.dumps(data))
    measured.update(block=0, probe=0)
    second = tiny.tiny_model(300, seed=3)
    with shared_kernels(second, _spec(), tmp_path):
        vf.engine_forward(second, ENGINE, 4)
    assert measured["block"] > 0 and measured["probe"] == 1
