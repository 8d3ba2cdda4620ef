"""An emulated host where the transposed LM head pays (issue 50, item 6): the kernel timings the engine measures
(``runners.engine.fast_linear``: ``probe_costs``, and ``_block_ms`` behind ``fast_linear=auto``) replaced by a
fake clock shaped like the 2-core AMD EPYC's, so a test sees the engine's choices without asserting on real time.

* the LM head: one row of ``F.linear`` costs ``SLOW_ROW_MS`` (54 ms on the EPYC), ``(W·xᵀ)ᵀ`` ``FAST_ROW_MS``
  (20 ms) at any row count it transposes, and ``WIDE_ROWS_MS`` from ``WIDE_ROWS`` rows (a wide block cheaper
  still, which only a probe of at least that many rows sees: a γ-dependent probe found it at large γ only);
* the decoder body: ``10 + 0.5 m`` ms for ``m`` tokens;
* ``fast_linear=auto``: the transposed copy pays.
"""

from __future__ import annotations

import weakref

SLOW_ROW_MS, FAST_ROW_MS, WIDE_ROWS_MS, WIDE_ROWS = 54.0, 20.0, 10.0, 12


def head_ms(executor, rows: int) -> float:
    """The fake cost of ``executor``'s LM head on ``rows`` rows (module docstring)."""
    from runners.engine.linear_kernels import TransposedLinear

    head = executor.get_output_embeddings()
    transposed = isinstance(head, TransposedLinear) and head.min_rows <= rows <= head.max_rows
    if not transposed and rows == 1:
        return SLOW_ROW_MS
    return WIDE_ROWS_MS if rows >= WIDE_ROWS else FAST_ROW_MS


def emulate(monkeypatch) -> dict[str, int]:
    """Install the fake clock (module docstring) and forget this process's measurements; returns the count of
    probes run (``{"probe": n}``)."""
    from runners.engine import fast_linear as vf
    from runners.engine.linear_kernels import TransposedLinear

    calls = {"probe": 0}

    def probe(executor, k_max, context=128, warmup=1, repeats=5):
        calls["probe"] += 1
        return ({m: 10.0 + 0.5 * m for m in range(1, k_max + 1)},
                {r: head_ms(executor, r) for r in range(1, k_max + 1)})

    def block_ms(runs, cache, context, k, warmup=False):
        return 1.0 if isinstance(runs.get_output_embeddings(), TransposedLinear) else 2.0

    monkeypatch.setattr(vf, "probe_costs", probe)
    monkeypatch.setattr(vf, "_block_ms", block_ms)
    for cache in ("_PROBED", "_CHOSEN"):  # a model another test measured for real keeps no real timing here
        monkeypatch.setattr(vf, cache, weakref.WeakKeyDictionary())
    return calls
