"""Test set-up: offline by construction.

The offline environment variables are set before anything imports
huggingface_hub, and sockets to anything but loopback are refused, so a hidden
download fails loudly instead of hanging or silently succeeding.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest
import torch

torch.set_num_threads(int(os.environ.get("SPECBENCH_TEST_THREADS", "2")))

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # `import helpers`
SHARED = ROOT.parent / "shared"

_real_connect = socket.socket.connect


def _guarded_connect(self, address):  # pragma: no cover - only hit by a bug
    host = address[0] if isinstance(address, tuple) else address
    if isinstance(host, str) and not (host.startswith("127.") or host in ("localhost", "::1") or host.startswith("/")):
        raise RuntimeError(f"test tried to reach the network: {address!r} (tests must run offline)")
    return _real_connect(self, address)


socket.socket.connect = _guarded_connect


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
    import copy

    from helpers import tiny

    tok = tiny.tiny_tokenizer()
    target = tiny.tiny_model(len(tok), seed=1, layers=2)
    with torch.no_grad():
        target.lm_head.weight.mul_(50.0)
    draft = copy.deepcopy(target)
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.2 * p.abs().mean())
    texts = ("the quick brown fox", "def add(a, b):", "one two three", "a cat sat on")
    return tok, target, draft, [tok.encode(t) for t in texts]
