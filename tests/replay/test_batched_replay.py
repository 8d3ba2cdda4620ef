"""The policy lab at every batch size (issue 31, item 2): the batched replay, the oracle at a batch size, the lab's
batch dimension (the golden rounds: ``test_golden_rounds.py``; the cost table, calibration and compare at a batch
size: ``test_batched_costs.py``).

* batch 1 is today, bit for bit: the replay (against the one-sequence loop as it was, on the shared rules), the
  grid's rows, the target alone;
* ``per_row``: every row slot replays its own prompts exactly as a job of them alone would;
* ``shared``: the policy's calls in their documented order, and every charge of a hand-made batch by hand;
* bad input is one line.
"""

from __future__ import annotations

from functools import partial

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from methods.base import COSTS, DraftStep, FixedGamma, GammaPolicy, RoundOutcome, policy_needs
from methods.policies import build_policy
from methods.rules import round_outcome, stop_drafting_after, verified_block
from runners.replay.batched import (
    agreement_oracle_batches,
    ar_batches,
    batches_of,
    check_batching,
    oracle_batches,
    pooled_batches,
    replay_job_batched,
    rows_of,
)
from runners.replay.grid import cells, load_method, replay_grid
from runners.replay.oracle import agreement_oracle, oracle, oracle_schedule
from runners.replay.replay import ReplayResult, max_new, replay_job, replay_rows
from runners.replay.trace import Trace, write_traces
from specbench.latency import BatchCosts, ForwardCost, LatencyModel, ar_batch_ms
from specbench.registry import ConfigError
from specbench.round_costs import RowRound, batch_round_parts, round_parts, seen_after

from helpers.replay_strategies import affine_latency, batched_latency, policy_strategy, synthetic_traces

# ----------------------------------------------------------------------------- batch 1 is today


def _one_sequence_replay(trace, policy, latency=None, max_new_tokens=None):
    """``runners.replay.replay.replay`` as it was before batches (git 61c8a9e): the one-sequence loop, its
    latency charges (``round_parts``) and its record of rounds kept as they were; the round's rules are the
    loops' own (``methods.rules``, pinned by the golden rows above)."""
    m = max_new(trace, max_new_tokens)
    x = trace.tokens[:m]
    n, p = len(x), trace.prompt_tokens
    eos = set(trace.eos)
    needs = policy_needs(policy)
    asks = getattr(trace, "kind", "model") == "model"
    policy.begin_prompt()
    res = ReplayResult(trace, n, "eos" if x[-1] in eos else "max_new_tokens")
    t, seen = 1, 0
    if latency is not None:
        res.ttft_ms = latency.target_prefill_ms(p)
    while x[t - 1] not in eos and t < m:
        gamma = int(policy.next_gamma())
        budget = min(gamma, m - t - 1)
        toks, confs, steps = [], [], []
        if budget > 0:
            r_toks, r_feats = trace.rollout_steps(t, budget)
            if not asks:
                toks = r_toks
            for i, (tok, feats) in enumerate(zip(r_toks, r_feats) if asks else ()):
                toks.append(tok)
                wanted = {k: v for k, v in feats.items() if k in needs}
                if "confidence" in wanted:
                    confs.append(wanted["confidence"])
                step = DraftStep(i + 1, tok, budget=budget, **wanted)
                steps.append(step)
                if stop_drafting_after(tok, step, policy, eos, i + 1, len(r_toks)):
                    break
        verified, _, proposed = verified_block(toks, budget, None, policy)
        d = len(verified)
        accepted = min(d, trace.agreement(t))
        new_t = min(t + accepted + 1, n)
        costs = {}
        if latency is not None:
            draft_ms, verify_ms = round_parts(latency, p, t, seen, d, proposed)
            res.round_ms.append(verify_ms + latency.round_overhead_ms + draft_ms)
            if COSTS in needs:
                costs = {"draft_ms": draft_ms, "verify_ms": verify_ms, "round_ms": res.round_ms[-1]}
        seen = seen_after(p, t, seen, proposed, accepted, new_t)
        outcome = round_outcome(gamma, verified, accepted, proposed, eos, confs, steps, **costs)
        res.rounds.gamma.append(gamma)
        res.rounds.drafted.append(d)
        res.rounds.accepted.append(accepted)
        res.rounds.confidences.append([round(c, 6) for c in outcome.confidences])  # a round record keeps 6 digits
        res.rounds.discarded.append(proposed - d)
        policy.observe(outcome)
        t = new_t
    if latency is not None:
        res.wall_ms = res.ttft_ms + sum(res.round_ms)
    return res


