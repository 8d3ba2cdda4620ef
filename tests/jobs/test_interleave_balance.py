"""Positions balanced across interleaved rounds (``runners.jobs.round_order``: ``round_order``, scheme
``balanced``; the earlier ``latin`` and ``shuffle`` kept for re-runs).

On a GPU the first decodes of an interleaved round ran ~20 % slower, and independent shuffles per round
left positions unbalanced enough to make an A/A pair (one method under two names) read 1.19-1.24; on the
CPU the cyclic Latin square that replaced them left the A/A twin of a 7-round, 37-slot recipe ~1 % fast,
since a Latin square balances positions only after as many rounds as slots. Here a virtual clock charges
the first three decodes of every round 20 % more (or a cost growing with the position), fake jobs read
their decode time from it, and the real ``InterleavedSweep`` orders their rounds: with the balanced
scheme the A/A pair reads 1 (exactly where the position cost is linear and the rounds even, also with
far fewer rounds than slots); the cyclic Latin square does only after a full block, and the independent
shuffle does not. The same fakes check the rule for uneven rounds (a job that finishes early, a resumed one) and
that the untimed warm-up runs once per round, before anything is timed. No model, no real time.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from runners.jobs import interleave
from runners.jobs.ar_cache import Reference
from runners.jobs.inputs import TurnInput
from runners.jobs.interleave import InterleavedSweep, read_order
from runners.jobs.record import Unit
from runners.jobs.round_order import golden_step, round_order, round_seed
from specbench.tasks import Prompt

PENALTY = 1.2  # the first decodes of a round cost 20 % more (the GPU run's positions 0-2)
PENALISED = 3
PAIR = "pair"


def prompt_cost(round_index: int) -> float:
    """A prompt turn's decode cost: prompts differ in length (1 to 1.5 here), as they do in a real task."""
    return 1.0 + 0.5 * ((round_index * 37) % 11) / 10


@dataclass
class Clock:
    """Virtual decode time: a decode of round ``r`` costs its job's ``work`` × ``prompt_cost(r)``, times
    ``PENALTY`` when it is one of the round's first ``PENALISED`` decodes (timed or paired AR alike). The
    round a decode belongs to is its unit's index, so the clock needs no signal from the sweep. Warm-ups
    are logged, not charged: what a warm-up takes away is the GPU's business, the balance must hold for
    whatever position cost is left."""

    costs: Callable[[int], float] = prompt_cost
    penalty: float = PENALTY
    drift: float = 0.0  # a cost added per position: position p of a round costs work × drift × p more
    now: float = 0.0
    round: int = -1
    in_round: int = 0
    log: list[tuple[str, int, str]] = field(default_factory=list)  # (kind, round, who), in time order

    def decode(self, round_index: int, work: float, who: str) -> float:
        if round_index != self.round:
            self.round, self.in_round = round_index, 0
        cost = work * self.costs(round_index) * (self.penalty if self.in_round < PENALISED else 1.0)
        cost += work * self.drift * self.in_round
        self.in_round += 1
        self.now += cost
        self.log.append(("decode", round_index, who))
        return cost

    def warm(self, round_index: int, who: str) -> None:
        self.log.append(("warm", round_index, who))


