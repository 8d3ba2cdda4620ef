"""``engine.graphs=static`` (issue 52, item 3): the static KV cache, rolled back by position, decodes token for
token what the eager loop's dynamic cache decodes — for every method of our loop and every drafter kind, at
B = 1 and B = 4, greedy and at T = 1 with a seeded generator; Gemma-3's sliding-window layers too. ``captured``
is refused on a CPU model in one line (the capture itself is exercised on a GPU)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from methods import build_policy
from runners.drafters import DrafterContext, build_batched_drafter, build_drafter
from runners.engine import kv
from runners.engine.batch_drafters import PerRowDrafters
from runners.engine.batched import BatchedAutoregressiveRunner, BatchedSpeculativeRunner
from runners.engine.graphs import use_graphs
from runners.engine.kv import PositionCache
from runners.engine.speculative import AutoregressiveRunner, SpeculativeRunner
from runners.engine.verify import Sampling
from specbench.config import EngineConfig, HeteroConfig, MethodConfig
from specbench.registry import ConfigError

from helpers.tiny import tiny_gemma3, tiny_model, tiny_pair, tiny_tokenizer

METHOD_DIR = Path(__file__).resolve().parents[2] / "conf" / "method"
TEXTS = ("the quick brown fox", "one two three four five six seven", "a cat",
         "def add(a, b):\n    return a + b\n translate the sentence")
NEW = 16
HEADROOM = 3  # small: every decode also grows its caches (kv.GrowingStaticLayer)


#: the methods the default suite decodes (the fixed γ, a schedule, a confidence threshold); the others are slow
QUICK_METHODS = ("specdecode", "gammatune", "assistant_threshold")


def _speculative_methods() -> list:
    """Every ``conf/method`` our speculative loop runs (a γ policy); those outside ``QUICK_METHODS`` marked slow."""
    stems = [p.stem for p in sorted(METHOD_DIR.glob("*.yaml"))
             if (c := OmegaConf.load(p)).get("runner") == "speculative" and c.get("policy")]
    return [s if s in QUICK_METHODS else pytest.param(s, marks=pytest.mark.slow) for s in stems]


def _policy(stem: str, gamma: int = 4):
    cfg = MethodConfig.from_mapping(OmegaConf.to_container(OmegaConf.load(METHOD_DIR / f"{stem}.yaml")))
    return build_policy(cfg.policy, gamma, dict(cfg.params))


@pytest.fixture(scope="module")
def pair():
    return tiny_pair(TEXTS, draft="noisy", noise=0.3)


@pytest.fixture(autouse=True)
def _eager_after():
    """A test's models leave with the dynamic cache (``kv.use_static`` is per model object)."""
    yield
    kv._STATIC.clear()
    kv._POOLED.clear()


def _both(models, decode):
    """``decode()`` with the eager (dynamic) cache, then with the static one: both outputs."""
    outs = []
    for graphs in ("eager", "static"):
        for m in models:
            kv.use_static(m, HEADROOM if graphs == "static" else None)
        outs.append(decode())
    return outs


def _rows(batch):
    return [g.tokens for g in batch.rows]


def _decode(target, make_drafter, make_batched, policy, rows, sampling=0.0, seed=None, prompts=None):
    """Greedy (or seeded) decode of ``prompts`` (default: the pair's first ``rows``) at batch 1 (one by one) or B."""
    def gen():
        return torch.Generator().manual_seed(seed) if seed is not None else None

    def run():
        ps = prompts[:rows]
        if rows == 1:
            return [SpeculativeRunner(target, make_drafter(), policy(), [], sampling).generate(p, NEW, gen()).tokens
                    for p in ps]
        policies = [policy() for _ in ps]
        return _rows(BatchedSpeculativeRunner(target, make_batched(), policies, [], sampling).generate(ps, NEW, gen()))
    return run


@pytest.mark.parametrize("rows", [1, 4])
@pytest.mark.parametrize("stem", _speculative_methods())
def test_every_method_decodes_on_the_static_cache_what_it_decodes_on_the_dynamic_one(pair, stem, rows):
    """Every method's YAML, its policy as the job builds it, the draft model: the static cache's greedy output is
    the eager loop's, token for token (and the target's own: the eager loop is lossless)."""
    decode = _decode(pair.target, lambda: build_drafter("model", _ctx(pair)),
                     lambda: build_batched_drafter("model", _ctx(pair)), lambda: _policy(stem), rows,
                     prompts=pair.prompts)
    eager, static = _both((pair.target, pair.draft), decode)
    assert static == eager


