"""The policies' registry and their YAML files: every method YAML builds its policy and passes every key on, a
policy's constructor defaults are its own YAML's, sweep overrides reach the policy, and bad knobs are one-line
config errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import settings
from omegaconf import OmegaConf

from methods.gammatune import GammaTune, GammaTunePlus
from methods.policies import POLICIES, build_policy, policy_params
from runners.replay.grid import load_method
from specbench.config import MethodConfig
from specbench.config.method import NOT_KNOBS
from specbench.registry import ConfigError

from helpers.rounds import rnd

METHOD_DIR = Path(__file__).resolve().parents[2] / "conf" / "method"
PAPER_GAMMAS = [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 20, 24]
OURS = ["hf_heuristic", "hf_heuristic_carryover", "assistant_threshold", "gammatune", "gammatune_plus"]
PLAIN_STEPS = {"smartspec", "cost_aware"}  # policies that may choose γ = 0 (a plain target step)
FAST = settings(max_examples=150, deadline=None)


# --------------------------------------------------------------------------- registry and configs


def _params(cfg) -> dict:
    """A method config's policy knobs (what ``specbench.config.MethodConfig.params`` holds)."""
    return dict(MethodConfig.from_mapping(OmegaConf.to_container(cfg)).params)


def method_yamls():
    return sorted(METHOD_DIR.glob("*.yaml"))


def test_our_policies_registered():
    for name in ("hf_heuristic", "assistant_threshold", "gammatune", "gammatune_plus"):
        assert POLICIES.get(name).name == name


@pytest.mark.parametrize("path", method_yamls(), ids=lambda p: p.stem)
def test_method_yaml_builds(path):
    cfg = OmegaConf.load(path)
    assert cfg.name == path.stem
    if cfg.get("policy") is None:
        assert cfg.runner != "speculative"
        return
    for g in PAPER_GAMMAS:
        p = build_policy(cfg.policy, g, _params(cfg))
        p.begin_prompt()
        assert p.next_gamma() == g
        p.observe(rnd(1, min(g, 3), g, (0.9,) * min(g, 3)))
        assert p.next_gamma() >= (0 if cfg.policy in PLAIN_STEPS else 1)
        OmegaConf.create(p.state())  # JSON-like
    with pytest.raises(ConfigError):
        build_policy(cfg.policy, 0, _params(cfg))


def speculative_yamls() -> list[str]:
    """Every ``conf/method`` whose runner is our speculative loop with a γ policy (the paper's and the lab's)."""
    return [p.stem for p in method_yamls() if (c := OmegaConf.load(p)).get("runner") == "speculative" and c.get("policy")]


#: knobs a policy keeps under another attribute name (on ``policy.confidence``)
CONFIDENCE_ATTRS = {"threshold": "threshold_init", "adaptive_threshold": "adaptive", "persist_threshold": "persist"}


@pytest.mark.parametrize("stem", speculative_yamls())
def test_every_method_yaml_passes_every_key_on(stem):
    """The one YAML <-> policy-parameter check: a method YAML names exactly its policy's parameters (no typo,
    nothing left out), the paper's policies hold every value, its first round plays the initial γ, and the replay
    builds the same policy (``runners.replay.grid.load_method``)."""
    cfg = OmegaConf.load(METHOD_DIR / f"{stem}.yaml")
    assert cfg.name == stem and cfg.policy in POLICIES
    params = set(cfg) - set(NOT_KNOBS)  # name, runner, policy, display
    assert params == set(policy_params(POLICIES.get(cfg.policy)))
    p = build_policy(cfg.policy, 5, _params(cfg))
    for key in params if stem in OURS else ():  # the paper's policies keep each knob as given (others derive:
        holder = p.confidence if key in CONFIDENCE_ATTRS else p  # BanditSpec's arms gain the initial γ, ...)
        assert getattr(holder, CONFIDENCE_ATTRS.get(key, key)) == cfg[key], key
    p.begin_prompt()
    assert p.next_gamma() == 5
    assert load_method(stem).policy == cfg.policy


def _same(a, b) -> bool:
    """Equal as a YAML value and a Python default are (a list and a tuple of the same items alike)."""
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return list(a) == list(b)
    if isinstance(a, bool) or isinstance(b, bool):  # True == 1 in Python, never in a YAML knob
        return a is b
    return a == b


