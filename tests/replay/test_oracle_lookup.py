"""The oracle on a prompt lookup trace (issue 14; ``runners.replay.oracle``): never beaten by the agreement oracle
or by any policy replayed on the same trace."""

from __future__ import annotations

import itertools

from methods.policies import build_policy
from runners.drafters.prompt_lookup import PromptLookupDrafter
from runners.replay.grid import load_method
from runners.replay.replay import replay
from runners.replay.trace_lookup import build_lookup_trace
from specbench.latency import ForwardCost, LatencyModel


def test_lookup_trace_oracle_is_never_beaten(noisy_pair):
    from runners.replay.oracle import agreement_oracle, oracle

    _, target, _, prompts = noisy_pair
    tr = build_lookup_trace(target, PromptLookupDrafter(), prompts[2], 30, [])
    lat = LatencyModel(ForwardCost({k: 10.0 + (15.0 if k == 3 else k) for k in range(1, 31)}, (10.0, 1.0), 0.0, 64,
                                   (5.0, 0.1)), ForwardCost.affine(0.0, 0.0, prefill=(0.0, 0.0)), 0.5, 0.1)
    best = oracle(tr, lat).wall_ms
    assert best <= agreement_oracle(tr, lat).wall_ms + 1e-9
    for name, g in itertools.product(["specdecode", "hf_heuristic", "cost_aware", "smartspec"], (1, 3, 8)):
        assert best <= replay(tr, build_policy(load_method(name).policy, g), lat).wall_ms + 1e-9
