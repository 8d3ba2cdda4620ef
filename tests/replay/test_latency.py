"""The latency model is a core type and its file is read in one place (issue 30, item 1).

``specbench.latency`` holds ``LatencyModel`` and the rule that charges a round; the cost table of
``methods.costs``, the ``c`` of ``analysis.leviathan``, a job's predicted wall time
(``runners.jobs.predict``) and the replay all read the file, and charge rounds, through it.
"""

from __future__ import annotations

import json
import logging
import math
from types import SimpleNamespace

import pytest

import analysis.leviathan
import methods.costs
import runners.jobs.predict
import runners.replay.calibration
import runners.replay.replay
import specbench.latency
from analysis.leviathan import calibration_c, load_calibrations
from methods.costs import CostModel
from specbench.latency import LATENCY_VERSION, ForwardCost, LatencyModel
from specbench.round_costs import predict_parts_ms, predict_wall_ms, round_ms, seen_after

K = 6


def _model(draft_table: bool = True) -> LatencyModel:
    target = ForwardCost({1: 70.0, 2: 130.0, 3: 187.0, 4: 123.0}, (100.0, 2.0), 0.01, 128, (40.0, 0.5))
    draft = (ForwardCost({1: 12.4, 2: 14.0}, (11.0, 1.5), 0.001, 128, (8.0, 0.1)) if draft_table
             else ForwardCost.affine(9.0, 0.5))
    return LatencyModel(target, draft, 2.4, 1.0, {"pair": "p"})


def test_the_format_is_defined_once():
    for module in (methods.costs, analysis.leviathan, runners.jobs.predict, runners.replay.calibration,
                   runners.replay.replay):
        assert not hasattr(module, "LATENCY_VERSION"), module.__name__
    # the readers hold the core type, not a copy of it
    assert runners.replay.calibration.LatencyModel is LatencyModel and runners.replay.calibration.ForwardCost is ForwardCost
    assert runners.jobs.predict.LatencyModel is LatencyModel and runners.jobs.predict.predict_wall_ms is predict_wall_ms
    assert runners.replay.replay.LatencyModel is LatencyModel
    assert not hasattr(runners.replay.replay, "predict_wall_ms") and not hasattr(runners.replay.replay, "_round_parts")
    assert specbench.latency.LATENCY_VERSION == LATENCY_VERSION == 1


@pytest.mark.parametrize("draft_table", [True, False])
def test_the_cost_table_is_the_latency_models(draft_table):
    obj = json.loads(json.dumps(_model(draft_table).to_json()))
    lat = LatencyModel.from_json(obj)
    from_json, from_model = CostModel.from_latency_json(obj), CostModel.from_latency_model(lat)
    for costs in (from_json, from_model):
        for k in range(1, K + 1):
            assert costs.verify(k) == lat.verify_ms(k, lat.target.ref_context), k
        for d in range(0, K):
            assert costs.round(d) == from_json.round(d)
        assert costs.draft == (lat.draft.step_ms[1] if draft_table else sum(lat.draft.step_affine))
        assert costs.draft == lat.draft_ms(1, lat.draft.ref_context)
        assert costs.overhead == lat.round_overhead_ms == 2.4
        assert costs.table == lat.target.step_ms and costs.affine == lat.target.step_affine
    assert vars(from_json) == vars(from_model)


def test_c_of_a_file():
    lat = _model()
    assert calibration_c(lat.to_json()) == LatencyModel.c_from_json(lat.to_json()) == pytest.approx(lat.c)
    assert calibration_c(LatencyModel.paper(7.0).to_json()) == 7.0  # meta.c
    lookup = {**lat.to_json(), "draft": ForwardCost({1: 0.0}).to_json()}
    assert calibration_c(lookup) == math.inf  # a drafter that costs nothing
    assert calibration_c({**lat.to_json(), "target": {}}) is None  # no target step
    assert calibration_c({"latency_version": 1, "meta": {"c": 4.0}, "target": {}, "draft": {}}) == 4.0