def _reference_ar_wall_ms(lat, p, n):
    """``LatencyModel.ar_wall_ms`` as it was before batches, frozen."""
    ms = lat.target_prefill_ms(p)
    for t in range(1, n):
        ms += lat.verify_ms(1, p + t - 1) + lat.ar_overhead_ms
    return ms


FIELDS = ("new_tokens", "stop_reason", "rounds", "round_ms", "ttft_ms", "wall_ms")


def _same(a: ReplayResult, b: ReplayResult) -> bool:
    return all(getattr(a, f) == getattr(b, f) for f in FIELDS)  # exact: the same floats, summed alike


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traces=st.lists(synthetic_traces(), min_size=1, max_size=4), lat=affine_latency(),
       policy=policy_strategy(), mode=st.sampled_from(["per_row", "shared"]))
def test_batch_one_is_todays_replay_job_bit_for_bit(traces, lat, policy, mode):
    name, gamma, params = policy
    build = partial(build_policy, name, gamma, params)
    ref_policy = build()
    reference = [_one_sequence_replay(tr, ref_policy, lat) for tr in traces]
    today = replay_job(traces, build(), lat)
    batched = replay_job_batched(traces, build, lat, batch_size=1, gamma_mode=mode)
    assert all(len(b.rows) == 1 for b in batched)
    for ref, a, b in zip(reference, today, rows_of(batched)):
        assert _same(ref, a) and _same(ref, b), (name, gamma, params)
    for tr, ref in zip(traces, reference):
        assert lat.ar_wall_ms(tr.prompt_tokens, ref.new_tokens) == _reference_ar_wall_ms(lat, tr.prompt_tokens, ref.new_tokens)
        assert batch_round_parts(lat, [RowRound(tr.prompt_tokens, 1, 0, 2, 1)]) == round_parts(lat, tr.prompt_tokens, 1, 0, 1, 2)


def test_batch_one_grid_rows_are_todays(traces):
    """``replay_grid`` at batch 1: the policies' rows are ``replay_job``'s, the oracles ``oracle``'s and
    ``agreement_oracle``'s, the target alone the frozen ``ar_wall_ms``; a cell's throughput is Σ tokens / Σ wall."""
    lat = batched_latency()
    methods = [load_method(m) for m in ("specdecode", "hf_heuristic", "gammatune_plus")]
    rows = replay_grid(traces, methods, [1, 3], lat)
    for method in methods:
        for gamma in (1, 3):
            got = [r for r in rows if r["method"] == method.label and r["gamma_init"] == gamma]
            want = [_one_sequence_replay(tr, p, lat) for p in [method.build(gamma)] for tr in traces]
            assert [(r["gamma_trace"], r["drafted_trace"], r["accepted_trace"], r["wall_ms"], r["ttft_ms"]) for r in got] == [
                (w.rounds.gamma, w.rounds.drafted, w.rounds.accepted, w.wall_ms, w.ttft_ms) for w in want]
            for r, tr in zip(got, traces):
                assert r["ar_wall_ms"] == _reference_ar_wall_ms(lat, tr.prompt_tokens, r["new_tokens"])
                assert r["batch_size"] == 1 and r["batch_share_ms"] == r["wall_ms"] and r["batch_rows"] == 1
                assert r["speedup"] == r["tokens_per_s"] / r["ar_tokens_per_s"]
    assert [r["wall_ms"] for r in rows if r["method"] == "oracle"] == [oracle(tr, lat).wall_ms for tr in traces]
    assert [r["wall_ms"] for r in rows if r["method"] == "oracle_agreement"] == [
        agreement_oracle(tr, lat).wall_ms for tr in traces]
    for cell in cells(rows):
        group = [r for r in rows if (r["method"], r["gamma_init"]) == (cell["method"], cell["gamma_init"])]
        assert cell["tokens_per_s"] == pytest.approx(sum(r["new_tokens"] for r in group) / sum(r["wall_ms"] for r in group) * 1000,
                                                     rel=1e-12)


# ----------------------------------------------------------------------------- per_row and shared


