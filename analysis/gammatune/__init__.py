"""GammaTune's (Gautam et al.) tables and figures, one module per artefact of the paper:

* ``latency``: Table 1, milliseconds per token of each model decoding alone;
* ``table2``: Table 2, speedup over SpecDecode across initial γ (and its drift-normalised twin);
* ``throughput``: Figure 1, throughput and speedup over AR (a table and a figure), and the
  sensitivity of throughput to the initial γ;
* ``rounds``: Appendix A's acceptance and mean γ, and Figure 2a's per-round trace of one prompt;
* ``knob_sweep``: Table 2 across a policy's knobs (η, δ), from replayed rows.

Each artefact is registered where it is defined (``analysis.artefacts``); ``python -m analysis --list``
names them all.
"""