def _ctx(pair, kind="model", **extra):
    options = {"max_model_tokens": 3, "min_lookup_tokens": 2} if kind == "hybrid" else {}
    return DrafterContext(target_tokenizer=pair.tok, eos_token_ids=[], target_vocab_size=len(pair.tok),
                          draft_model=pair.draft, draft_tokenizer=pair.tok, options=options, **extra)


@pytest.fixture(scope="module")
def hetero():
    """A pair of two vocabularies: the BPE target and a character-level draft model."""
    char = tiny_tokenizer(kind="char")
    return char, tiny_model(len(char), seed=14)


@pytest.mark.parametrize("rows", [1, 4])
@pytest.mark.parametrize("kind", ["model", "hybrid", "prompt_lookup", "suffix", "slem", "tli", "union", "slrs"])
def test_every_drafter_kind_decodes_on_the_static_cache_what_it_decodes_on_the_dynamic_one(pair, hetero, kind, rows,
                                                                                          monkeypatch):
    """Every drafter kind (its model's cache static too, where it has one; the cross-vocabulary ones on a draft
    of another vocabulary) at B = 1 and B = 4: the static cache's greedy output is the eager loop's."""
    models = [pair.target]
    if kind in ("slem", "tli", "union", "slrs"):
        char, draft = hetero
        ctx = DrafterContext(target_tokenizer=pair.tok, eos_token_ids=[0], target_vocab_size=len(pair.tok),
                             draft_model=draft, draft_tokenizer=char, hetero=HeteroConfig(kind, max_nodes=8))
        models.append(draft)
    else:
        ctx = _ctx(pair, kind)
        models.append(pair.draft)

    decode = _decode(pair.target, lambda: build_drafter(kind, ctx),
                     lambda: build_batched_drafter(kind, ctx) or PerRowDrafters(lambda: build_drafter(kind, ctx)),
                     lambda: build_policy("fixed", 3), rows, prompts=pair.prompts)
    built = []
    monkeypatch.setattr(kv, "PositionCache", lambda model, headroom: built.append(model) or
                        PositionCache(model, headroom))
    eager, static = _both(models, decode)
    assert static == eager
    model_kinds = ("model", "hybrid", "slem", "tli", "union", "slrs")
    assert {id(m) for m in built} == {id(m) for m in models[: 2 if kind in model_kinds else 1]}  # static caches


@pytest.mark.parametrize("rows", [1, 4])
def test_sampled_output_at_t1_is_the_eager_loops_draw_for_draw(pair, rows):
    """T = 1 with a seeded generator: every random decision of the loop and the drafter takes the same numbers,
    so the static cache's sampled tokens are the eager loop's."""
    decode = _decode(pair.target, lambda: build_drafter("model", _ctx(pair)),
                     lambda: build_batched_drafter("model", _ctx(pair)), lambda: build_policy("fixed", 4), rows,
                     sampling=Sampling(1.0), seed=5, prompts=pair.prompts)
    eager, static = _both((pair.target, pair.draft), decode)
    assert static == eager
    assert static != _both((pair.target, pair.draft),  # the draws matter: another seed, another output
                           _decode(pair.target, lambda: build_drafter("model", _ctx(pair)),
                                   lambda: build_batched_drafter("model", _ctx(pair)),
                                   lambda: build_policy("fixed", 4), rows, sampling=Sampling(1.0), seed=6,
                                   prompts=pair.prompts))[1]


@pytest.mark.parametrize("rows", [1, 4])
def test_the_target_alone_decodes_on_the_static_cache_what_it_decodes_on_the_dynamic_one(pair, rows):
    """``method=ar`` (and the reference every job divides by): the same target object takes the same cache kind."""
    def decode():
        if rows == 1:
            return [AutoregressiveRunner(pair.target, []).generate(p, NEW).tokens for p in pair.prompts]
        return _rows(BatchedAutoregressiveRunner(pair.target, []).generate(pair.prompts, NEW))

    eager, static = _both((pair.target,), decode)
    assert static == eager


