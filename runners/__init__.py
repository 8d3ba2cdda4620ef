"""Everything that decodes, in three rooms (imports point down this list, checked by import-linter):

* ``runners.jobs`` — orchestration: a validated config in, models loaded, prompts decoded, one record
  per prompt turn and a summary on disk (``run.py`` calls it);
* ``runners.replay`` — the simulator: greedy traces, exact replay of any γ policy on them, the
  oracle and the latency model's calibration (the model: ``specbench.latency``), with one CLI
  (``python -m runners.replay``); it writes rows, and ``analysis`` renders them;
* ``runners.drafters`` — what proposes draft tokens, one proposer per file (a same-vocabulary
  model, prompt lookup, SLEM / TLI across vocabularies);
* ``runners.engine`` — the timed loops: prefill, draft, verify in one target forward, accept,
  crop caches (``SpeculativeRunner``, ``AutoregressiveRunner``) and transformers' own assisted
  generation as a peer (``HFAssistedRunner``).
"""