@pytest.mark.parametrize("batch_size", [2, 3, 4])
@pytest.mark.parametrize("method", ["specdecode", "hf_heuristic_carryover", "gammatune", "gammatune:transient=false",
                                    "assistant_threshold:adaptive_threshold=true,persist_threshold=true"])
def test_per_row_slots_replay_their_prompts_as_a_job_alone(traces, method, batch_size):
    """``per_row`` at batch B: slot i (rows i, i + B, ...) decodes exactly as a job of those prompts alone,
    carried-over state included (policies that do not read costs: one that does is told the batch's); the
    batch's wall is its last row's; rows' walls are their own finish."""
    spec = load_method(method)
    assert COSTS not in policy_needs(spec.build(3))
    lat = batched_latency()
    job = traces * 2  # 8 prompt turns: full batches and, at B = 3, a short last one
    batches = replay_job_batched(job, partial(spec.build, 3), lat, batch_size, "per_row")
    assert [len(b.rows) for b in batches] == [len(g) for g in batches_of(job, batch_size)]
    rows = rows_of(batches)
    for slot in range(batch_size):
        alone = replay_job(job[slot::batch_size], spec.build(3))
        got = rows[slot::batch_size]
        assert [(r.rounds.gamma, r.rounds.drafted, r.rounds.accepted) for r in got] == [
            (a.rounds.gamma, a.rounds.drafted, a.rounds.accepted) for a in alone], (method, slot)
    for batch in batches:
        assert batch.wall_ms == pytest.approx(max(r.wall_ms for r in batch.rows), rel=1e-12)
        assert all(len(r.round_ms) == len(r.rounds.accepted) for r in batch.rows)
        assert len(batch.round_ms) == max(len(r.rounds.accepted) for r in batch.rows)
    assert pooled_batches(batches) == pytest.approx(
        sum(r.new_tokens for r in rows) / sum(b.wall_ms for b in batches) * 1000)


class _Recorder(GammaPolicy):
    """γ = 2 every round; records every call (what it was asked, in order)."""

    name = "recorder"
    needs = frozenset({"confidence", COSTS})

    def __init__(self) -> None:
        super().__init__(2)
        self.calls: list[tuple] = []

    def begin_prompt(self) -> None:
        self.calls.append(("begin_prompt",))

    def next_gamma(self) -> int:
        self.calls.append(("next_gamma",))
        return 2

    def stop_drafting(self, step: DraftStep) -> bool:
        self.calls.append(("stop_drafting", step.position, step.token))
        return False

    def verify_count(self, proposed: int) -> int:
        self.calls.append(("verify_count", proposed))
        return proposed

    def observe(self, outcome: RoundOutcome) -> None:
        self.calls.append(("observe", outcome.gamma, outcome.drafted, outcome.accepted,
                           round(outcome.draft_ms, 9), round(outcome.verify_ms, 9), round(outcome.round_ms, 9)))


def _hand_made():
    """Row A (prompt 3): the draft agrees for 2 tokens at t = 1; row B (prompt 5): it disagrees at t = 1 (its
    rollout there: 9, 9), then agrees. Costs: batch 1 and 2 measured, affine, no context slope."""
    a = Trace("A", 1, 3, 4, 4, (), [1, 2, 3, 4], [2, 3, 9], [0.9, 0.8, 0.1], {3: ([9], [0.1])})
    b = Trace("B", 1, 5, 4, 4, (), [5, 6, 7, 8], [9, 7, 8], [0.4, 0.7, 0.6], {1: ([9, 9], [0.4, 0.3])})
    lat = LatencyModel(ForwardCost.affine(10.0, 1.0, prefill=(5.0, 1.0)), ForwardCost.affine(2.0, 0.5, prefill=(1.0, 0.1)),
                       0.5, 0.1, {}, {2: BatchCosts(ForwardCost.affine(16.0, 2.0, prefill=(8.0, 1.5)),
                                                    ForwardCost.affine(3.0, 1.0, prefill=(2.0, 0.2)), 0.75, 0.2)})
    return a, b, lat