class FakeRun:
    """What ``InterleavedSweep`` drives of a ``JobRun``: units, inputs, a timed decode (read from the
    clock), the record's write (kept here) and the endings. ``done``: unit indices already in the folder
    (a resumed job); ``reference``: whether its records divide by a paired AR decode."""

    def __init__(self, folder: Path, name: str, clock: Clock, n_units: int, work: float = 1.0,
                 done: tuple[int, ...] = (), reference: bool = True) -> None:
        self.job_dir = folder / name
        self.clock, self.work, self.n_units, self.done, self.reference = clock, work, n_units, set(done), reference
        self.config = SimpleNamespace(pair=SimpleNamespace(name=PAIR), max_new_tokens=8)
        self.job = SimpleNamespace(name=name, clock=clock, activate=lambda: None)  # what the warm-up reads
        self.began, self.summary, self.probe = True, None, None
        self.times: dict[int, float] = {}  # unit index -> virtual seconds of its timed decode
        self.where: dict[int, dict[str, Any]] = {}  # unit index -> the record's ``interleave``

    def start(self, share: Any = None) -> None:
        return None

    def units(self) -> list[Unit]:
        return [Unit(i, Prompt(f"p{i}", "test", ("turn",)), 1, 0) for i in range(self.n_units)]

    def is_done(self, unit: Unit) -> bool:
        return unit.index in self.done

    def turn_ids(self, unit: Unit) -> TurnInput:
        return TurnInput([1, 2, unit.index], "plain")  # every job's input of a round is the same prompt turn

    def needs_reference(self) -> bool:
        return self.reference

    def generate(self, inps: list[TurnInput], reference: bool = True) -> list[tuple[float, None]]:
        assert len(inps) == 1 and not reference  # a batch of one; the round brings the reference
        return [(self.clock.decode(inps[0].ids[-1], self.work, self.job_dir.name), None)]  # ids end in the round

    def write(self, unit: Unit, inp: TurnInput, timed: float, reference: Any, where: dict[str, Any]) -> None:
        assert (reference is not None) == self.reference
        self.times[unit.index], self.where[unit.index] = timed, dict(where)
        self.done.add(unit.index)

    def finish(self, extra: dict | None = None) -> dict:
        self.summary = {"status": "complete", "aggregates": {}}
        return self.summary

    def close(self) -> None:
        pass


@pytest.fixture
def fakes(monkeypatch):
    """The sweep's seams onto real jobs replaced: opening (the fake is its own config), the per-call costs (not
    timed), the reference key (the input ids), the paired AR decode (on the clock, as the AR slot's owner) and the warm-up (logged)."""
    monkeypatch.setattr(InterleavedSweep, "_open", lambda self, cfg, job_dir: cfg)
    monkeypatch.setattr(InterleavedSweep, "_time_costs", lambda self, pair, r, items: None)  # no models to time
    monkeypatch.setattr(interleave, "job_reference_key", lambda job, ids: {"ids": list(ids)})

    def paired_ar(self, item, pair, where):
        item.run.clock.decode(item.unit.index, 0.5, f"ar/{item.run.job_dir.name}")
        return Reference(None, "paired", None, f"{item.ar_digest[:16]}@{where['round']}")

    monkeypatch.setattr(InterleavedSweep, "_paired_ar", paired_ar)
    calls: list[tuple[str, list[int]]] = []

    def untimed(job, ids):
        calls.append((job.name, list(ids)))
        job.clock.warm(ids[-1], job.name)
        return SimpleNamespace(tokens=[7] * 8, wall_ms=1.0)

    monkeypatch.setattr(interleave, "untimed_target", untimed)
    return calls


def _sweep(folder: Path, seed: int, scheme: str, n_units: int = 10, costs: Callable[[int], float] = prompt_cost,
           extra: tuple[dict[str, Any], ...] = (), clock: Clock | None = None) -> tuple[dict[str, FakeRun], Clock]:
    """Two identical jobs (``a`` and its A/A twin ``a_twin``), one of another cost and an AR job (no
    reference), plus ``extra`` (``FakeRun`` arguments); the paired AR decode makes a fifth slot. Runs them
    through the real sweep; returns them by name, and the clock."""
    clock = clock or Clock(costs)
    runs = [FakeRun(folder, "a", clock, n_units), FakeRun(folder, "a_twin", clock, n_units),
            FakeRun(folder, "b", clock, n_units, work=0.7),
            FakeRun(folder, "c", clock, n_units, work=1.6, reference=False)]
    runs += [FakeRun(folder, clock=clock, **kwargs) for kwargs in extra]
    outcomes = InterleavedSweep([(r, r.job_dir) for r in runs], folder, seed=seed, progress=False,
                                scheme=scheme).run()
    assert [o.status for o in outcomes] == ["complete"] * len(runs)
    return {r.job_dir.name: r for r in runs}, clock


