"""Records → frame (``analysis.frame``): the synthetic results folder (``helpers.analysis_fixture``) is what its
builder writes, loaded at any depth with its failed and unfinished jobs kept; a summary fills only what the
records lack; a job's engine tag is the kernels it ran, and an engine every row of a pair shares names no variant."""

from __future__ import annotations

from analysis.frame import complete_only, job_rows, load_records, rows_to_frame

from helpers.analysis_fixture import COMMITTED
from helpers.analysis_records import LLAMA, VICUNA


def test_committed_fixture_matches_builder(results):
    committed = COMMITTED
    built = sorted(p.relative_to(results) for p in results.rglob("*") if p.is_file())
    assert built == sorted(p.relative_to(committed) for p in committed.rglob("*") if p.is_file())
    for rel in built:
        assert (results / rel).read_text() == (committed / rel).read_text(), rel


def test_load_records_finds_nested_jobs_and_keeps_failed_ones(records):
    assert len(records) == 34  # vicuna 5 jobs x 2 + failed 1 + running 1; llama 5 x 2; phi 4 x 3
    assert (records["pair"] == LLAMA).sum() == 10  # sweep2/nested/deeper: any depth
    status = records.groupby("method")["job_status"].agg(set).to_dict()
    assert status["hf_heuristic"] == {"failed"}
    assert status["gammatune_plus"] == {"incomplete"}  # no summary.json yet
    assert len(complete_only(records)) == 32
    ar = records[records["method"].isin(["ar", "ar_offloaded"])]
    assert ar["gamma_init"].isna().all() and ar["draft"].isna().all()  # config's gamma never fills AR
    assert set(ar["ar_cache"]) == {"dynamic", "offloaded"}
    assert set(records.loc[records["pair"] == VICUNA, "target_path"].dropna()) == {"lmsys/vicuna-7b-v1.5"}
    assert set(records["device"].dropna()) == {"cpu"}
    assert isinstance(records["accepted_trace"].iloc[0], list)


def test_summary_config_fills_only_missing_fields():
    config = {"pair": {"name": "p", "target": {"name": "t"}, "draft": {"name": "d"}}, "method": {"name": "m"},
              "task": {"name": "k"}, "gamma": 3, "temperature": 0.5, "max_new_tokens": 9}
    rows = job_rows([{"method": None, "gamma_init": None, "new_tokens": 1}, {"pair": "mine"}],
                    {"config": config, "status": "complete"})
    assert rows[0]["method"] == "m" and rows[0]["gamma_init"] is None and rows[0]["pair"] == "p"
    assert rows[1]["pair"] == "mine" and rows[1]["gamma_init"] == 3 and rows[1]["max_new_tokens"] == 9
    assert rows[0]["job_status"] == "complete"
    assert job_rows([{}], None)[0]["job_status"] == "incomplete"


def test_unreadable_summary_and_torn_line(tmp_path):
    job = tmp_path / "a" / "b"
    job.mkdir(parents=True)
    (job / "records.jsonl").write_text('{"pair": "x", "method": "ar", "new_tokens": 2, "wall_ms": 100}\n{"torn')
    (job / "summary.json").write_text("{not json")
    df = load_records(tmp_path)
    assert len(df) == 1 and df["job_status"].iloc[0] == "unreadable" and df["job_dir"].iloc[0] == "a/b"


def test_a_batched_jobs_engine_tag_is_the_kernels_it_ran():
    """At B > 1 ``engine.fast_linear=auto`` ran the plain kernels before the batched engine took the option and
    the transposed ones after: the tag comes from ``summary.json: engine`` (what ran), for ``ar`` jobs too."""
    config = {"method": {"name": "specdecode", "runner": "speculative"}, "batch_size": 4,
              "engine": {"fast_linear": "auto", "verify_buckets": "auto", "fused_prefill": False}}
    fast = job_rows([{"prompt_id": "a"}], {"config": config, "status": "complete",
                                           "engine": {"fast_linear": "all", "buckets": {}, "fused_prefill": False}})
    plain = job_rows([{"prompt_id": "a"}], {"config": config, "status": "complete",
                                            "engine": {"fast_linear": False, "buckets": {}, "fused_prefill": False}})
    ar = job_rows([{"prompt_id": "a"}], {"config": {**config, "method": {"name": "ar", "runner": "ar"}},
                                         "engine": {"fast_linear": "all", "buckets": {}, "fused_prefill": False}})
    one = job_rows([{"prompt_id": "a"}], {"config": {**config, "batch_size": 1}, "status": "complete"})
    assert fast[0]["engine"] == "fast_linear=all" and ar[0]["engine"] == "fast_linear=all"
    assert plain[0].get("engine") == "plain"  # our loop with every option off: a tag of its own (issue 40)
    assert one[0]["engine"] == "fast_linear=auto,verify_buckets=auto"  # batch 1: the config, as before


