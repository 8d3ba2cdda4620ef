"""The field's stoppers (issue 14, the γ-policy lab): AdaEDL, SVIP, the confidence and the margin stops each fire
exactly at their boundary (``methods/adaedl.py``, ``svip.py``, ``max_confidence.py``, ``logit_margin.py``), and
never on a drafter without features."""

from __future__ import annotations

import pytest

from methods.adaedl import AdaEDL
from methods.base import DraftStep
from methods.logit_margin import LogitMargin
from methods.max_confidence import MaxConfidence
from methods.svip import SVIP


def step(**features) -> DraftStep:
    return DraftStep(1, **features)


def test_stoppers_fire_exactly_at_their_boundaries():
    ada = AdaEDL(8)  # 1 - sqrt(0.2 H) < 0.7  <=>  H > 0.45
    assert not ada.stop_drafting(step(entropy=0.4499)) and ada.stop_drafting(step(entropy=0.4501))
    assert ada.lower_bound(step(entropy=0.45)) == pytest.approx(0.7)
    svip = SVIP(8)  # sqrt(H) > 0.5  <=>  H > 0.25
    assert not svip.stop_drafting(step(entropy=0.2499)) and svip.stop_drafting(step(entropy=0.2501))
    mc = MaxConfidence(8)
    assert mc.stop_drafting(step(confidence=0.4999)) and not mc.stop_drafting(step(confidence=0.5))
    lm = LogitMargin(8)
    assert lm.stop_drafting(step(margin=0.2999)) and not lm.stop_drafting(step(margin=0.3))
    for p in (ada, svip, mc, lm):  # a drafter without features (prompt lookup) never triggers a stop
        assert not p.stop_drafting(DraftStep(3)) and p.next_gamma() == 8 and p.needs