def _aa(runs: dict[str, FakeRun]) -> tuple[float, float]:
    """The A/A pair's ratio of summed decode times, and the geometric mean of its per-turn ratios."""
    a, twin = runs["a"].times, runs["a_twin"].times
    assert a.keys() == twin.keys()
    summed = sum(a.values()) / sum(twin.values())
    per_turn = math.exp(sum(math.log(a[u] / twin[u]) for u in a) / len(a))
    return summed, per_turn


SEEDS = range(10)


# ------------------------------------------------------------------- the order itself


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_a_block_of_n_latin_rounds_puts_every_slot_at_every_position_once(n):
    slots = [f"job-{i}" for i in range(n)]
    for seed in (0, 1, 7):
        for block in range(3):
            seen: dict[str, list[int]] = {s: [] for s in slots}
            for r in range(block * n, (block + 1) * n):
                plan = round_order(slots, seed, PAIR, r, "latin")
                assert sorted(plan.order) == list(range(n)) and plan.scheme == "latin"
                assert plan.shift == r % n and plan.seed == round_seed(seed, PAIR, block * n)
                for position, i in enumerate(plan.order):
                    seen[slots[i]].append(position)
            assert all(sorted(p) == list(range(n)) for p in seen.values()), seen


@pytest.mark.parametrize("scheme", ["balanced", "latin"])
def test_a_round_depends_on_the_slots_names_not_on_the_order_they_come_in(scheme):
    """A round's order is a function of the seed, the pair, the round and its slot names: a resumed sweep,
    whose jobs come back in another order or with some slots absent, runs the round as the first run would."""
    slots = ["c", "a", "ar/a", "b", "d"]
    for r in range(12):
        plan = round_order(slots, 3, PAIR, r, scheme)
        names = [slots[i] for i in plan.order]
        shuffled = random.Random(r).sample(slots, len(slots))
        again = round_order(shuffled, 3, PAIR, r, scheme)
        assert [shuffled[i] for i in again.order] == names
    # another slot set (a job gone): the same rule over the slots present, n their number
    fewer = ["a", "ar/a", "b", "d"]
    block = 4 if scheme == "latin" else 8
    for r in range(2 * block):
        plan = round_order(fewer, 3, PAIR, r, scheme)
        assert plan.seed == round_seed(3, PAIR, r - r % block)
        if scheme == "latin":
            assert plan.shift == r % 4 and not plan.reversed
        else:
            assert plan.shift == (r % 8) // 2 * golden_step(4) % 4 and plan.reversed == (r % 2 == 1)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 37])
def test_a_block_of_2n_balanced_rounds_puts_every_slot_at_every_position_twice(n):
    slots = [f"job-{i}" for i in range(n)]
    for seed in (0, 1, 7):
        for block in range(2):
            seen: dict[str, list[int]] = {s: [] for s in slots}
            for r in range(block * 2 * n, (block + 1) * 2 * n):
                plan = round_order(slots, seed, PAIR, r)
                assert sorted(plan.order) == list(range(n)) and plan.scheme == "balanced"
                assert plan.seed == round_seed(seed, PAIR, block * 2 * n)
                for position, i in enumerate(plan.order):
                    seen[slots[i]].append(position)
            assert all(sorted(p) == sorted(list(range(n)) * 2) for p in seen.values()), seen


