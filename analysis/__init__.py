"""Records in, the papers' tables and figures out (``python -m analysis RESULTS_DIR``).

Pure functions from the records frame (``analysis.frame.load_records``) to a table
(``analysis.tables``, ``analysis.breakdowns``) or a figure (``analysis.figures``);
``analysis.render`` writes Markdown, LaTeX and CSV from the same frame and PNG + PDF;
``analysis.paper`` holds the papers' own numbers (``analysis/data/paper_numbers.csv``);
``analysis.wandb_source`` rebuilds the frame from a W&B project. ``analysis.uncertainty`` is the one
definition of the 95 % confidence intervals (a paired bootstrap over prompt turns) and of when a
ranking is resolved, used by every table and figure; ``analysis.drift`` reports the host's drift
(``host_probe_ms``), the drift-normalised alternative and the A/A noise floor. ``analysis.settings`` says
what a row is (every method knob off its ``conf/method`` default) and which settings split a scenario, so
no table pools runs whose settings differ; ``analysis.knob_sweep`` lays Table 2 out across a policy's
knobs from replayed rows. Imports only ``specbench``.
"""
