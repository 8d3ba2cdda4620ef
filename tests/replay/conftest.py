"""Fixtures of the replay's tests."""

from __future__ import annotations

import pytest

from runners.replay.trace_build import build_trace


@pytest.fixture(scope="module")
def traces(noisy_pair):
    _, target, draft, prompts = noisy_pair
    return [build_trace(target, draft, ids, 24, [], prompt_id=str(i), pair="tiny", task="t") for i, ids in
            enumerate(prompts)]
