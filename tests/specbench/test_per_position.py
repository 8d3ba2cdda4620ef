"""Per-position acceptance (``specbench.rounds.per_position``; issue 14): drafted, compared and accepted counts at
each draft position, checked by hand."""

from __future__ import annotations

from specbench.rounds import per_position


def test_per_position_counts_hand_checked():
    pp = per_position([3, 0, 2, 4], [1, 0, 2, 4])
    assert pp == {"drafted_per_pos": [3, 3, 2, 1], "compared_per_pos": [3, 3, 1, 1], "accepted_per_pos": [3, 2, 1, 1]}
    assert per_position([], []) == {"drafted_per_pos": [], "compared_per_pos": [], "accepted_per_pos": []}
