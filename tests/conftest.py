"""Test set-up: offline by construction, and no FutureWarning from our own calls.

The offline environment variables are set before anything imports
huggingface_hub, and sockets to anything but loopback are refused, so a hidden
download fails loudly instead of hanging or silently succeeding.

A ``FutureWarning`` raised by a call from our own code (``specbench``, ``runners``,
``methods``, ``analysis``, ``scripts/``, ``run.py``) fails the test that triggered it
(``FutureWarningGuard``): a deprecation we trip is fixed when it appears, not when the
library removes the old way. transformers' own internals are not blamed, nor are tests.
"""

from __future__ import annotations

import os
import socket
import sys
import warnings
from pathlib import Path
from types import FrameType
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest
import torch

# one torch thread per pytest-xdist worker (`make test` runs one worker per core), two in a single process;
# under xdist the job subprocesses a test starts (run.py, scripts) take one thread too: with a worker per core,
# two-thread children would oversubscribe the cores and spin (a sweep test ran 86 s alone, 160 s beside a worker)
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(int(os.environ.get("SPECBENCH_TEST_THREADS", "1" if os.environ.get("PYTEST_XDIST_WORKER") else "2")))

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"

_real_connect = socket.socket.connect


def _guarded_connect(self, address):  # pragma: no cover - only hit by a bug
    host = address[0] if isinstance(address, tuple) else address
    if isinstance(host, str) and not (host.startswith("127.") or host in ("localhost", "::1") or host.startswith("/")):
        raise RuntimeError(f"test tried to reach the network: {address!r} (tests must run offline)")
    return _real_connect(self, address)


socket.socket.connect = _guarded_connect


class FutureWarningGuard:
    """Records every ``FutureWarning`` whose caller is our own code (``blame``), whatever the
    warning filters do with it; the ``pytest_runtest_*`` wrappers below fail the test then.

    The caller is the frame the warning names (``warnings.warn``'s ``stacklevel``, as a
    ``-W error::FutureWarning:module`` filter would match it) seen through the frames that only
    dispatch a call: ``torch.nn.Module.__call__`` (``torch/nn/modules/module.py``: every
    ``model(...)`` goes through it, so a filter by module would blame torch), accelerate's
    forward hooks and torch's ``no_grad`` decorators. transformers' ``deprecate_kwarg``
    (``utils/deprecation.py``) warns with ``stacklevel=2``: the caller is whoever called the
    deprecated forward, ours (``model(past_key_values=...)`` in ``runners``) or transformers'
    own (a model calling its submodules, not blamed)."""

    PACKAGES = ("specbench", "runners", "methods", "analysis")
    DISPATCH = tuple(os.path.join(*parts) for parts in (("torch", "nn", "modules", "module.py"),
                                                       ("accelerate", "hooks.py"), ("torch", "utils", "_contextlib.py")))

    def __init__(self) -> None:
        self.offences: list[str] = []
        self._warn = warnings.warn

    def blame(self, frame: FrameType | None) -> str | None:
        """``path:line`` of ``frame`` (seen through dispatch frames) when it is our code, else None."""
        while frame is not None and frame.f_code.co_filename.endswith(self.DISPATCH):
            frame = frame.f_back
        if frame is None:
            return None
        path = Path(frame.f_code.co_filename)
        ours = str(frame.f_globals.get("__name__", "")).split(".")[0] in self.PACKAGES or (
            path.is_relative_to(ROOT / "scripts") or path == ROOT / "run.py")
        if not ours:
            return None
        return f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{frame.f_lineno}"

    def warn(self, message: Any, category: type[Warning] | None = None, stacklevel: int = 1,
             source: Any = None, **kwargs: Any) -> None:
        """``warnings.warn``, recording first (``blame``) when it is a FutureWarning from our code."""
        kind = category or (type(message) if isinstance(message, Warning) else UserWarning)
        if isinstance(kind, type) and issubclass(kind, FutureWarning):
            try:
                where = self.blame(sys._getframe(max(int(stacklevel), 1)))  # frame 0 is this method
            except ValueError:  # a stacklevel past the outermost frame: nobody's call
                where = None
            if where is not None:
                self.offences.append(f"{where}: {message}")
        self._warn(message, category, stacklevel + 1, source, **kwargs)

    def mark(self) -> int:
        return len(self.offences)

    def take(self, mark: int) -> list[str]:
        """The offences recorded since ``mark``, removed."""
        new = self.offences[mark:]
        del self.offences[mark:]
        return new


FUTURE_WARNINGS = FutureWarningGuard()
warnings.warn = FUTURE_WARNINGS.warn


def _fail_on_our_future_warnings(when: str):
    mark = FUTURE_WARNINGS.mark()
    result = yield  # a test that fails by itself reports its own failure
    new = FUTURE_WARNINGS.take(mark)
    if new:
        shown = "\n  ".join(dict.fromkeys(new))
        pytest.fail(f"FutureWarning from our own code during {when} (tests/conftest.py: FutureWarningGuard):\n  {shown}",
                    pytrace=False)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    return (yield from _fail_on_our_future_warnings("setup"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    return (yield from _fail_on_our_future_warnings("the test"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    return (yield from _fail_on_our_future_warnings("teardown"))


@pytest.fixture
def future_warning_guard() -> FutureWarningGuard:
    """The session's ``FutureWarningGuard`` (for the tests of the guard itself)."""
    return FUTURE_WARNINGS


@pytest.fixture(scope="module")
def tiny_conf(tmp_path_factory) -> Path:
    """A config dir holding pair/tiny.yaml: a tiny seeded target and draft saved to disk."""
    from helpers import write_tiny_pair

    return write_tiny_pair(tmp_path_factory.mktemp("tinypair"))


@pytest.fixture(scope="module")
def hydra_conf():
    """Hydra initialised on conf/ for ``compose`` calls in a test module."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from specbench.config import register_resolvers

    register_resolvers()  # the model base node and the job_dirname resolver (a module run alone needs them)
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        yield
    GlobalHydra.instance().clear()


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    return SHARED


@pytest.fixture(scope="session")
def noisy_pair():
    """A sharpened tiny target and a noisy copy of it as draft (agreement runs of a few tokens, draft
    confidences spread over (0, 1)), plus prompts: ``(tokenizer, target, draft, prompts)``."""
    from helpers import tiny

    return tiny.tiny_pair(("the quick brown fox", "def add(a, b):", "one two three", "a cat sat on"), draft="noisy",
                          noise=0.2, noise_seed=3, relative_to="abs_mean", sharpen=50.0)


#: the per-test limit of a test not marked ``slow`` (issue 42); ``slow`` ones keep pyproject's ``timeout = 900``.
#: On CI the slowest unmarked test took under 9 s (`--durations`, 2026-11-27), so 60 s fails only a hang or a test
#: that should be marked ``slow``.
FAST_TIMEOUT_S = 60


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("slow") is None and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(FAST_TIMEOUT_S))
    # the modules that hold a slow test first, each kept whole (its module fixtures built once), the others after in
    # their order: under xdist's worksteal the longest tests (a real-model sweep takes a minute) start early instead
    # of leaving one worker alone at the end (CI, 2026-11-28: the suite's wall time was set by that tail)
    slow_modules = {item.module.__name__ for item in items
                    if item.get_closest_marker("slow") is not None and getattr(item, "module", None) is not None}
    order = {id(item): (getattr(getattr(item, "module", None), "__name__", None) not in slow_modules, i)
             for i, item in enumerate(items)}
    items.sort(key=lambda item: order[id(item)])
