"""The one runner factory (issue 51, item 5): ``runners.engine.factory.build_runner`` builds every loop the harness
times, and nothing else in the package or the scripts constructs one by hand."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from methods.base import FixedGamma
from runners.drafters.model import ModelDrafter
from runners.engine.batched import BatchedAutoregressiveRunner, BatchedSpeculativeRunner
from runners.engine.factory import RUNNER_KINDS, build_runner
from runners.engine.hf_ar import HFAutoregressiveRunner
from runners.engine.hf_assisted import HFAssistedRunner
from runners.engine.speculative import AutoregressiveRunner, SpeculativeRunner

from helpers.tiny import tiny_model

ROOT = Path(__file__).resolve().parents[2]
RUNNER_CLASSES = {cls.__name__ for cls in (SpeculativeRunner, AutoregressiveRunner, HFAssistedRunner,
                                           HFAutoregressiveRunner, BatchedSpeculativeRunner,
                                           BatchedAutoregressiveRunner)}
FACTORY = ROOT / "runners" / "engine" / "factory.py"


def _constructions(path: Path) -> list[str]:
    """``path:line name`` of every call of a runner class in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if name in RUNNER_CLASSES:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}")
    return found


def test_no_module_or_script_wires_a_runner_by_hand():
    """Jobs, the replay and the scripts take their runners from the factory: a runner class called anywhere else
    in ``runners/``, ``scripts/`` or ``run.py`` is a second wiring."""
    files = [*ROOT.joinpath("runners").rglob("*.py"), *ROOT.joinpath("scripts").rglob("*.py"), ROOT / "run.py"]
    assert FACTORY in files and len(_constructions(FACTORY)) == len(RUNNER_CLASSES)  # the scan sees the factory's
    by_hand = [c for path in files if path != FACTORY for c in _constructions(path)]
    assert by_hand == []


@pytest.fixture(scope="module")
def models():
    return tiny_model(120, seed=1), tiny_model(120, seed=2)


@pytest.mark.parametrize(("kind", "batch_size", "cls"), [
    ("speculative", 1, SpeculativeRunner), ("ar", 1, AutoregressiveRunner), ("hf", 1, HFAssistedRunner),
    ("hf_ar", 1, HFAutoregressiveRunner), ("speculative", 2, BatchedSpeculativeRunner),
    ("ar", 2, BatchedAutoregressiveRunner),
])
def test_each_kind_builds_its_loop(models, kind, batch_size, cls):
    target, draft = models
    drafter = ModelDrafter(draft, [0]) if batch_size == 1 else None
    runner = build_runner(kind, target, [0], drafter=drafter, policy=FixedGamma(3), draft_model=draft,
                          batch_size=batch_size)
    assert type(runner) is cls and kind in RUNNER_KINDS


def test_the_target_alone_it_builds_decodes_as_the_speculative_one(models):
    target, draft = models
    ar = build_runner("ar", target, [0]).generate([5, 6, 7], 8)
    spec = build_runner("speculative", target, [0], drafter=ModelDrafter(draft, [0]), policy=FixedGamma(3))
    assert spec.generate([5, 6, 7], 8).tokens == ar.tokens


def test_an_unknown_kind_or_a_batch_for_a_batch_one_loop_is_refused(models):
    target, _ = models
    with pytest.raises(ValueError, match="known: speculative, ar, hf, hf_ar"):
        build_runner("eagle", target, [0])
    with pytest.raises(ValueError, match="one prompt at a time"):
        build_runner("hf_ar", target, [0], batch_size=2)