@pytest.mark.parametrize("n", [2, 5, 37])
def test_every_pair_of_balanced_rounds_centres_every_slot_and_swaps_every_two(n):
    """After every pair of rounds each slot's positions sum to n − 1 (mean (n − 1) / 2), and any two slots
    ran once in each order: what makes an A/A pair read 1 under a position cost that is linear, at any
    even number of rounds; the cyclic Latin square does not (7 of 37 rounds: the recipes' regime)."""
    slots = [f"job-{i}" for i in range(n)]
    for q in range(3 * n):
        first, second = (round_order(slots, 5, PAIR, r).order for r in (2 * q, 2 * q + 1))
        where = [{slot: p for p, slot in enumerate(order)} for order in (first, second)]
        assert all(where[0][i] + where[1][i] == n - 1 for i in range(n))
        assert second == first[::-1]
    shifts = sorted(round_order(slots, 5, PAIR, 2 * q).shift for q in range(n))
    assert shifts == list(range(n))  # the pairs' rotations visit every shift once per block
    if n == 37:  # the Latin square's 7 rounds leave positions far from centred
        latin = [round_order(slots, 5, PAIR, r, "latin").order for r in range(7)]
        means = [sum(order.index(i) for order in latin) / 7 for i in range(n)]
        assert max(means) - min(means) > n / 2


def test_the_golden_step_is_prime_to_n_and_near_n_over_phi():
    for n in range(1, 80):
        step = golden_step(n)
        assert 1 <= step <= max(1, n - 1) and math.gcd(step, n) == 1
        if n >= 10:
            assert abs(step / n - 0.618) < 0.1, (n, step)
    assert golden_step(37) == 23


def test_the_shuffle_scheme_is_the_earlier_independent_shuffle():
    """``shuffle`` reproduces the orders the launcher wrote before the Latin square (committed sweeps' rows)."""
    slots = ["x", "y", "ar:0123", "z"]
    for r in range(5):
        old = list(slots)
        random.Random(round_seed(2, PAIR, r)).shuffle(old)
        plan = round_order(slots, 2, PAIR, r, "shuffle")
        assert [slots[i] for i in plan.order] == old and plan.seed == round_seed(2, PAIR, r) and plan.shift is None
    with pytest.raises(ValueError, match="scheme"):
        round_order(slots, 2, PAIR, 0, "random")


# ------------------------------------------------------------------- an A/A pair on the virtual clock


@pytest.mark.parametrize("scheme", ["balanced", "latin"])
def test_an_aa_pair_reads_one_when_a_rounds_first_decodes_cost_more(tmp_path, fakes, scheme):
    """Five slots, ten rounds (one balanced block, two Latin blocks): every turn of ``a`` and of its twin pays
    the first-decode penalty equally often, so their per-turn ratios average exactly 1 and their summed times
    differ only by which prompts the penalty fell on (< 1.5 % here, against up to ±12 % with independent
    shuffles)."""
    for seed in SEEDS:
        runs, _ = _sweep(tmp_path / f"s{seed}", seed, scheme)
        summed, per_turn = _aa(runs)
        assert per_turn == pytest.approx(1.0, abs=1e-12), seed
        assert abs(summed - 1.0) < 0.015, (seed, summed)
        positions = {name: sorted(w["position"] for w in run.where.values()) for name, run in runs.items()}
        assert positions["a"] == positions["a_twin"] == sorted(list(range(5)) * 2)


@pytest.mark.parametrize("scheme", ["balanced", "latin"])
def test_an_aa_pair_reads_one_exactly_when_its_prompts_cost_alike(tmp_path, fakes, scheme):
    for seed in SEEDS:
        summed, _ = _aa(_sweep(tmp_path / f"s{seed}", seed, scheme, costs=lambda r: 1.0)[0])
        assert summed == pytest.approx(1.0, abs=1e-12), seed


