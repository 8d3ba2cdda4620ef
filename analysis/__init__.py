"""Records in, the papers' tables and figures out (``python -m analysis RESULTS_DIR``).

Pure functions from the records frame (``analysis.frame.load_records``) to a table
(``analysis.tables``, ``analysis.breakdowns``) or a figure (``analysis.figures``);
``analysis.render`` writes Markdown, LaTeX and CSV from the same frame and PNG + PDF;
``analysis.paper`` holds the papers' own numbers (``analysis/data/paper_numbers.csv``);
``analysis.wandb_source`` rebuilds the frame from a W&B project. Imports only ``specbench``.
"""
