"""The simulator: greedy traces (``trace``), exact replay of any γ policy on them and the oracle
bounds (``replay``), the latency model and its calibration (``latency``), one CLI (``cli``:
``python -m runners.replay trace | calibrate | grid``). It writes rows; ``analysis`` renders them."""
