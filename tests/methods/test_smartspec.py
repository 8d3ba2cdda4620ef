"""SmartSpec (issue 14, the γ-policy lab; ``methods/smartspec.py``): γ = argmax of the predicted goodput over the
cost table, a plain target step when speculation cannot pay, a probe round after ``probe`` of them."""

from __future__ import annotations

import pytest

from methods.base import RoundOutcome
from methods.smartspec import SmartSpec, expected_tokens

from helpers.policy_lab import latency_json


def test_smartspec_maximises_predicted_goodput_and_can_step_plainly(tmp_path):
    table = {1: 10.0, 2: 16.0, 3: 30.0, 4: 14.0, 5: 15.0, 6: 40.0, 7: 17.0, 8: 18.0, 9: 19.0}
    p = SmartSpec(3, latency=latency_json(tmp_path, table, 1.0, 0.5))
    assert p.next_gamma() == 3  # the first round plays the initial γ
    p.observe(RoundOutcome(3, 3, 2))
    alpha = 2 / 3
    want = max(range(9), key=lambda k: (expected_tokens(alpha, k) / (k + table[k + 1] + 0.5), -k))
    assert p.alpha == pytest.approx(alpha) and p.next_gamma() == want
    assert expected_tokens(1.0, 4) == 5 and expected_tokens(0.0, 4) == 1
    for _ in range(8):  # nothing is ever accepted: speculation does not pay, γ = 0 ...
        p.observe(RoundOutcome(4, 4, 0))
    assert p.next_gamma() == 0
    for _ in range(p.probe):
        p.observe(RoundOutcome(0, 0, 0))
    assert p.next_gamma() >= 1  # ... until a probe round after `probe` plain steps
