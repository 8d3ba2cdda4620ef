"""The simulator: greedy traces (``trace``, built by ``trace_build``; ``trace_lookup`` for prompt lookup),
exact replay of any γ policy on them (``replay``), the oracle bounds (``oracle``), grids of methods × initial γ
and their one writer (``grid``), the calibration of the latency model (``latency``; the model itself, and the
rule charging a round, are the core type ``specbench.latency``), the γ-policy lab (``lab``, real runs against
their replay in ``compare``), one CLI (``cli``: ``python -m runners.replay trace | calibrate | grid | lab``).
It writes rows; ``analysis`` renders them."""