@pytest.mark.parametrize("name", [n for n in POLICIES.names() if n != "fixed"])
def test_a_policys_constructor_defaults_are_its_own_yamls(name):
    """One source of defaults (``specbench.config.method``): the YAML. A policy's constructor keeps defaults only to
    be built by hand, and they are its own YAML's (``conf/method/<policy>.yaml``), knob for knob: a default changed
    in one place and not the other fails here."""
    cfg = OmegaConf.to_container(OmegaConf.load(METHOD_DIR / f"{name}.yaml"))
    assert cfg["policy"] == name
    yaml_knobs = {k: v for k, v in cfg.items() if k not in NOT_KNOBS}
    knobs = POLICIES.get(name).knobs()
    assert list(knobs) == [k for k in knobs if k in yaml_knobs] and set(knobs) == set(yaml_knobs)
    assert all(_same(knobs[k], yaml_knobs[k]) for k in knobs), {k: (knobs[k], yaml_knobs[k]) for k in knobs}
    assert POLICIES.get("fixed").knobs() == {}  # SpecDecode's policy: no knob, nothing to agree on


def test_gammatune_plus_takes_gammatunes_knobs_from_gammatune():
    """GammaTune+ writes only its own three knobs; GammaTune's come from GammaTune's constructor."""
    plus, base = GammaTunePlus.knobs(), GammaTune.knobs()
    assert {k: plus[k] for k in base} == base
    assert set(plus) - set(base) == {"threshold", "adaptive_threshold", "persist_threshold"}
    policy = build_policy("gammatune_plus", 4, {"eta": 0.5, "delta": 1, "threshold": 0.3})
    assert (policy.eta, policy.delta, policy.gamma_max, policy.confidence.threshold_init) == (0.5, 1, 32, 0.3)
    with pytest.raises(ConfigError, match="no setting 'etta'"):
        build_policy("gammatune_plus", 4, {"etta": 0.5})


def test_the_check_covers_the_papers_and_the_labs_methods():
    assert set(OURS) | {"adaedl", "svip", "max_confidence", "logit_margin", "tapout", "banditspec",
                        "banditspec_exp3", "smartspec", "cost_aware"} <= set(speculative_yamls())


def test_transient_flags_in_yamls():
    """Every adaptive method restarts per prompt by default; carry-over is named (``*_carryover``)."""
    for name in ("hf_heuristic", "gammatune", "gammatune_plus", "hf_native_heuristic"):
        cfg = OmegaConf.load(METHOD_DIR / f"{name}.yaml")
        assert build_policy(cfg.policy, 5, _params(cfg)).transient is True, name
    for name in ("hf_heuristic_carryover", "hf_native_heuristic_carryover"):
        cfg = OmegaConf.load(METHOD_DIR / f"{name}.yaml")
        assert build_policy(cfg.policy, 5, _params(cfg)).transient is False, name
    for name in ("gammatune", "gammatune_plus"):
        assert OmegaConf.load(METHOD_DIR / f"{name}.yaml").expand_on == "gamma"


def test_sweep_overrides_reach_the_policy():
    cfg = OmegaConf.load(METHOD_DIR / "gammatune_plus.yaml")
    cfg = OmegaConf.merge(
        cfg, OmegaConf.from_dotlist(["eta=0.5", "transient=true", "threshold=0.3", "delta=1"])
    )
    p = build_policy(cfg.policy, 5, _params(cfg))
    assert (p.eta, p.transient, p.confidence.threshold, p.delta) == (0.5, True, 0.3, 1.0)


@pytest.mark.parametrize(
    "name", ["fixed", "hf_heuristic", "assistant_threshold", "gammatune", "gammatune_plus"]
)
def test_gamma_zero_is_config_error(name):
    with pytest.raises(ConfigError):
        build_policy(name, 0)


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("hf_heuristic", {"transient": "false"}),  # a string is not a flag
        ("assistant_threshold", {"threshold": 1.5}),
        ("assistant_threshold", {"threshold": -0.1}),
        ("gammatune", {"eta": 0}),
        ("gammatune", {"eta": 1.5}),
        ("gammatune", {"delta": -1}),
        ("gammatune", {"gamma_min": 0}),
        ("gammatune", {"gamma_min": 8, "gamma_max": 4}),
        ("gammatune", {"gamma_max": 4}),  # initial γ 5 above γ_max
        ("gammatune_plus", {"threshold": "high"}),
    ],
)
def test_bad_params_are_config_errors(name, params):
    with pytest.raises(ConfigError):
        build_policy(name, 5, params)