def test_a_rejection_rolls_the_static_cache_back_by_position(pair, monkeypatch):
    """The rollback is a position: the loop's crops rewind the static tensors in place (same storage), and a
    rollback that left the position where it was would decode something else (the test can fail)."""
    kv.use_static(pair.target, HEADROOM)
    cache = kv.new_cache(pair.target)
    assert isinstance(cache, kv.PositionCache)
    with torch.inference_mode():
        pair.target(input_ids=torch.tensor([pair.prompts[1]]), **kv.cache_arg(pair.target, cache), use_cache=True)
    n = len(pair.prompts[1])
    keys = cache.layers[0].keys.data_ptr()
    kv.crop_to(cache, n - 3)
    assert kv.cache_len(cache) == n - 3 and cache.layers[0].keys.data_ptr() == keys
    kv.use_static(pair.draft, HEADROOM)

    def run():
        return SpeculativeRunner(pair.target, build_drafter("model", _ctx(pair)), build_policy("fixed", 4),
                                 []).generate(pair.prompts[1], NEW).tokens

    good = run()
    assert good == AutoregressiveRunner(pair.target, []).generate(pair.prompts[1], NEW).tokens
    monkeypatch.setattr(kv, "rewind", lambda cache, length: None)
    assert run() != good


def test_the_static_cache_grows_past_its_first_length(pair):
    """Sized by its first forward (its tokens + the headroom), the cache doubles when a sequence outgrows it."""
    kv.use_static(pair.target, 2)
    cache = kv.new_cache(pair.target)
    prompt = pair.prompts[0]
    with torch.inference_mode():
        pair.target(input_ids=torch.tensor([prompt]), **kv.cache_arg(pair.target, cache), use_cache=True)
        assert cache.max_len == len(prompt) + 2
        pair.target(input_ids=torch.tensor([[5, 6, 7]]), **kv.cache_arg(pair.target, cache), use_cache=True)
    assert cache.max_len == 2 * (len(prompt) + 2) and kv.cache_len(cache) == len(prompt) + 3
    assert {layer.keys.shape[2] for layer in cache.layers} == {cache.max_len}



@pytest.mark.parametrize("rows", [1, 4])
def test_gemma3s_sliding_window_layers_are_held_whole_and_masked_by_the_model(rows):
    """A sliding-window layer becomes a full static layer (transformers' ``StaticSlidingWindowLayer`` is a ring a
    rollback by position cannot undo); the model's sliding mask keeps its window: rows longer than the window (8)
    decode what the eager loop decodes."""
    target, draft = tiny_gemma3(1), tiny_gemma3(1)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(torch.randn_like(p) * 0.003)
    prompts = [list(range(3, 20)), [5, 6, 7], list(range(10, 22)), [9]]
    ctx = DrafterContext(target_tokenizer=None, eos_token_ids=[], target_vocab_size=64, draft_model=draft)
    decode = _decode(target, lambda: build_drafter("model", ctx), lambda: build_batched_drafter("model", ctx),
                     lambda: build_policy("fixed", 4), rows, prompts=prompts)
    eager, static = _both((target, draft), decode)
    assert static == eager
    kv.use_static(target, HEADROOM)
    assert all(type(layer) is kv.GrowingStaticLayer for layer in kv.new_cache(target).layers)


def test_captured_is_refused_on_a_cpu_model_in_one_line(pair):
    with pytest.raises(ConfigError, match="engine.graphs=captured replays CUDA graphs, but a model runs on cpu"):
        use_graphs("captured", (pair.target, None), NEW)
    use_graphs("static", (pair.target, None), NEW)
    assert isinstance(kv.new_cache(pair.target), kv.PositionCache)
    use_graphs("eager", (pair.target,), NEW)
    assert not isinstance(kv.new_cache(pair.target), kv.PositionCache)


def test_the_option_is_typed():
    assert EngineConfig.from_mapping({}).graphs == "eager"
    assert EngineConfig.from_mapping({"graphs": "static"}).graphs == "static"
    with pytest.raises(ConfigError, match="engine.graphs 'graph' is not one of eager, static, captured"):
        EngineConfig.from_mapping({"graphs": "graph"})