def test_shared_gamma_on_a_hand_made_batch():
    """Every call of the shared policy in its order, every charge by hand:

    prefill: 2 rows × 5 tokens: 8 + 1.5·5 = 15.5 (both rows' TTFT).
    round 1 (2 rows, γ = 2): the draft's first step feeds 6 tokens (B's prompt and x_1) on an empty cache:
    2 + 0.2·6 = 3.2; its second step 3 + 1 = 4; verification of 2 rows × 3 tokens: 16 + 2·3 = 22; overhead
    0.75: 29.95. A accepts 2 and finishes (t = 4), B accepts 0 (t = 2; its draft cache holds 6 tokens).
    round 2 (B alone, budget 1): the draft feeds 1 token at batch 1: 2 + 0.5 = 2.5; verification 10 + 2 = 12;
    overhead 0.5: 15. Walls: A 15.5 + 29.95, B and the batch 15.5 + 29.95 + 15."""
    a, b, lat = _hand_made()
    policy = _Recorder()
    out = replay_rows([a, b], [policy], lat, gamma_mode="shared")
    assert policy.calls == [
        ("begin_prompt",), ("next_gamma",),
        ("stop_drafting", 1, 2), ("stop_drafting", 1, 9), ("stop_drafting", 2, 3), ("stop_drafting", 2, 9),
        ("verify_count", 2), ("verify_count", 2),
        ("observe", 2, 2, 2, 7.2, 22.0, 29.95), ("observe", 2, 2, 0, 7.2, 22.0, 29.95),
        ("next_gamma",), ("stop_drafting", 1, 7), ("verify_count", 1), ("observe", 2, 1, 1, 2.5, 12.0, 15.0)]
    assert out.ttft_ms == 15.5 and out.round_ms == pytest.approx([29.95, 15.0])
    ra, rb = out.rows
    assert (ra.rounds.accepted, rb.rounds.accepted, rb.rounds.drafted) == ([2], [0, 1], [2, 1])
    assert ra.wall_ms == pytest.approx(45.45) and rb.wall_ms == pytest.approx(60.45) == out.wall_ms
    assert out.tokens_per_s == pytest.approx(8 / 0.06045)
    # the target alone on the same batch: 15.5, then 3 steps of 2 rows × 1 token at context 5: 16 + 2 + 0.2
    assert ar_batch_ms(lat, [3, 5], [4, 4]) == (15.5, [pytest.approx(70.1)] * 2)
    assert ar_batches([a, b], lat, 2) == [(15.5, [pytest.approx(70.1)] * 2)]
    # per_row with two recorders: each is asked about its own row only
    mine = [_Recorder(), _Recorder()]
    rows = replay_rows([a, b], mine, lat).rows
    assert [r.round_ms for r in rows] == [r.round_ms for r in out.rows]
    assert [c for c in mine[0].calls if c[0] == "stop_drafting"] == [("stop_drafting", 1, 2), ("stop_drafting", 2, 3)]


# ----------------------------------------------------------------------------- the oracle at a batch size


def test_the_oracle_at_a_batch_size(traces):
    """Batch 1: ``oracle`` exactly. A batch of identical rows moves in lockstep, so each row's schedule under
    the costs at b rows is the batch's exact optimum: no policy beats it, in either mode. Distinct rows: each
    plays its own schedule at the batch's costs (not a bound; module docstring of runners.replay.batched)."""
    lat = batched_latency()
    assert [b.rows[0].wall_ms for b in oracle_batches(traces, lat, 1)] == [oracle(tr, lat).wall_ms for tr in traces]
    for tr in traces:
        same = [tr] * 4
        best = oracle_batches(same, lat, 4)[0]
        total, _ = oracle_schedule(tr, lat.at_batch(4))
        assert best.wall_ms == pytest.approx(total, rel=1e-12)
        for label in ("specdecode", "hf_heuristic", "gammatune_plus", "cost_aware"):
            for gamma in (1, 2, 4, 8):
                for mode in ("per_row", "shared"):
                    got = replay_job_batched(same, partial(load_method(label).build, gamma), lat, 4, mode)[0]
                    assert best.wall_ms <= got.wall_ms + 1e-9, (tr.prompt_id, label, gamma, mode)
        assert agreement_oracle_batches(same, lat, 4)[0].wall_ms >= best.wall_ms - 1e-9
    mixed = oracle_batches(traces, lat, 2)
    for batch, group in zip(mixed, batches_of(traces, 2)):
        for row, tr in zip(batch.rows, group):
            assert row.rounds.gamma  # its own schedule, charged with its batch mates
            _, ds = oracle_schedule(tr, lat.at_batch(2))
            assert len(row.rounds.gamma) == len(ds)


