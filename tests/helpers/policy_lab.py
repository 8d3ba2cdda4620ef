"""What several policy-lab test modules share (issue 14; tests/methods, tests/replay, tests/analysis): a latency
file written from a verification cost table and a draft cost (``latency_json``), and the lab's module
(``lab_script``: ``runners.replay.lab``, once ``scripts/policy_lab.py``)."""

from __future__ import annotations

from specbench.latency import ForwardCost, LatencyModel


def latency_json(tmp_path, table: dict[int, float], draft: float, overhead: float = 0.0) -> str:
    lat = LatencyModel(ForwardCost(table, (table[max(table)], 0.0), 0.0, 64, (5.0, 0.1)),
                       ForwardCost({1: draft}, (draft, 0.0), 0.0, 64, (1.0, 0.0)), overhead, 0.0)
    return str(lat.save(tmp_path / "lat.json"))


def lab_script(root):
    from runners.replay import lab

    return lab