def _job(tiny_conf: Path, *overrides: str) -> dict:
    import yaml

    from helpers import compose

    cfg = OmegaConf.to_container(compose("task.n_prompts=2", "max_new_tokens=8", "warmup=0", *overrides), resolve=True)
    cfg["pair"] = yaml.safe_load((tiny_conf / "pair" / "tiny.yaml").read_text())
    return cfg


@pytest.mark.parametrize("batch", [1, 2])
def test_a_static_job_names_its_cache_and_its_target_alone_runs_on_it(tiny_conf, tmp_path, batch):
    """``engine.graphs=static`` at the job level: the speculative job and the target alone it divides by decode on
    static caches (the baseline rule), the records are lossless, and the summary, the records and the baseline
    name the cache kind."""
    from runners.jobs.job import run_job
    from specbench.record_io import read_records

    alone: list[int | None] = []  # the static headroom of the target alone's model at each of its decodes
    with pytest.MonkeyPatch.context() as mp:
        for runner in (AutoregressiveRunner, BatchedAutoregressiveRunner):
            def spy(self, *args, _generate=runner.generate, **kwargs):
                alone.append(kv.static_headroom(self.target))
                return _generate(self, *args, **kwargs)

            mp.setattr(runner, "generate", spy)
        summary = run_job(_job(tiny_conf, "method=specdecode", "engine.graphs=static", f"batch_size={batch}"),
                          tmp_path / "static", progress=False)
    records = read_records(tmp_path / "static" / "records.jsonl")
    assert summary["engine"]["graphs"] == "static" and summary["baseline"]["kernels"]["graphs"] == "static"
    assert all(r["lossless"] is True and r["kernels"]["graphs"] == "static" for r in records)
    assert alone and all(h is not None for h in alone)  # the baseline rule: the target alone on a static cache
    with pytest.raises(ConfigError, match="engine.graphs=static: method 'hf_native_heuristic' runs transformers' generate"):
        run_job(_job(tiny_conf, "method=hf_native_heuristic", "engine.graphs=static"), tmp_path / "hf", progress=False)


@pytest.mark.parametrize("batch", [1, 2])
def test_a_job_on_onednns_kernels_and_the_static_cache_is_lossless(tiny_conf, tmp_path, batch):
    """``engine.fast_linear=onednn`` with ``engine.graphs=static`` at the job level, at batch 1 and B: the loop and the
    target alone it divides by run the oneDNN copy (the baseline rule), every record is lossless, and the summary and
    the baseline name the kernels."""
    from runners.engine.linear_kernels import onednn_available
    from runners.jobs.job import run_job
    from specbench.record_io import read_records

    if not onednn_available():
        pytest.skip("this torch has no oneDNN")
    summary = run_job(_job(tiny_conf, "method=specdecode", "engine.graphs=static", "engine.fast_linear=onednn",
                           f"batch_size={batch}"), tmp_path / "onednn", progress=False)
    records = read_records(tmp_path / "onednn" / "records.jsonl")
    assert summary["engine"]["fast_linear"] == "onednn" and summary["baseline"]["kernels"]["fast_linear"] == "onednn"
    assert records and all(r["lossless"] is True for r in records)


def _replaying_capture(captures: list[int]):
    """``capture_graph`` with the CUDA machinery stubbed: the warm-ups and the "capture" run the forward, and a
    "replay" runs it again into the captured output (what a CUDA graph does, minus the launches): the captured
    path's bookkeeping — input buffers, positions, one graph per width — checked on the CPU."""
    def capture(forward, warmup=2, before=None):
        for _ in range(warmup):
            before()
            forward()
        before()
        out = forward()
        captures.append(int(out.shape[1]))

        class Graph:
            def replay(self):
                out.copy_(forward())

        return Graph(), out
    return capture