# ----------------------------------------------------------------------------- bad input, the CLI, the lab


def test_bad_batching_is_one_line(traces, tmp_path, capsys):
    from runners.replay.commands import main

    build = partial(FixedGamma, 2)
    for size in (0, -2, 2.5, True):
        with pytest.raises(ConfigError, match="^batch size must be an integer >= 1"):
            replay_job_batched(traces, build, None, size)
    with pytest.raises(ConfigError, match=r"^unknown gamma_mode 'joint' \(known: per_row, shared\)$"):
        replay_job_batched(traces, build, None, 2, "joint")
    with pytest.raises(ValueError, match="^unknown gamma_mode"):
        replay_rows(traces[:2], [FixedGamma(2)], None, gamma_mode="both")
    with pytest.raises(ConfigError, match="recalibrate"):
        check_batching(16, "per_row", batched_latency())
    write_traces(tmp_path / "t" / "trace.jsonl", traces)
    LatencyModel.affine((10.0, 1.0), (2.0, 0.3)).save(tmp_path / "lat.json")
    for argv, words in ((["--batch-sizes", "0"], "batch size must be"), (["--gamma-mode", "joint"], "unknown gamma_mode"),
                        (["--batch-sizes", "2"], "recalibrate")):
        capsys.readouterr()
        rc = main(["grid", str(tmp_path / "t"), "--methods", "specdecode", "--gammas", "2", "--latency",
                   str(tmp_path / "lat.json"), "--out", str(tmp_path / "o"), *argv])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and len(err) == 1 and err[0].startswith("error: ") and words in err[0], (argv, err)


def test_lab_replays_every_batch_size_and_the_figure_follows(traces, tmp_path):
    from analysis.make_artefacts import main as analysis_main
    from analysis.policy_lab import leaderboard, load_replay
    from analysis.policy_lab_batch import batch_frame, batch_table
    from runners.replay import lab

    write_traces(tmp_path / "traces" / "tiny__t" / "trace.jsonl", traces)
    (tmp_path / "latency").mkdir()
    batched_latency().save(tmp_path / "latency" / "tiny.json")
    out = tmp_path / "replay"
    assert lab.main(["replay", "--traces", str(tmp_path / "traces"), "--latency", str(tmp_path / "latency"),
                     "--out", str(out), "--methods", "specdecode", "hf_heuristic", "--gammas", "1,3",
                     "--batch-sizes", "1", "2", "4", "--gamma-mode", "shared"]) == 0
    df = load_replay(out)
    assert sorted(df["batch_size"].unique()) == [1, 2, 4]
    assert set(df.loc[~df["method"].str.startswith(("oracle", "best_fixed")), "gamma_mode"]) == {"shared"}
    board = leaderboard(df)
    assert "B" in board.display and sorted(board.data["batch_size"].unique()) == [1, 2, 4]
    assert "hf_heuristic (shared γ)" in set(board.data["method"])
    frame = batch_frame(df)
    assert {"best_fixed_task", "oracle", "specdecode (shared γ)"} <= set(frame["method"])
    assert (frame.groupby("method")["batch_size"].nunique() == 3).all()
    assert analysis_main([str(out), "--out", str(tmp_path / "analysis")]) == 0
    assert (tmp_path / "analysis" / "figures" / "policy_lab_batch.png").exists()
    assert "| B |" in (tmp_path / "analysis" / "tables" / "policy_leaderboard.md").read_text()
    table = batch_table(df)
    assert list(table.data["batch_size"]) == [1, 2, 4]
    for _, row in table.data.iterrows():  # each B's best fixed γ is the fastest fixed γ replayed at that B
        at = frame[(frame["batch_size"] == row["batch_size"])]
        assert row["best_fixed_speedup"] == pytest.approx(at.loc[at["method"] == "best_fixed_task", "speedup_vs_ar"].iloc[0])
        assert row["policies"] == 2 and row["best_policy"] in {"specdecode (shared γ)", "hf_heuristic (shared γ)"}
    assert (tmp_path / "analysis" / "tables" / "policy_lab_batch.md").exists()