def test_a_width_that_ran_tags_the_engine_and_an_automatic_one_that_did_not_leaves_it():
    """``engine.width=auto`` is on for a bf16 target and off for a fp32 one: the tag follows what the summary says
    ran (``summary.json: engine.width``), not the config's word, so the fp32 job keeps the tag it always had."""
    config = {"method": {"name": "specdecode", "runner": "speculative"}, "batch_size": 1,
              "engine": {"fast_linear": "auto", "verify_buckets": "auto", "fused_prefill": False, "width": "auto"}}
    ran = {"fast_linear": False, "buckets": {}, "fused_prefill": False, "graphs": "eager"}
    bf16 = job_rows([{"prompt_id": "a"}], {"config": config, "status": "complete", "engine": {**ran, "width": 8}})
    fp32 = job_rows([{"prompt_id": "a"}], {"config": config, "status": "complete", "engine": ran})
    off = {**config, "engine": {"fast_linear": False, "verify_buckets": False, "fused_prefill": False}}
    plain = job_rows([{"prompt_id": "a"}], {"config": off, "status": "complete", "engine": {**ran, "width": 8}})
    assert bf16[0]["engine"] == "fast_linear=auto,verify_buckets=auto,width=8"
    assert fp32[0]["engine"] == "fast_linear=auto,verify_buckets=auto"
    assert plain[0]["engine"] == "width=8"


def _engine_rows(method: str, engine: dict | None, gamma: int = 2) -> list[dict]:
    config = {"pair": "p", "method": {"name": method, "runner": "speculative"}, "gamma": gamma, "batch_size": 1,
              **({"engine": engine} if engine is not None else {})}
    return job_rows([{"prompt_id": "a", "turn": 1, "new_tokens": 4, "wall_ms": 10.0, "ttft_ms": 1.0}],
                    {"config": config, "status": "complete"})


def test_an_engine_every_row_of_a_pair_shares_names_no_variant():
    """Issue 40, item 0: a sweep run on the default engine (``auto``) labelled every row
    ``specdecode[fast_linear=auto,verify_buckets=auto]``, and Table 2 found no ``specdecode`` baseline. One engine
    shared by every row of a pair is dropped from the keys; two engines in one pair keep their tags."""
    auto = {"fast_linear": "auto", "verify_buckets": "auto", "fused_prefill": False}
    plain = {"fast_linear": False, "verify_buckets": False, "fused_prefill": False}
    one_engine = rows_to_frame(_engine_rows("specdecode", auto) + _engine_rows("gammatune", auto))
    assert set(one_engine["method"]) == {"specdecode", "gammatune"}
    two_engines = rows_to_frame(_engine_rows("specdecode", plain) + _engine_rows("gammatune", auto)
                                + _engine_rows("specdecode", auto, 4))
    assert set(two_engines["method"]) == {"specdecode[plain]", "gammatune[fast_linear=auto,verify_buckets=auto]",
                                          "specdecode[fast_linear=auto,verify_buckets=auto]"}
    # jobs before issue 16 (no engine node) ran the plain kernels: the same engine as an explicit plain one
    legacy = rows_to_frame(_engine_rows("specdecode", None) + _engine_rows("gammatune", plain))
    assert set(legacy["method"]) == {"specdecode", "gammatune"}


def test_a_compiled_draft_tags_the_engine_so_its_rows_never_pool_with_the_eager_drafts():
    """``engine.draft_compile`` drafts with another function (its logits' last bits): its rows carry the tag, and a
    label reads it as it is."""
    from analysis.settings import tag_label

    config = {"method": {"name": "specdecode", "runner": "speculative"}, "batch_size": 1,
              "engine": {"fast_linear": "auto", "verify_buckets": "auto", "fused_prefill": False}}
    eager = job_rows([{"prompt_id": "a"}], {"config": config, "status": "complete"})
    compiled = job_rows([{"prompt_id": "a"}], {"config": {**config, "engine": {**config["engine"],
                                                                                "draft_compile": True}},
                                               "status": "complete"})
    assert eager[0]["engine"] == "fast_linear=auto,verify_buckets=auto"
    assert compiled[0]["engine"] == "fast_linear=auto,verify_buckets=auto,draft_compile"
    assert tag_label("draft_compile") == "draft_compile"
