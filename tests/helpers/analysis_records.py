"""What several analysis test modules share: the synthetic results folder's pair names
(``helpers.analysis_fixture``; ``tests/analysis/conftest.py`` builds the folder) and one record row with the
fields the tables read (``record_row``), for frames built by hand."""

from __future__ import annotations

VICUNA = "vicuna-7b_vicuna-68m"
LLAMA = "llama-3.1-8b-instruct_llama-3.2-1b-instruct"


def record_row(**kw):
    base = {"pair": "p", "target": "t", "draft": "d", "method": "gammatune", "task": "k", "category": "c",
            "prompt_id": "x", "turn": 0, "gamma_init": 2, "temperature": 0.0, "new_tokens": 10, "wall_ms": 100.0,
            "tokens_per_s": 100.0, "ttft_ms": 10.0}
    return {**base, **kw}
