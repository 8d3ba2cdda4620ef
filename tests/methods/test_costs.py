"""The cost model a policy reads (issue 14; ``methods/costs.py``): the calibrate JSON's table, costs learnt online,
and the table adapted to the machine's clock by measured ÷ table ratios."""

from __future__ import annotations

import math

import pytest

from methods.base import RoundOutcome
from methods.cost_aware import CostAware
from methods.costs import CostModel
from specbench.latency import ForwardCost, LatencyModel


def test_cost_model_reads_the_calibrate_json(tmp_path):
    lat = LatencyModel(ForwardCost({1: 70.0, 2: 130.0, 3: 187.0, 4: 123.0}, (100.0, 2.0), 0.01, 128, (40.0, 0.5)),
                       ForwardCost({1: 12.4, 2: 14.0}, (11.0, 1.5), 0.001, 128, (8.0, 0.1)), 2.4, 1.0)
    path = lat.save(tmp_path / "l.json")
    costs = CostModel.from_latency_file(path)
    for k in (1, 2, 3, 4, 9):
        assert costs.verify(k) == pytest.approx(lat.verify_ms(k, 128))
    assert costs.draft == pytest.approx(lat.draft_ms(1, 128)) and costs.overhead == 2.4
    assert costs.round(3) == pytest.approx(3 * 12.4 + 123.0 + 2.4)
    online = CostModel.online_model()
    online.observe(RoundOutcome(3, 3, 1, draft_ms=30.0, verify_ms=100.0, round_ms=133.0))
    assert online.verify(4) == 100.0 and online.verify(9) == 100.0 and online.draft == 10.0 and online.overhead == 3.0
    with pytest.raises(ValueError, match="calibrate"):
        CostModel.from_latency_file(tmp_path / "missing.json")
    assert math.isfinite(CostModel.paper().round(0))


def test_adapted_costs_learn_the_machines_clock_from_the_calibrated_shape(tmp_path):
    """``adapt``: the table corrected by measured ÷ table ratios — per verified length, shrunk to the
    global ratio (the host's drift), which also prices a length never verified; draft tokens alike."""
    lat = LatencyModel(ForwardCost({1: 100.0, 5: 300.0, 9: 400.0}, (100.0, 30.0), 0.0, 128, (40.0, 0.5)),
                       ForwardCost({1: 60.0}, (60.0, 0.0), 0.0, 128, (8.0, 0.1)), 2.0, 1.0)
    path = lat.save(tmp_path / "l.json")
    adapted = CostModel.build(str(path), adapt=True)
    assert adapted.verify(9) == 400.0 and adapted.draft_cost == 60.0  # nothing measured: the table
    for _ in range(20):  # the engine pays 0.75 of the table for 9 tokens, 0.6 of its draft forward
        adapted.observe(RoundOutcome(8, 8, 3, draft_ms=8 * 36.0, verify_ms=300.0, round_ms=590.0))
    assert adapted.verify(9) == pytest.approx(300.0, rel=0.01)
    assert adapted.verify(5) == pytest.approx(0.75 * 300.0, rel=0.01)  # never verified: the global ratio
    assert adapted.draft_cost == pytest.approx(36.0) and adapted.round(8) == pytest.approx(8 * 36 + 300 + 2, rel=0.01)
    for _ in range(3):  # 5 tokens measured at the table's cost: its own ratio, shrunk to the global one
        adapted.observe(RoundOutcome(4, 4, 4, draft_ms=4 * 36.0, verify_ms=300.0, round_ms=446.0))
    assert 0.75 * 300.0 < adapted.verify(5) < 300.0
    plain = CostModel.build(str(path))
    plain.observe(RoundOutcome(8, 8, 3, draft_ms=8 * 36.0, verify_ms=300.0, round_ms=590.0))
    assert plain.verify(9) == 400.0 and plain.state()["cost_source"] == "table"
    assert adapted.state()["cost_source"] == "table, adapted"
    with pytest.raises(ValueError, match="latency"):
        CostModel.build(None, adapt=True)
    with pytest.raises(ValueError, match="latency"):
        CostAware(4, adapt_costs=True)
    # a prompt's first round also feeds the prompt to the draft: its draft time teaches nothing per token
    policy = CostAware(4, transient=False, latency=str(path), adapt_costs=True)
    policy.begin_prompt()
    policy.observe(RoundOutcome(4, 4, 4, draft_ms=4 * 60.0 + 900.0, verify_ms=300.0, round_ms=1500.0))
    assert policy.costs.draft_cost == 60.0
    policy.observe(RoundOutcome(4, 3, 1, draft_ms=3 * 30.0 + 30.0, verify_ms=150.0, round_ms=300.0, discarded=1))
    assert policy.costs.draft_cost == pytest.approx(30.0)  # 4 proposed (3 verified, 1 discarded) at 30 ms