def test_a_wrong_version_is_one_clear_error_through_every_reader(tmp_path, caplog):
    obj = {**_model().to_json(), "latency_version": 2}
    path = tmp_path / "latency" / "p.json"
    path.parent.mkdir()
    path.write_text(json.dumps(obj))
    readers = [lambda: LatencyModel.from_json(obj), lambda: LatencyModel.load(path), lambda: LatencyModel.c_from_json(obj),
               lambda: CostModel.from_latency_json(obj), lambda: CostModel.from_latency_file(path),
               lambda: CostModel.build(str(path), adapt=True), lambda: calibration_c(obj)]
    messages = set()
    for read in readers:
        with pytest.raises(ValueError, match="latency_version 2 is not 1") as err:
            read()
        messages.add(str(err.value))
    assert len(messages) == 1
    # the tolerant readers leave the file out, and say so where a job reads it
    assert load_calibrations(path.parent) == {}
    config = SimpleNamespace(latency=str(path), pair=SimpleNamespace(name="p"), results_dir=str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="specbench"):
        assert runners.jobs.predict.find_latency(config) == (None, None)
    assert "latency_version 2 is not 1" in caplog.text


def test_a_jobs_prediction_charges_the_replays_rounds():
    """``predict_wall_ms`` is the sum of the rounds' charges (``round_ms``, the draft's cache by ``seen_after``)."""
    lat, p, n = _model(), 20, 12
    drafted, accepted = [3, 0, 4, 2, 1], [3, 0, 1, 2, 0]
    t, seen, rounds = 1, 0, 0.0
    for d, a in zip(drafted, accepted):
        new_t = min(t + a + 1, n)
        rounds += round_ms(lat, p, t, seen, d)
        seen, t = seen_after(p, t, seen, d, a, new_t), new_t
    ttft, wall = predict_wall_ms(lat, p, n, drafted, accepted)
    assert ttft == lat.target_prefill_ms(p) and wall == pytest.approx(ttft + rounds, rel=1e-12)
    parts = predict_parts_ms(lat, p, n, drafted, accepted)
    assert parts["overhead_ms"] == pytest.approx(len(drafted) * lat.round_overhead_ms)


def test_a_captured_graph_keeps_the_tensors_its_forward_reads_alive(monkeypatch):
    """A CUDA graph holds no Python reference to the tensors whose addresses it recorded: the token ids that
    ``GraphTimer._run`` builds were freed when it returned, and on an H100 (2026-11-28) the first replay read
    recycled memory as token ids (a device-side assert in the embedding). ``capture_graph`` now ties ``forward``
    (its closure: the inputs) to the graph. Checked here with torch.cuda's graph machinery stubbed (no GPU): the
    input lives while the graph does and is freed with it."""
    import contextlib
    import gc
    import weakref

    import torch

    class FakeGraph:  # records nothing, as a real graph records no Python reference
        def replay(self) -> None:
            pass

    class FakeStream:
        def wait_stream(self, other) -> None:
            pass

    monkeypatch.setattr(torch.cuda, "CUDAGraph", FakeGraph)
    monkeypatch.setattr(torch.cuda, "Stream", FakeStream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: FakeStream())
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "graph", lambda g: contextlib.nullcontext())

    def build() -> tuple[object, weakref.ref]:
        inp = torch.arange(4)  # built in this frame, as GraphTimer._run builds its token ids

        def forward():
            return inp * 2

        graph, out = runners.replay.calibration.capture_graph(forward, warmup=1)
        assert torch.equal(out, torch.arange(4) * 2)
        return graph, weakref.ref(inp)

    graph, ref = build()
    gc.collect()
    assert ref() is not None, "the graph's input was freed while the graph can still replay"
    del graph
    gc.collect()
    assert ref() is None
