"""Helpers shared by the test modules (no test module imports another; ``tests/`` is on the import
path through pytest's ``pythonpath``): tiny seeded models and tokenizers (``helpers.tiny``), exact output
laws (``helpers.exact_law``), the cross-vocabulary drafters' oracle and texts (``helpers.hetero``), the
analysis tests' synthetic results folder (``helpers.analysis_fixture``), a host where the transposed LM head
pays (``helpers.emulated_host``: the engine's kernel timings faked), config composition, and
running ``run.py`` in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from specbench.config import compose as _compose_config

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"


def compose(*overrides: str) -> Any:
    """``conf/config.yaml`` composed with ``overrides`` (a ``DictConfig``, as ``run.py`` gets it)."""
    return _compose_config(list(overrides))


def options(group: str) -> list[str]:
    """The option names of a config group (``conf/<group>/*.yaml``)."""
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def run_sweep(args: list[str], conf: Path | None, tmp: Path, timeout: int = 600,
              in_process: bool = False) -> subprocess.CompletedProcess:
    """``python run.py [--config-dir conf] ARGS results_dir=tmp`` in a subprocess, offline, stopped after ``timeout`` s;
    ``in_process``: the same command line run in this process (``run_in_process``; no ``timeout`` there: the test's
    own, ``pyproject.toml``'s 900 s for a ``slow`` test, bounds it)."""
    cmd = [sys.executable, str(ROOT / "run.py")]
    if conf is not None:
        cmd += ["--config-dir", str(conf)]
    cmd += [*args, f"results_dir={tmp}"]
    if in_process:
        return run_in_process(cmd)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=offline_env())


def run_in_process(cmd: list[str]) -> subprocess.CompletedProcess:
    """``cmd`` (``[python, run.py, ARGS...]``) run as ``python run.py ARGS`` would run it, in this process:
    ``run.py`` executed as ``__main__`` (``runpy``: its ``with_baseline`` and Hydra's parsing of the same
    arguments), its standard streams captured, its exit code returned.

    What a sweep may change in the process is put back afterwards: the arguments, the environment, torch's threads,
    the SIGINT/SIGTERM handlers, every logger's handlers, level and flags (Hydra configures logging per job),
    Hydra's global state, and ``MODEL_CACHE`` (the run starts from an empty one, as a fresh process does, and its
    models are dropped after it). For the tiny-pair sweeps, where starting a Python with torch and transformers was
    most of a test's time (about 5 of 7 s on a 2-core Xeon, 2026-11-29); the tests of a fresh process's behaviour
    (the README's sweep, the launchers that start processes, signals, locks between processes) keep ``run_sweep``'s
    subprocess."""
    import contextlib
    import io
    import logging
    import runpy
    import signal

    import torch
    from hydra.core.global_hydra import GlobalHydra

    from specbench.models.cache import MODEL_CACHE

    saved_argv, saved_env, threads = sys.argv[:], dict(os.environ), torch.get_num_threads()
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    loggers = [logging.getLogger(), *(lg for lg in logging.Logger.manager.loggerDict.values()
                                      if isinstance(lg, logging.Logger))]
    states = [(lg, lg.handlers[:], lg.level, lg.disabled, lg.propagate) for lg in loggers]
    cache_state = dict(MODEL_CACHE.__dict__)
    MODEL_CACHE.__init__()  # the run starts from an empty model cache, as a fresh process does
    out, err = io.StringIO(), io.StringIO()
    code: int | str | None = 0
    GlobalHydra.instance().clear()
    try:
        sys.argv = [str(ROOT / "run.py"), *cmd[2:]]
        os.environ.update(offline_env())
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                runpy.run_path(str(ROOT / "run.py"), run_name="__main__")
            except SystemExit as stop:
                code = stop.code
    finally:
        sys.argv = saved_argv
        os.environ.clear()
        os.environ.update(saved_env)
        torch.set_num_threads(threads)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        for lg, lg_handlers, level, disabled, propagate in states:
            for handler in lg.handlers[:]:
                if handler not in lg_handlers:
                    lg.removeHandler(handler)
                    handler.close()
            lg.handlers[:] = lg_handlers
            lg.setLevel(level)
            lg.disabled, lg.propagate = disabled, propagate
        GlobalHydra.instance().clear()
        MODEL_CACHE.__dict__.clear()
        MODEL_CACHE.__dict__.update(cache_state)
    returncode = code if isinstance(code, int) else (0 if code is None else 1)
    if isinstance(code, str):
        err.write(code + "\n")
    return subprocess.CompletedProcess(cmd, returncode, out.getvalue(), err.getvalue())


def offline_env(**extra: str) -> dict[str, str]:
    """This environment, offline, with this checkout first on the import path (scripts, Ray workers)."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled", "PYTHONPATH": path, **extra}


SPEC = "  dtype: float32\n  device: cpu\n  trust_remote_code: false\n"


def _pair_yaml(name: str, same_tokenizer: bool, target: tuple[str, Path], draft: tuple[str, Path]) -> str:
    return (f"name: {name}\nsame_tokenizer: {'true' if same_tokenizer else 'false'}\n"
            f"target:\n  name: {target[0]}\n  path: {target[1]}\n{SPEC}"
            f"draft:\n  kind: model\n  name: {draft[0]}\n  path: {draft[1]}\n{SPEC}  transform: null\n")


def _save_tiny_pair(base: Path, name: str, tokenizers: tuple, names: tuple[str, str], seeds: tuple[int, int],
                    folders: tuple[str, str] = ("target", "draft")) -> None:
    """Save a tiny seeded target (2 layers) and draft (1 layer) under ``base/<folders>`` and write
    ``base/conf/pair/<name>.yaml`` for them."""
    from helpers import tiny

    for folder, tok, seed, layers in zip(folders, tokenizers, seeds, (2, 1), strict=True):
        model = tiny.tiny_model(len(tok), seed=seed, layers=layers)
        model.save_pretrained(base / folder)
        tok.save_pretrained(base / folder)
    conf = base / "conf" / "pair"
    conf.mkdir(parents=True, exist_ok=True)
    (conf / f"{name}.yaml").write_text(_pair_yaml(name, tokenizers[0] is tokenizers[1],
                                                  (names[0], base / folders[0]), (names[1], base / folders[1])))


def saved_pair_config(tok: Any, target: Any, draft: Any, folder: Path, name: str = "tiny") -> dict:
    """Save a tiny target and draft (with one tokenizer) under ``folder/target`` and ``folder/draft`` and return
    the ``pair`` node that loads them (``cfg.pair = OmegaConf.create(...)``)."""
    for sub, model in (("target", target), ("draft", draft)):
        model.save_pretrained(folder / sub)
        tok.save_pretrained(folder / sub)
    spec = {"dtype": "float32", "device": "cpu", "trust_remote_code": False}
    return {"name": name, "same_tokenizer": True,
            "target": {"name": f"{name}-target", "path": str(folder / "target"), **spec},
            "draft": {"kind": "model", "name": f"{name}-draft", "path": str(folder / "draft"), **spec, "transform": None}}


def write_tiny_pairs(base: Path, names: tuple[str, ...] = ("a", "b", "c")) -> Path:
    """A config dir with ``pair/tiny_<name>.yaml`` for each name: distinct tiny seeded targets and
    drafts (same tokenizer), saved under ``base``; plus ``pair/broken.yaml``, whose target folder exists
    (so the config is valid) but holds no loadable model (so the job fails when it loads it)."""
    from helpers import tiny

    tok = tiny.tiny_tokenizer()
    for i, name in enumerate(names):
        _save_tiny_pair(base, f"tiny_{name}", (tok, tok), (f"{name}-target", f"{name}-draft"), (10 + 2 * i, 11 + 2 * i),
                        (f"{name}-target", f"{name}-draft"))
    broken = base / "broken-target"
    broken.mkdir()
    (broken / "config.json").write_text("{ not a model config")
    (base / "conf" / "pair" / "broken.yaml").write_text(
        _pair_yaml("broken", True, ("broken-target", broken), ("broken-draft", broken)))
    return base / "conf"


def write_tiny_pair(base: Path) -> Path:
    """A config dir holding ``pair/tiny.yaml``: a tiny seeded target and draft saved under ``base``."""
    from helpers import tiny

    tok = tiny.tiny_tokenizer()
    _save_tiny_pair(base, "tiny", (tok, tok), ("tiny-target", "tiny-draft"), (1, 2))
    return base / "conf"


def write_tiny_hetero_pair(base: Path) -> Path:
    """A config dir holding ``pair/tiny_hetero.yaml``: a tiny seeded target with the byte-level BPE
    tokenizer and a tiny seeded draft with the character-level one (another vocabulary), saved under ``base``."""
    from helpers import tiny

    _save_tiny_pair(base, "tiny_hetero", (tiny.tiny_tokenizer(), tiny.tiny_tokenizer(kind="char")),
                    ("tiny-bpe", "tiny-char"), (1, 2))
    return base / "conf"


def sentencepiece_like(scheme: str = "always") -> Any:
    """A '▁'-convention BPE whose decoder drops the first token's leading space (Llama style)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from helpers.tiny import CORPUS

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme=scheme)
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme=scheme)
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=200, special_tokens=["<eos>", "<unk>"], show_progress=False))
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", unk_token="<unk>")