def test_the_committed_leaderboard_renders_as_committed(root):
    """The committed policy lab (cells without a batch size) still gives its committed leaderboard."""
    from analysis.policy_lab import leaderboard, load_replay
    from analysis.policy_lab_batch import batch_frame

    folder = root / "results" / "committed" / "policy_lab"
    df = load_replay(folder / "replay")
    board = leaderboard(df)
    committed = pd.read_csv(folder / "analysis" / "tables" / "policy_leaderboard.csv", dtype=str, keep_default_na=False)
    pd.testing.assert_frame_equal(board.display.reset_index(drop=True).astype(str), committed)
    assert batch_frame(df) is None  # one batch size: no figure against B


@pytest.mark.slow
def test_the_committed_batched_lab_regenerates_its_tables(root, tmp_path):
    """results/committed/policy_lab_batch: the replay at B in {1, 2, 4, 8} gives its committed tables."""
    from analysis.make_artefacts import main as analysis_main

    folder = root / "results" / "committed" / "policy_lab_batch"
    assert analysis_main([str(folder / "replay"), "--out", str(tmp_path)]) == 0
    names = sorted(p.name for p in (folder / "analysis" / "tables").glob("*.data.csv"))
    assert "policy_lab_batch.data.csv" in names and "policy_leaderboard.data.csv" in names
    for name in names:
        pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "tables" / name),
                                      pd.read_csv(folder / "analysis" / "tables" / name), check_exact=False, rtol=1e-9)
    batch = pd.read_csv(folder / "analysis" / "tables" / "policy_lab_batch.data.csv")
    assert sorted(batch["batch_size"].unique()) == [1, 2, 4, 8]


def _turn(prompt_id: str, turn: int) -> Trace:
    return Trace(prompt_id=prompt_id, turn=turn, prompt_tokens=4, max_new_tokens=3, gamma_max=3, eos=(0,),
                 tokens=[1, 2, 3], draft_next=[2, 3], draft_conf=[0.9, 0.9], tails={})


def test_replayed_batches_are_the_engines_on_a_multi_turn_task():
    """A later turn is asked after the answer to the one before, so it can never share a batch with it: the
    replay forms the batched job's batches (B prompts, then turn by turn), not slices of the trace list."""
    from runners.jobs.batch import batches
    from runners.jobs.record import Unit
    from specbench.tasks import Prompt

    traces = [_turn("a", 1), _turn("a", 2), _turn("b", 1), _turn("b", 2), _turn("c", 1)]
    got = [[(t.prompt_id, t.turn) for t in g] for g in batches_of(traces, 2)]
    assert got == [[("a", 1), ("b", 1)], [("a", 2), ("b", 2)], [("c", 1)]]
    prompts = [Prompt("a", "x", ("q", "r")), Prompt("b", "x", ("q", "r")), Prompt("c", "x", ("q",))]
    units = [Unit(i, p, t, 0) for i, p in enumerate(prompts) for t in range(1, len(p.turns) + 1)]
    assert [[(u.prompt.prompt_id, u.turn) for u in b] for b in batches(units, 2)] == got
    lat = LatencyModel.affine(target=(10.0, 1.0), draft=(1.0, 0.1))
    lat.batches = {2: lat.costs_at(1)}
    rows = replay_grid(traces, [load_method("specdecode")], [2], lat, batch_size=2)
    spec = [r for r in rows if r["method"] == "specdecode"]
    assert [(r["prompt_id"], r["turn"], r["batch_index"]) for r in spec] == [
        ("a", 1, 0), ("b", 1, 0), ("a", 2, 1), ("b", 2, 1), ("c", 1, 2)]
    own = [r for r in rows if r["method"] == "best_fixed_prompt"]  # each prompt turn's own best γ, by its own row
    assert sorted((r["prompt_id"], r["turn"]) for r in own) == sorted((t.prompt_id, t.turn) for t in traces)


def test_the_batched_replay_and_the_policy_lab_import_no_torch():
    """The replay at any batch size forms its batches by the engine's rule (``specbench.batches.turn_batches``)
    without importing the engine: the policy lab and SpecDecode-Bench's conformance script run on a machine without
    torch's import time (3 s on a 2-core Xeon, 2026-11-29; before, ``runners.replay.batched`` imported
    ``runners.engine.batched`` for that one function)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    code = ("import sys; import runners.replay.batched, runners.replay.replay, analysis.policy_lab, specbench.batches; "
            "print('torch' in sys.modules, sorted(m for m in sys.modules if m.startswith('runners.engine')))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=root,
                         env={"PYTHONPATH": str(root)}).stdout.split()
    assert out == ["False", "[]"]
