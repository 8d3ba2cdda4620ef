"""Every bad input gets a clear one-line error before work starts, and leaves nothing behind (issue 17).

One test per kind of bad input users really produce, through ``run.py``'s job entry point
(``runners.jobs.run_one.run_cli_job``: what ``run.py`` calls after Hydra composed the config), plus a
property-based test that throws generated bad configs and data files at it and asserts: exit status
2, one ERROR line that names the offending key or file, no traceback, no job folder.
"""

from __future__ import annotations

import json
import logging
import string
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from runners.jobs.run_one import run_cli_job

from helpers import ROOT, compose


def _run(cfg, job_dir, caplog, capsys) -> tuple[int, list[str]]:
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="specbench"):
        code = run_cli_job(cfg, job_dir)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    out = capsys.readouterr()
    assert "Traceback" not in out.err + out.out
    return code, errors


def _refused(cfg, tmp_path, caplog, capsys, *names: str) -> str:
    job_dir = tmp_path / "results" / "job"
    job_dir.mkdir(parents=True, exist_ok=True)  # Hydra creates the job folder before the job runs
    code, errors = _run(cfg, job_dir, caplog, capsys)
    assert code == 2
    assert len(errors) == 1 and "\n" not in errors[0], errors
    for name in names:
        assert name in errors[0], (name, errors[0])
    assert not job_dir.exists()  # nothing left behind
    return errors[0]


def _tiny_cfg(tiny_conf, *overrides: str):
    cfg = compose("warmup=0", "verify_lossless=false", *overrides)
    cfg.pair = OmegaConf.load(tiny_conf / "pair" / "tiny.yaml")
    return cfg