def _many(folder: Path, seed: int, scheme: str, n_units: int, clock: Clock) -> tuple[float, float]:
    """The recipes' regime: 37 slots (``a``, its twin, ``b``, ``c``, 32 more jobs without a reference and
    the paired AR decode), far fewer rounds than slots; the A/A pair's ratios (``_aa``)."""
    extra = tuple({"name": f"x{i:02d}", "n_units": n_units, "reference": False} for i in range(32))
    runs, _ = _sweep(folder, seed, scheme, n_units=n_units, extra=extra, clock=clock)
    assert {w["size"] for w in runs["a"].where.values()} == {37}
    return _aa(runs)


def test_an_aa_pair_reads_one_at_far_fewer_rounds_than_slots_when_the_cost_drifts_with_the_position(tmp_path, fakes):
    """8 rounds of 37 slots, each position costing 1 % more than the one before (no first-decode penalty, prompts
    alike): the balanced pairs of rounds give the twin and its original the same summed positions, so they read
    1 exactly for every seed; the cyclic Latin square's 8 rotations leave them apart by up to ~20 % (why the
    scheme changed: the committed 7-round recipes' twins read ~1 % fast under it)."""
    latin = []
    for seed in SEEDS:
        summed, _ = _many(tmp_path / f"b{seed}", seed, "balanced", 8, Clock(lambda r: 1.0, penalty=1.0, drift=0.01))
        assert summed == pytest.approx(1.0, abs=1e-12), seed
        summed, _ = _many(tmp_path / f"l{seed}", seed, "latin", 8, Clock(lambda r: 1.0, penalty=1.0, drift=0.01))
        latin.append(abs(summed - 1.0))
    assert sum(off > 0.02 for off in latin) > len(latin) // 2 and max(latin) > 0.1, latin


def test_at_an_odd_number_of_rounds_the_balanced_aa_pair_is_off_by_one_round_at_most(tmp_path, fakes):
    """7 rounds of 37 slots (the recipes' count): the last round has no mirror, so the pair is off by what one
    round's positions can differ, spread over 7 rounds (≤ 36 % / 7 at a 1 % drift per position), against up to
    ~26 % under the Latin square; with the first three decodes 20 % dearer and the prompts of unlike length too,
    within 4 % on every seed, and on average less than half the Latin square's error."""
    bal_offs, lat_offs = [], []
    for seed in SEEDS:
        bal, _ = _many(tmp_path / f"b{seed}", seed, "balanced", 7, Clock(penalty=PENALTY, drift=0.01))
        lat, _ = _many(tmp_path / f"l{seed}", seed, "latin", 7, Clock(penalty=PENALTY, drift=0.01))
        bal_offs.append(abs(bal - 1.0))
        lat_offs.append(abs(lat - 1.0))
    assert max(bal_offs) < 0.04 and sum(bal_offs) < 0.5 * sum(lat_offs), (bal_offs, lat_offs)
    offs = []
    for seed in SEEDS:
        bal, _ = _many(tmp_path / f"c{seed}", seed, "balanced", 7, Clock(lambda r: 1.0, penalty=1.0, drift=0.01))
        offs.append(abs(bal - 1.0))
    assert max(offs) < 0.36 / 7 + 1e-9, offs


def test_independent_shuffles_do_not_balance_an_aa_pair(tmp_path, fakes):
    """The earlier scheme on the same clock: the A/A pair reads off 1 by more than the Latin square's
    bound for most seeds, by more than 5 % for some (why the scheme changed)."""
    off = []
    for seed in SEEDS:
        summed, per_turn = _aa(_sweep(tmp_path / f"s{seed}", seed, "shuffle")[0])
        off.append((abs(summed - 1.0), abs(per_turn - 1.0)))
    assert sum(s > 0.015 for s, _ in off) > len(off) // 2, off
    assert max(s for s, _ in off) > 0.05, off


# ------------------------------------------------------------------- uneven rounds, the warm-up