def test_captured_forwards_replay_one_graph_per_width_on_one_cache(pair):
    """``engine.graphs=captured``'s bookkeeping with the CUDA graphs stubbed (the capture itself runs on a GPU): the
    target's blocks and the draft's steps replay a graph per (width, logits kept), their ids copied into the
    graph's buffer; the output is the eager loop's token for token; a second prompt reuses the graphs, and the
    target alone decodes on the same pooled cache. A replay that did not copy its ids in decodes something else."""
    from runners.engine.graphs import captured_cache_class

    prompts = pair.prompts[:2]

    def decode():
        spec = [SpeculativeRunner(pair.target, build_drafter("model", _ctx(pair)), build_policy("fixed", 3),
                                  []).generate(p, NEW).tokens for p in prompts]
        return spec, [AutoregressiveRunner(pair.target, []).generate(p, NEW).tokens for p in prompts]

    eager = decode()
    captures: list[int] = []
    caches = {}
    for m in (pair.target, pair.draft):
        caches[id(m)] = captured_cache_class()(m, HEADROOM + 8, capture=_replaying_capture(captures))
        kv.use_pooled(m, caches[id(m)])
    try:
        assert decode() == eager
        widths = sorted({key[1] for c in caches.values() for key in c.graphs})
        assert widths[0] == 1 and len(widths) > 1  # a step's width, and verification blocks of several widths
        assert len(captures) == sum(len(c.graphs) for c in caches.values())  # each graph captured once
        before = len(captures)
        assert decode() == eager and len(captures) == before  # the second time: replays only
        for c in caches.values():  # a replay that kept its first ids
            for _graph, ids, _out in c.graphs.values():
                ids.copy_ = lambda src: None
        assert decode() != eager
    finally:
        for m in (pair.target, pair.draft):
            kv.use_pooled(m, None)


def test_captured_pools_the_targets_cache_and_leaves_a_cross_vocabulary_draft_uncaptured(pair, monkeypatch):
    """On a (pretended) CUDA model ``captured`` hands out one cache per model, reset to 0 for every decoding; a draft
    whose tokens are its own (a cross-vocabulary drafter's) gets the growing static cache instead of a fixed one."""
    import specbench.models
    from runners.engine.graphs import captured_cache_class

    monkeypatch.setattr(specbench.models, "model_device", lambda model: torch.device("cuda"))
    use_graphs("captured", (pair.target, pair.draft), NEW, uncaptured=(pair.draft,))
    try:
        first = kv.new_cache(pair.target)
        assert isinstance(first, captured_cache_class()) and kv.new_cache(pair.target) is first
        draft = kv.new_cache(pair.draft)
        assert isinstance(draft, PositionCache) and not isinstance(draft, captured_cache_class())
        use_graphs("static", (pair.target, pair.draft), NEW)
        assert not isinstance(kv.new_cache(pair.target), captured_cache_class())
    finally:
        use_graphs("eager", (pair.target, pair.draft), NEW)


def test_a_batch_repacks_its_static_cache_in_place(pair, monkeypatch):
    """With every hole repacked (``HOLE_SHARE = 0``) the B = 4 static cache gathers each row's columns back into
    its own tensors and rewinds to their width: the rows decode what the eager batch decodes."""
    import runners.engine.ragged as ragged

    monkeypatch.setattr(ragged, "HOLE_SHARE", 0.0)

    def decode():
        policies = [build_policy("fixed", 5) for _ in pair.prompts]
        out = BatchedSpeculativeRunner(pair.target, build_batched_drafter("model", _ctx(pair)), policies,
                                       []).generate(pair.prompts, NEW)
        return _rows(out), out.repacks

    (eager, eager_repacks), (static, static_repacks) = _both((pair.target, pair.draft), decode)
    assert static == eager and static_repacks == eager_repacks > 0


def test_a_folder_written_before_the_option_is_the_same_eager_job():
    """A job folder whose ``engine`` node predates ``graphs`` ran the dynamic cache: the same job as ``eager``
    (resumed, not re-run), another job than ``static``."""
    from specbench.config import JobConfig
    from specbench.job_folders import config_drift

    from helpers import compose

    eager = JobConfig.from_mapping(compose()).as_dict()
    old = {**eager, "engine": {k: v for k, v in eager["engine"].items() if k != "graphs"}}
    assert config_drift(old, eager) is None
    static = JobConfig.from_mapping(compose("engine.graphs=static")).as_dict()
    assert config_drift(old, static) == "engine.graphs: None there, 'static' now"
