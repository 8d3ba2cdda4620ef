"""No table pools runs whose settings differ (issue 28, items 1 and 6): every method knob off its
default is part of a row's identity and label, scenarios split by every setting that changes what
is measured, and several results folders (hf-bench's two temperatures) are analysed as one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

from analysis.frame import load_records, rows_to_frame, scenarios, variant_key
from analysis.gammatune.table2 import speedup_table
from analysis.hetero import rule_method
from analysis.make_artefacts import main
from analysis.metrics import method_label
from analysis.settings import setting_partitions
from specbench.config.method import method_defaults as yaml_method_defaults
from specbench.config.method import method_key
from specbench.paths import CONF_DIR

from helpers.analysis_fixture import COMMITTED


def _record(**kw):
    base = {"pair": "p", "target": "t", "draft": "d", "method": "gammatune", "task": "k", "category": "c",
            "prompt_id": "x", "turn": 1, "gamma_init": 2, "temperature": 0.0, "new_tokens": 10, "wall_ms": 100.0,
            "tokens_per_s": 100.0, "ttft_ms": 10.0, "prompt_format": "vicuna_v1.1", "max_new_tokens": 40}
    return {**base, **kw}


def _sweep(method_params: dict[str, dict], gammas=(2, 4)) -> pd.DataFrame:
    """SpecDecode and each (method, params) at every γ on two prompts; GammaTune's wall time
    depends on its params so a pooled row would be visible as a blend."""
    rows = []
    for g in gammas:
        for prompt in ("a", "b"):
            rows.append(_record(method="specdecode", gamma_init=g, prompt_id=prompt, wall_ms=100.0))
            for i, (method, params) in enumerate(method_params.items()):
                name = method.split("#")[0]
                rows.append(_record(method=name, method_params=params, gamma_init=g, prompt_id=prompt,
                                    wall_ms=80.0 - 20.0 * i))
    return rows_to_frame(rows)


def test_two_values_of_one_knob_are_two_rows():
    df = _sweep({"gammatune#a": {"eta": 0.25}, "gammatune#b": {"eta": 0.5}})
    assert sorted(df["method"].unique()) == ["gammatune", "gammatune[eta=0.5]", "specdecode"]
    table = speedup_table(df)
    measured = table.data[(table.data["source"] == "measured") & (table.data["pair"] == "p")]
    cells = dict(zip(measured["method"], measured["mean"], strict=True))
    assert cells["gammatune"] == pytest.approx(100 / 80)  # η = 0.25 alone: 10 tokens / 80 ms vs 10 / 100
    assert cells["gammatune[eta=0.5]"] == pytest.approx(100 / 60)  # η = 0.5 alone: 10 / 60 ms
    assert {"GammaTune", "GammaTune (η = 0.5)"} <= set(table.display["Method"])


def test_every_knob_of_the_readme_sweep_makes_its_own_row():
    """``python run.py -m method=gammatune method.eta=0.25,0.5 method.delta=1,2`` gives four rows."""
    df = _sweep({f"gammatune#{e}{d}": {"eta": e, "delta": d} for e in (0.25, 0.5) for d in (1, 2)})
    keys = sorted(k for k in df["method"].unique() if k != "specdecode")
    assert keys == ["gammatune", "gammatune[delta=1]", "gammatune[eta=0.5,delta=1]", "gammatune[eta=0.5]"]
    assert method_label("gammatune[eta=0.5,delta=1]") == "GammaTune (η = 0.5, δ = 1)"


def test_knobs_at_their_defaults_do_not_split():
    defaults = yaml.safe_load((CONF_DIR / "method" / "gammatune.yaml").read_text())
    full = {k: v for k, v in defaults.items() if k not in ("name", "runner", "policy", "display")}  # display: no knob
    df = _sweep({"gammatune#full": full, "gammatune#empty": {}, "gammatune#float": {"delta": 2.0, "eta": 0.25}})
    assert sorted(df["method"].unique()) == ["gammatune", "specdecode"]
    assert yaml_method_defaults("gammatune") == full  # the job keys by one place: the method's own YAML
    assert method_key("hf_heuristic_carryover", {"transient": False}) == "hf_heuristic_carryover"  # its default
    assert method_key("assistant_threshold", {"threshold": 0.4, "adaptive_threshold": False}) == "assistant_threshold"
    assert method_key("assistant_threshold", {"threshold": 0.2}) == "assistant_threshold[threshold=0.2]"
    assert method_label("assistant_threshold[threshold=0.2]") == "AssistantThreshold (τ = 0.2)"


def test_labels_of_engine_options_and_legacy_tags_are_kept():
    engine = "fast_linear=all,fused_prefill"
    assert variant_key(None, "specdecode", {}, engine, None, None) == "specdecode[fast_linear=all,fused_prefill]"
    assert variant_key("specdecode", "specdecode", {}, engine, None, None) == "specdecode[fast_linear=all,fused_prefill]"
    assert method_label("specdecode[fast_linear=all,fused_prefill]") == "SpecDecode (fast_linear=all, fused_prefill)"
    assert method_label("gammatune_plus[carryover,expand=drafted]") == "GammaTune+ (carry-over, expand on A = d)"
    assert method_key("no_such_method", {"eta": 0.9, "transient": False}) == "no_such_method[carryover]"  # no defaults


def test_an_ar_cache_knob_is_a_variant_and_still_ar():
    df = rows_to_frame([_record(method="ar", method_params={"cache": "offloaded"}, ar_cache="offloaded",
                                gamma_init=None),
                        _record(method="ar", method_params={"cache": "dynamic"}, ar_cache="dynamic", gamma_init=None)])
    assert sorted(df["method"]) == ["ar", "ar[cache=offloaded]"]
    from analysis.metrics import is_ar

    assert is_ar(df).all()


def test_cross_vocabulary_knobs_tag_the_rows_that_ran_one():
    rows = rows_to_frame([
        _record(method="specdecode", hetero="slem", hetero_params={"name": "auto", "lookbehind": 5}),
        _record(method="specdecode", hetero="slem", hetero_params={"name": "auto", "lookbehind": 10}, prompt_id="y"),
        _record(method="specdecode", hetero=None, hetero_params={"name": "auto", "lookbehind": 5}, prompt_id="z"),
    ])
    assert list(rows["method"]) == ["specdecode[lookbehind=5]", "specdecode", "specdecode"]
    assert method_label("slem+specdecode[lookbehind=5]") == "SLEM + SpecDecode (look-behind = 5)"
    # the heterogeneous tables' rows: the rule that ran with its knob, the fixed γ not named as another method
    assert method_label(rule_method("specdecode[max_nodes=8]", "slrs")) == "SLRS (max_nodes = 8)"
    assert method_label(rule_method("specdecode", "slrs")) == "SLRS"
    assert method_label(rule_method("gammatune[eta=0.5]", "slem")) == "SLEM + GammaTune (η = 0.5)"


def test_scenarios_split_by_every_measured_setting():
    df = rows_to_frame([_record(prompt_id="a", max_new_tokens=40), _record(prompt_id="b", max_new_tokens=64),
                        _record(prompt_id="c", max_new_tokens=64, prompt_format="plain")])
    names = [s for s, _ in scenarios(df)]
    assert names == ["-k-t0-plain-m64", "-k-t0-vicuna_v1.1-m40", "-k-t0-vicuna_v1.1-m64"]
    sampled = rows_to_frame([_record(prompt_id="a", temperature=1.0, top_k=50),
                             _record(prompt_id="b", temperature=1.0, top_k=20)])
    assert [s for s, _ in scenarios(sampled)] == ["-k-t1-topk20", "-k-t1-topk50"]


def test_batch_sizes_are_scenarios_and_old_records_ran_at_batch_one():
    df = rows_to_frame([_record(prompt_id="a"), _record(prompt_id="b", batch_size=1),
                        _record(prompt_id="c", batch_size=4, gamma_mode="shared"),
                        _record(prompt_id="d", batch_size=4, gamma_mode="per_row")])
    parts = {s: sorted(g["prompt_id"]) for s, g in scenarios(df)}
    assert parts == {"-k-t0-b1": ["a", "b"], "-k-t0-b4": ["c", "d"]}
    # a shared γ is a variant of its method, not another scenario: an AR job at B (no γ mode) stays beside both
    assert list(df["method"]) == ["gammatune", "gammatune", "gammatune[batch_gamma=shared]", "gammatune"]
    assert method_label("specdecode[batch_gamma=shared]") == "SpecDecode (shared γ)"
    ar = rows_to_frame([_record(prompt_id="e", method="ar", batch_size=4, gamma_mode=None),
                        _record(prompt_id="c", batch_size=4, gamma_mode="shared")])
    assert len(scenarios(ar)) == 1


def test_processors_are_no_setting_at_temperature_zero():
    df = rows_to_frame([_record(prompt_id="a", top_k=50), _record(prompt_id="b", top_k=None)])
    assert [s for s, _ in scenarios(df)] == [""]


def test_greedy_records_join_every_sampled_protocol():
    both = rows_to_frame([_record(prompt_id="a", top_k=50), _record(prompt_id="b", temperature=1.0, top_k=50)])
    assert [(s, len(p)) for s, p in setting_partitions(both)] == [("", 2)]  # hf-bench: both temperatures, one table
    two = rows_to_frame([_record(prompt_id="a"), _record(prompt_id="b", temperature=1.0, top_k=50),
                         _record(prompt_id="c", temperature=1.0, top_k=20)])
    parts = {s: sorted(p["prompt_id"]) for s, p in setting_partitions(two)}
    assert parts == {"-topk20": ["a", "c"], "-topk50": ["a", "b"]}
    lengths = rows_to_frame([_record(prompt_id="a"), _record(prompt_id="b", max_new_tokens=64)])
    assert [s for s, _ in setting_partitions(lengths)] == ["-m40", "-m64"]


def _split_by_temperature(src: Path, cold: Path, warm: Path) -> None:
    for job in sorted(p for p in src.iterdir() if (p / "summary.json").exists()):
        temperature = json.loads((job / "summary.json").read_text())["config"]["temperature"]
        shutil.copytree(job, (cold if temperature == 0 else warm) / job.name)


def test_two_folders_are_one_analysis(tmp_path, capsys):
    """hf-bench's recipes land a temperature per folder; read together, its example filter drops s3 (< 128
    tokens under AR at T = 0) at T = 1 too, exactly as in one folder holding both."""
    whole = tmp_path / "whole"
    shutil.copytree(COMMITTED / "sweep3", whole)
    cold, warm = tmp_path / "hetero_slem", tmp_path / "hetero_tli"
    _split_by_temperature(whole, cold, warm)
    assert {json.loads(line)["temperature"] for line in
            (next(warm.iterdir()) / "records.jsonl").read_text().splitlines()} == {1.0}
    assert main([str(whole), "--out", str(tmp_path / "one"), "--no-paper"]) == 0
    assert main([str(cold), str(warm), "--no-paper"]) == 0  # default out: <parent>/hetero_slem+hetero_tli/analysis
    both = tmp_path / "hetero_slem+hetero_tli" / "analysis" / "tables"
    one = tmp_path / "one" / "tables"
    table = pd.read_csv(both / "hetero_speedup.data.csv")
    assert sorted(table["temperature"].unique()) == [0.0, 1.0]
    tli = table[table["temperature"] == 1.0]
    assert set(tli["n_kept"]) == {2} and set(tli["n_examples"]) == {3}  # s3 dropped at T = 1 as well
    for name in ("hetero_speedup", "hetero_speedup_ours"):
        assert (both / f"{name}.md").read_text() == (one / f"{name}.md").read_text(), name
    assert main([str(warm), "--out", str(tmp_path / "alone"), "--no-paper"]) == 0
    assert not (tmp_path / "alone" / "tables" / "hetero_speedup.md").exists()  # alone, T = 1 has no AR to divide by
    frame = load_records(cold)
    assert len(frame) and not frame["job_dir"].str.contains("/").any()
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main([str(whole), str(next(whole.iterdir()))])  # a folder inside another: its records would count twice


def test_replayed_knob_sweep_is_table_2_per_knob_value():
    """Replay rows named as the replay names them (``gammatune:eta=0.1``) give Table 2's cells per η, by hand:
    SpecDecode 10 tokens / 100 ms at every γ (100 tokens/s); η = 0.1 at γ 1, 2: 50, 25 ms (2×, 4×) -> 3 ± √2;
    the default η = 0.25 (named plainly): 50 ms at both (2×) -> 2 ± 0."""
    from analysis.gammatune.knob_sweep import parse_label, sweep_from_replay

    walls = {"specdecode": (100.0, 100.0), "gammatune:eta=0.1": (50.0, 25.0), "gammatune": (50.0, 50.0)}
    rows = pd.DataFrame([{"pair": "p", "task": "k", "prompt_id": prompt, "turn": 1, "method": method, "gamma_init": g,
                          "new_tokens": 10, "wall_ms": wall, "tokens_per_s": 10 / wall * 1000, "max_new_tokens": 40}
                         for method, pair_walls in walls.items() for g, wall in zip((1, 2), pair_walls, strict=True)
                         for prompt in ("a", "b")]
                        + [{"pair": "p", "task": "k", "prompt_id": "a", "turn": 1, "method": "oracle", "gamma_init": None,
                            "new_tokens": 10, "wall_ms": 1.0, "tokens_per_s": 1e4, "max_new_tokens": 40}])
    assert parse_label("gammatune_plus:eta=0.5,delta=3") == ("gammatune_plus", {"eta": 0.5, "delta": 3})
    table = sweep_from_replay(rows)
    shown = table.display.set_index("η")
    assert shown.loc["0.1", "p · GammaTune"] == "3.00 ± 1.41×"
    assert shown.loc["0.25", "p · GammaTune"] == "2.00 ± 0.00×"
    assert set(shown["δ"]) == {"2"}  # the default, from conf/method/gammatune.yaml
    assert "sample std (ddof=1) across initial γ" in table.caption
    assert sweep_from_replay(rows[rows["method"] != "gammatune:eta=0.1"]) is None  # no knob swept: no table


def test_a_batched_jobs_throughput_divides_by_the_batchs_wall_not_the_rows_latencies():
    """A row decoded in a batch has its latency as wall_ms; tokens/s over the job is Σ tokens ÷ Σ batch walls
    (each row's batch_share_ms), and the AR side the same share of the paired AR batch."""
    from analysis.metrics import throughput
    from analysis.uncertainty import Bootstrap

    batch = {"batch_size": 2, "batch_index": 0, "batch_rows": 2, "batch_wall_ms": 1000.0, "batch_tokens": 40,
             "ar_batch_wall_ms": 1500.0}
    df = rows_to_frame([
        _record(prompt_id="a", new_tokens=10, wall_ms=600.0, tokens_per_s=10 / 0.6, batch_share_ms=250.0,
                ar_wall_ms=900.0, ar_tokens_per_s=10 / 0.9, **batch),
        _record(prompt_id="b", new_tokens=30, wall_ms=1000.0, tokens_per_s=30.0, batch_share_ms=750.0,
                ar_wall_ms=1500.0, ar_tokens_per_s=20.0, **batch)])
    for pooling in ("pooled", "question", "mean"):
        assert throughput(df, pooling) == pytest.approx(40.0)  # each row: its tokens ÷ its share, 40 tokens/s
    boot = Bootstrap(df, "pooled")
    assert boot.estimate(df).point == pytest.approx(40.0)
    assert boot.estimate(df, ar=True).point == pytest.approx(40 / 1.5)
    single = rows_to_frame([_record(prompt_id="a", new_tokens=10, wall_ms=500.0, tokens_per_s=20.0)])
    assert throughput(single) == pytest.approx(20.0)  # batch 1: as before