@pytest.mark.parametrize("scheme", ["balanced", "latin"])
def test_uneven_rounds_follow_the_rule_and_each_round_warms_up_first(tmp_path, fakes, scheme):
    """A job with fewer units (it finishes at round 6) and a resumed job (rounds 0-2 done): each round ran in
    ``round_order`` of the slots present, as its row and its records say; the rounds of one slot set in one
    block never put a slot at one position more often than the block's balance allows (latin: once;
    balanced: twice); one warm-up per round, on the paired AR decode's input, before the round's first decode."""
    folder = tmp_path / "sweep"
    per_block = {"latin": 1, "balanced": 2}[scheme]
    runs, clock = _sweep(folder, 5, scheme, extra=({"name": "short", "n_units": 7, "work": 0.9},
                                                    {"name": "resumed", "n_units": 10, "work": 1.1, "done": (0, 1, 2)}))
    rows = read_order(folder)
    assert [row["round"] for row in rows] == list(range(10))
    blocks: dict[tuple[int, tuple[str, ...]], list[tuple[str, int]]] = {}
    for row in rows:
        r = row["round"]
        present = [n for n, run in runs.items() if r < run.n_units and not (n == "resumed" and r < 3)]
        slots = present + ["ar/a"]
        assert sorted(row["slots"]) == sorted(slots)
        plan = round_order(slots, 5, PAIR, r, scheme)
        assert row["slots"] == [slots[i] for i in plan.order]
        assert (row["scheme"], row["seed"], row["shift"], row["reversed"]) == (scheme, plan.seed, plan.shift,
                                                                              plan.reversed)
        for position, (slot, name) in enumerate(zip(row["slots"], row["order"])):
            assert name.startswith("ar:") if slot == "ar/a" else name == slot
            if slot in runs:
                assert runs[slot].where[r] == {"round": r, "position": position, "size": len(slots),
                                               "seed": plan.seed, "scheme": scheme}
            key = (r // (len(slots) * per_block), tuple(sorted(slots)))
            seen = blocks.setdefault(key, [])
            assert seen.count((slot, position)) < per_block, (r, slot, position)
            seen.append((slot, position))
        assert row["warmed"] == {"decode": "target", "job": "a", "prompt_id": f"p{r}", "turn": 1, "repeat": 0,
                                 "input_tokens": 3, "max_new_tokens": 8, "new_tokens": 8, "wall_ms": 1.0}
    assert fakes == [("a", [1, 2, r]) for r in range(10)]
    log = clock.log
    for r in range(10):
        of_round = [kind for kind, rr, _ in log if rr == r]
        assert of_round[0] == "warm" and of_round.count("warm") == 1 and len(of_round) == len(rows[r]["slots"]) + 1
    assert sorted(runs["resumed"].times) == list(range(3, 10)) and sorted(runs["short"].times) == list(range(7))


def test_a_failed_warm_up_is_noted_and_the_round_goes_on(tmp_path, fakes, monkeypatch):
    def broken(job, ids):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(interleave, "untimed_target", broken)
    runs, _ = _sweep(tmp_path, 0, "latin", n_units=2)
    assert all(len(run.times) == 2 for run in runs.values())
    assert [row["warmed"]["error"] for row in read_order(tmp_path)] == ["RuntimeError: out of memory"] * 2


def test_an_unknown_scheme_is_refused():
    with pytest.raises(ValueError, match="latin"):
        InterleavedSweep([], ".", scheme="williams")


def test_positions_are_balanced_only_by_an_even_count_of_balanced_rounds():
    """``specbench.records.positions_balanced``: what the launcher writes in every summary (``interleave``) and the
    noise floor reads off the records: the balanced scheme at an even number of rounds, nothing else."""
    from specbench.records import positions_balanced

    assert positions_balanced("balanced", 8) and positions_balanced("balanced", 2)
    assert not positions_balanced("balanced", 7) and not positions_balanced("balanced", 0)
    assert not positions_balanced("latin", 8) and not positions_balanced("shuffle", 8)
    assert not positions_balanced(None, 8)
