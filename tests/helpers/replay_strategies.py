"""Hypothesis strategies for the replay's property tests (synthetic traces, affine costs, any policy), shared by
``tests/replay/test_replay.py`` and ``test_batched_replay.py`` (no test module imports another)."""

from __future__ import annotations

from hypothesis import strategies as st

from runners.replay.trace import Trace
from specbench.latency import BatchCosts, ForwardCost, LatencyModel

EOS = 0


@st.composite
def synthetic_traces(draw):
    """Random target outputs, agreement flags, confidences and tails (with EOS), gamma_max >= M."""
    n = draw(st.integers(1, 12))
    ends_eos = draw(st.booleans())
    m = n + draw(st.integers(1, 3)) if ends_eos else n
    x = [draw(st.integers(1, 4)) for _ in range(n)]
    if ends_eos:
        x[-1] = EOS
    conf = st.floats(0.0, 1.0, allow_nan=False)
    draft_next, draft_conf, tails = [], [], {}
    for t in range(1, n):
        match = draw(st.booleans())
        tok = x[t] if match else draw(st.sampled_from([v for v in range(5) if v != x[t]]))
        c = draw(conf)
        draft_next.append(tok)
        draft_conf.append(c)
        length = m - 1 - t
        if not match and length > 0:
            toks, confs = [tok], [c]
            while len(toks) < length and toks[-1] != EOS:
                toks.append(draw(st.integers(0, 4)))
                confs.append(draw(conf))
            tails[t] = (toks, confs)
    return Trace(prompt_id="s", turn=1, prompt_tokens=draw(st.integers(1, 6)), max_new_tokens=m, gamma_max=m,
                 eos=(EOS,), tokens=x, draft_next=draft_next, draft_conf=draft_conf, tails=tails)


@st.composite
def affine_latency(draw):
    """Random affine costs, T_target(k) and T_draft(k) nondecreasing in k and in the context."""
    f = st.floats(0.0, 20.0, allow_nan=False)
    small = st.floats(0.0, 2.0, allow_nan=False)
    return LatencyModel.affine(target=(draw(f), draw(small)), draft=(draw(f), draw(small)),
                               round_overhead_ms=draw(small), ar_overhead_ms=draw(small),
                               context=(draw(st.floats(0, 0.2)), draw(st.floats(0, 0.2))),
                               target_prefill=(draw(f), draw(small)), draft_prefill=(draw(f), draw(small)))


def policy_strategy():
    gammas = st.integers(1, 8)
    thr = st.floats(0.0, 1.0, allow_nan=False)
    return st.one_of(
        st.builds(lambda g: ("fixed", g, {}), gammas),
        st.builds(lambda g, tr: ("hf_heuristic", g, {"transient": tr}), gammas, st.booleans()),
        st.builds(lambda g, t: ("assistant_threshold", g, {"threshold": t}), gammas, thr),
        st.builds(lambda g, e, d, tr: ("gammatune", g, {"eta": e, "delta": d, "transient": tr}),
                  gammas, st.floats(0.05, 1.0), st.floats(0.0, 3.0), st.booleans()),
        st.builds(lambda g, e, t: ("gammatune_plus", g, {"eta": e, "threshold": t}), gammas, st.floats(0.05, 1.0), thr),
        st.builds(lambda g, tr, w: ("cost_aware", g, {"transient": tr, "prior_weight": w}), gammas, st.booleans(),
                  st.floats(0.1, 10.0)),
        st.builds(lambda g, k: ("smartspec", g, {"k_max": k}), gammas, st.integers(1, 8)),
        st.builds(lambda g, a: ("banditspec", g, {"algorithm": a}), gammas, st.sampled_from(["ucb", "exp3"])),
        st.builds(lambda g, t: ("max_confidence", g, {"threshold": t}), gammas, thr),
        st.builds(lambda g: ("tapout", g, {}), gammas),
    )


def batched_latency() -> LatencyModel:
    """Forwards dearer with every row (hand-made): batch 2 and 4 measured, 3 interpolated."""
    def costs(scale: float) -> BatchCosts:
        return BatchCosts(ForwardCost.affine(10.0 * scale, 1.0 * scale, 0.01, (5.0 * scale, 0.2 * scale)),
                          ForwardCost.affine(2.0 * scale, 0.3 * scale, 0.0, (1.0 * scale, 0.05 * scale)),
                          0.2 * scale, 0.1 * scale)
    one = costs(1.0)
    return LatencyModel(one.target, one.draft, one.round_overhead_ms, one.ar_overhead_ms, {"pair": "tiny"},
                        {2: costs(1.5), 4: costs(2.4)})
