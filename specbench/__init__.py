"""The core every part shares (configs, models, tasks, records, timing, provenance); imports none of the others."""