def _rows(tmp_path, rows: list[dict], name: str = "prompts.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# ----------------------------------------------------------------------------- the table of the issue


@pytest.mark.parametrize("encoding", ["utf-16", "binary"])
def test_a_data_file_that_is_not_utf8(tmp_path, caplog, capsys, encoding):
    path = tmp_path / "prompts.jsonl"
    if encoding == "binary":
        path.write_bytes(bytes(range(256)) * 4)
    else:
        path.write_text('{"prompt": "héllo"}\n', encoding="utf-16")
    msg = _refused(compose("task=custom", f"task.data_files={path}"), tmp_path, caplog, capsys, str(path))
    assert ("UTF-16" if encoding == "utf-16" else "not UTF-8") in msg


def test_a_target_path_that_is_no_folder_and_no_hub_id(tmp_path, caplog, capsys):
    msg = _refused(compose("pair.target.path=/no/such/folder"), tmp_path, caplog, capsys, "pair.target.path")
    assert "no local folder /no/such/folder and not a valid Hub id" in msg


def test_an_empty_prompt_names_its_row(tmp_path, caplog, capsys):
    path = _rows(tmp_path, [{"id": "a", "prompt": "hello"}, {"id": "b", "prompt": "  "}])
    _refused(compose("task=custom", f"task.data_files={path}"), tmp_path, caplog, capsys, "prompt 'b'", "empty")


def test_a_prompt_longer_than_the_context_is_refused_or_truncated_when_asked(tiny_conf, tmp_path, caplog, capsys):
    path = _rows(tmp_path, [{"id": "long", "prompt": "the quick brown fox " * 200}])  # > 512 positions
    cfg = _tiny_cfg(tiny_conf, "task=custom", f"task.data_files={path}", "max_new_tokens=8")
    msg = _refused(cfg, tmp_path, caplog, capsys, "prompt 'long'", "512", "task.truncate")
    assert "tokens" in msg
    job_dir = tmp_path / "ok"
    cfg = _tiny_cfg(tiny_conf, "task=custom", f"task.data_files={path}", "max_new_tokens=8", "task.truncate=left")
    assert run_cli_job(cfg, job_dir) == 0
    record = json.loads((job_dir / "records.jsonl").read_text().splitlines()[0])
    assert record["prompt_tokens"] == 512 - 8 and record["extra"]["truncated_tokens"] > 0
    assert record["extra"]["truncated"] == "left"


def test_max_new_tokens_beyond_the_models_positions(tiny_conf, tmp_path, caplog, capsys):
    msg = _refused(_tiny_cfg(tiny_conf, "max_new_tokens=100000"), tmp_path, caplog, capsys, "max_new_tokens=100000")
    assert "512 positions" in msg


@pytest.mark.slow
def test_run_py_itself_exits_2_with_one_line_and_no_folder(tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text('{"prompt": "x"}\n', encoding="utf-16")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "run.py"), "task=custom", f"task.data_files={path}", f"results_dir={tmp_path / 'r'}"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )
    assert proc.returncode == 2
    out = proc.stdout + proc.stderr
    errors = [line for line in out.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and str(path) in errors[0] and "Traceback" not in out
    assert not any(p.is_file() for p in (tmp_path / "r").rglob("*")) if (tmp_path / "r").exists() else True


# ----------------------------------------------------------------------------- property-based

WORD = st.text(alphabet=string.ascii_lowercase, min_size=1, max_size=8)
NOT_POSITIVE = st.integers(min_value=-5, max_value=0)


def _key_value():
    """(override, words that the error must name): a bad value for a key our validation checks."""
    return st.one_of(
        st.tuples(st.sampled_from(["gamma", "max_new_tokens"]), st.one_of(NOT_POSITIVE.map(str), WORD)),
        st.tuples(st.just("temperature"), st.one_of(st.integers(-9, -1).map(str), WORD)),
        st.tuples(st.sampled_from(["warmup"]), st.one_of(st.integers(-9, -1).map(str), WORD)),
        st.tuples(st.sampled_from(["threads"]), NOT_POSITIVE.map(str)),
        st.tuples(st.sampled_from(["verify_lossless", "overwrite"]), WORD.filter(lambda w: w not in ("true", "false"))),
        st.tuples(st.sampled_from(["task.n_prompts", "task.per_category"]), st.one_of(NOT_POSITIVE.map(str), WORD)),
        st.tuples(st.just("task.prompt_format"), WORD.filter(lambda w: w not in ("auto", "chat_template", "plain"))),
        st.tuples(st.just("task.truncate"), WORD.filter(lambda w: w not in ("left", "right", "null"))),
        st.tuples(st.sampled_from(["pair.target.dtype", "pair.draft.dtype"]),
                  WORD.filter(lambda w: w not in ("float32", "float16", "bfloat16", "auto"))),
        st.tuples(st.sampled_from(["pair.target.quant", "pair.target.transform"]), WORD.filter(lambda w: w != "null")),
        st.tuples(st.sampled_from(["pair.target.path", "pair.draft.path"]), WORD.map(lambda w: f"/nonexistent/{w}")),
        st.tuples(st.just("hetero.name"), WORD.filter(lambda w: w not in ("auto", "none", "slem", "tli", "slrs", "union"))),
    ).map(lambda kv: (f"{kv[0]}={kv[1]}", [_named(kv[0])]))


def _named(key: str) -> str:
    """The word an error about ``key`` must contain: its last part (``task.n_prompts`` → ``n_prompts``),
    or its group for a ``name`` (``hetero.name`` → ``hetero``)."""
    parts = key.split(".")
    return parts[-2] if parts[-1] == "name" else parts[-1]


BAD_ROWS = st.one_of(
    st.binary(min_size=1, max_size=64).filter(lambda b: not _is_utf8(b)),
    WORD.map(lambda w: w.encode("utf-16")),
    WORD.map(lambda w: (json.dumps({"text": w}) + "\n").encode()),  # no prompt field
    st.sampled_from([b'{"prompt": ""}\n', b'{"prompt": "   "}\n', b"not json\n", b"[1, 2]\n"]),
)


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True,
          phases=[Phase.explicit, Phase.generate])  # no shrinking: the failing example is reported as drawn
@given(case=st.one_of(_key_value().map(lambda c: ("key", c)), BAD_ROWS.map(lambda b: ("file", b))))
def test_generated_bad_inputs_fail_cleanly(case, tmp_path_factory, caplog, capsys):
    tmp = tmp_path_factory.mktemp("bad")
    kind, value = case
    if kind == "key":
        override, names = value
        cfg = compose(override)
    else:
        path = tmp / "rows.jsonl"
        path.write_bytes(value)
        cfg = compose("task=custom", f"task.data_files={path}")
        names = [str(path)] if not value.strip().startswith(b"{") else ["prompt"]
    _refused(cfg, tmp, caplog, capsys, *names)
