"""Each drafter declares what it is (``specbench.drafter_kinds``), and the declaration is true of the drafter: the
class it names is that drafter, its batched form and trace kind exist, and the config layer reads it without torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from runners.drafters import DRAFTERS
from runners.engine.base import Drafter
from specbench.drafter_kinds import DEFAULT_KIND, DRAFTER_KINDS, DrafterKind, ScannedKinds, pair_kinds
from specbench.registry import ConfigError, import_target

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", DRAFTER_KINDS.names())
def test_every_declaration_names_its_own_drafter(name):
    declared = DRAFTER_KINDS.get(name)
    cls = DRAFTERS.get(name)
    assert cls is import_target(declared.drafter) and issubclass(cls, Drafter) and cls.name == name
    if declared.batched is not None:
        assert hasattr(import_target(declared.batched), "from_context")
    if declared.trace is not None:
        from runners.replay.trace import HybridTrace, Trace
        from runners.replay.trace_lookup import LookupTrace

        traces = {t.kind: t for t in (Trace, LookupTrace, HybridTrace)}
        assert declared.trace in traces
        assert traces[declared.trace].asks_policy == declared.asks_policy  # the replay asks as the drafter does
        if declared.trace == LookupTrace.kind:  # its proposals are traced through lookup(ids, k)
            assert callable(getattr(cls, "lookup", None))


def test_a_deterministic_drafter_is_never_asked_to_stop():
    from methods.base import FixedGamma

    class NoAsk(FixedGamma):
        def stop_drafting(self, step) -> bool:  # pragma: no cover - must not be called
            raise AssertionError(f"{name} declares asks_policy=False")

    from runners.drafters import DrafterContext, build_drafter

    for name in DRAFTER_KINDS.names():
        if DRAFTER_KINDS.get(name).asks_policy:
            continue
        drafter = build_drafter(name, DrafterContext(None, [], 16))
        drafter.begin([1, 2, 3, 1, 2])
        assert drafter.propose([1, 2, 3, 1, 2, 3, 1, 2], 4, NoAsk(4), 0.0, None).tokens  # it drafts, unasked


def test_pair_kinds_are_the_same_vocabulary_drafters():
    assert DEFAULT_KIND in pair_kinds()
    assert all(not DRAFTER_KINDS.get(k).own_vocabulary for k in pair_kinds())
    assert set(DRAFTER_KINDS.names()) - set(pair_kinds()) == {
        k for k in DRAFTER_KINDS.names() if DRAFTER_KINDS.get(k).own_vocabulary}


def test_a_declaration_that_contradicts_itself_is_refused():
    with pytest.raises(ValueError, match="draft_cost"):
        DrafterKind("m:C", loads_model=False, asks_policy=False, method="x", draft_cost="cheap")
    with pytest.raises(ValueError, match="plain_model"):
        DrafterKind("m:C", loads_model=False, asks_policy=True, method="x", plain_model=True)
    with pytest.raises(ValueError, match="same-vocabulary"):
        DrafterKind("m:C", loads_model=True, asks_policy=True, method="x", own_vocabulary=True, trace="model")


def test_an_unknown_kind_is_refused_with_the_known_ones():
    from specbench.config.pair import DraftConfig

    with pytest.raises(ConfigError, match="prompt_lookup"):
        DraftConfig.from_mapping({"kind": "prompt_lokup"})
    with pytest.raises(ConfigError, match="is not one of"):  # a cross-vocabulary drafter is hetero='s, not a kind
        DraftConfig.from_mapping({"kind": "slem", "path": "x/y"})


def test_the_config_layer_reads_declarations_without_torch():
    code = ("import sys; import specbench.config, specbench.drafter_kinds, specbench.speculation_profile, "
            "analysis.modeled; assert 'torch' not in sys.modules, 'torch imported'; "
            "assert 'runners' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, env={"PYTHONPATH": str(ROOT)})


def test_declarations_are_read_from_the_drafters_sources_without_importing_them():
    """A drafter declares itself on its class (``@drafter``); the config layer reads the declaration from the source:
    asking for one imports neither torch nor any drafter module."""
    code = ("import sys; from specbench.drafter_kinds import drafter_kind; k = drafter_kind('suffix'); "
            "print(k.drafter, k.trace, 'torch' in sys.modules, sorted(m for m in sys.modules if m.startswith('runners.')))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[2]).stdout.split()
    assert out == ["runners.drafters.suffix:SuffixDrafter", "prompt_lookup", "False", "[]"]


def test_a_drafter_module_is_found_by_its_declaration_alone(tmp_path, monkeypatch):
    """The recipe's one step besides its files: a module in the package with ``@drafter(...)`` is a drafter kind;
    a declaration the scan cannot read (no literal) or cannot build (a bad field) fails, naming the module."""
    package = tmp_path / "mydrafters"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "echo.py").write_text(
        "from specbench.drafter_kinds import drafter\n\n\n"
        "@drafter('echo', loads_model=False, asks_policy=False, method='ngram', trace='prompt_lookup', "
        "draft_cost='free')\nclass EchoDrafter:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    kinds = ScannedKinds("mydrafters")
    assert kinds.names() == ["echo"] and kinds.get("echo").drafter == "mydrafters.echo:EchoDrafter"
    (package / "bad.py").write_text("from x import drafter, COST\n\n\n@drafter('bad', loads_model=False, "
                                    "asks_policy=False, method='m', draft_cost=COST)\nclass Bad:\n    pass\n")
    with pytest.raises(ValueError, match=r"mydrafters.bad: @drafter\('bad', draft_cost=...\) must be a literal"):
        ScannedKinds("mydrafters").names()
