"""The simulator: greedy traces (``trace``), exact replay of any γ policy on them and the oracle
bounds (``replay``), the calibration of the latency model (``latency``; the model itself, and the
rule charging a round, are the core type ``specbench.latency``), one CLI (``cli``:
``python -m runners.replay trace | calibrate | grid``). It writes rows; ``analysis`` renders them."""
