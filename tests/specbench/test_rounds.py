"""One record of rounds (specbench.rounds): filled from the outcomes a policy observes, serialised under the
record's field names, read back from a record or a row."""

from __future__ import annotations

import pytest

from methods.base import RoundOutcome
from specbench.records import RECORD_FIELDS, Record
from specbench.rounds import SUMMARY_FIELDS, TRACE_FIELDS, Rounds, per_position, pooled_acceptance


def _filled() -> Rounds:
    rounds = Rounds()
    for outcome in (RoundOutcome(4, 4, 4, (0.9, 0.8, 0.7, 0.6)), RoundOutcome(5, 3, 1, (0.5, 0.1234567, 0.2),
                                                                            discarded=2),
                    RoundOutcome(0, 0, 0)):
        rounds.observe(outcome)
    return rounds


def test_observe_keeps_each_round_as_the_policy_is_told_it():
    r = _filled()
    assert (r.gamma, r.drafted, r.accepted, r.discarded) == ([4, 5, 0], [4, 3, 0], [4, 1, 0], [0, 2, 0])
    assert r.confidences == [[0.9, 0.8, 0.7, 0.6], [0.5, 0.123457, 0.2], []]  # rounded to 6 digits
    assert len(r) == 3 and r.schedule == [(4, 4, 4), (5, 3, 1), (0, 0, 0)]


def test_fields_are_the_records_and_read_back_whole():
    r = _filled()
    f = r.fields()
    assert set(f) == set(TRACE_FIELDS) | set(SUMMARY_FIELDS) and set(f) <= set(RECORD_FIELDS)
    assert (f["rounds"], f["drafted"], f["accepted"]) == (3, 7, 5)
    assert f["acceptance_rate"] == 5 / 7 and f["mean_accepted_per_round"] == 5 / 3
    assert (f["drafted_per_pos"], f["compared_per_pos"], f["accepted_per_pos"]) == ([2, 2, 2, 1], [2, 2, 1, 1],
                                                                                   [2, 1, 1, 1])
    assert f["discarded_trace"] == [0, 2, 0]
    assert Rounds.of(f) == r
    assert Rounds.of(Record(**_record_identity(), **f).__dict__) == r  # through the record's schema


def test_nothing_discarded_is_written_as_an_empty_trace_and_read_back_as_zeros():
    r = Rounds([3, 3], [3, 2], [1, 2])
    assert r.discarded == [0, 0] and r.confidences == [[], []]
    assert r.fields()["discarded_trace"] == [] and Rounds.of(r.fields()) == r
    assert Rounds().fields()["acceptance_rate"] is None and Rounds().fields()["mean_accepted_per_round"] is None


@pytest.mark.parametrize("bad", [dict(gamma=[1, 2], drafted=[1], accepted=[1]),
                                 dict(gamma=[2], drafted=[1], accepted=[2]),
                                 dict(gamma=[2], drafted=[2], accepted=[1], discarded=[0, 0])])
def test_inconsistent_traces_are_refused_in_one_line(bad):
    with pytest.raises(ValueError, match="round"):
        Rounds(**bad)


def test_per_position_and_pooled_acceptance():
    assert per_position([2, 0, 3], [1, 0, 3]) == {"drafted_per_pos": [2, 2, 1], "compared_per_pos": [2, 2, 1],
                                                  "accepted_per_pos": [2, 1, 1]}
    assert pooled_acceptance([Rounds([2], [2], [1]), Rounds([3], [3], [3])]) == 4 / 5
    assert pooled_acceptance([Rounds([0], [0], [0])]) == 0.0


def _record_identity() -> dict:
    return dict(pair="p", target="t", draft="d", method="m", task="k", category="c", prompt_id="1", turn=1,
                gamma_init=4, temperature=0.0, seed=0, prompt_tokens=3, new_tokens=9, output_text="x", output_sha="s",
                stop_reason="max_new_tokens", chat_template=None, ttft_ms=1.0, tpot_ms=1.0, tokens_per_s=1.0,
                wall_ms=9.0)
