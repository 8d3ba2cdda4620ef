"""Records in, the papers' tables and figures out (``python -m analysis RESULTS_DIR``; ``--list`` names them all).

One module per paper or concept, each artefact registered where it is defined (``analysis.artefacts``,
which the CLI iterates): ``analysis.gammatune`` (GammaTune: Table 1 ``latency``, Table 2 ``table2``,
Figure 1 and the γ sensitivity ``throughput``, Appendix A and Figure 2a ``rounds``, Table 2 across η
and δ ``knob_sweep``); ``analysis.hetero`` (Timor et al.'s heterogeneous-vocabulary tables, hf-bench's
definitions and ours); ``analysis.leviathan`` (Leviathan et al.'s predicted speedup beside the measured
one, cross-vocabulary and fixed γ); ``analysis.policy_lab`` (the replay's oracle table, the γ-policy
leaderboard, acceptance per position); ``analysis.categories`` (Spec-Bench's per-category speedups);
``analysis.time_breakdown`` (where the time goes); ``analysis.drift`` (the host's drift over a sweep,
``host_probe_ms``, and the A/A noise floor).

Shared pieces: ``analysis.frame`` reads the records; ``analysis.metrics`` holds the numbers every
table shares (throughput, speedups, mean ± std, method labels, the one number formatter);
``analysis.uncertainty`` is the one definition of the 95 % confidence intervals (a paired, t-calibrated
delete-one-cluster jackknife over prompt turns, batches joined) and of when a ranking is resolved; ``analysis.settings`` says what a row is (every
method knob off its default, as the record's own ``method_key`` says) and which settings split a scenario, so no table pools
runs whose settings differ; ``analysis.render`` writes Markdown, LaTeX and CSV from the same frame and
PNG + PDF; ``analysis.paper`` holds the papers' own numbers (``analysis/data/paper_numbers.csv``);
``analysis.wandb_source`` rebuilds the frame from a W&B project. Imports only ``specbench``.
"""
