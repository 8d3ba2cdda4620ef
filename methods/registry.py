"""Registry of speculation-length policies: ``policy:`` in ``conf/method/*.yaml``."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from methods.base import FixedGamma, GammaPolicy
from methods.gammatune import GammaTune, GammaTunePlus
from methods.hf_heuristic import HFHeuristic
from methods.threshold import AssistantThreshold
from specbench.registry import ConfigError, Registry

POLICIES: Registry[type[GammaPolicy]] = Registry("gamma policy")
POLICIES.add(FixedGamma.name, FixedGamma)
# Adaptive speculation length (GammaTune paper's comparison set).
for _policy in (HFHeuristic, AssistantThreshold, GammaTune, GammaTunePlus):
    POLICIES.add(_policy.name, _policy)


def policy_params(cls: type[GammaPolicy]) -> list[str]:
    """Constructor parameters of a policy besides ``gamma_init``."""
    sig = inspect.signature(cls.__init__)
    return [p for p in sig.parameters if p not in ("self", "gamma_init")]


def build_policy(name: str, gamma_init: int, params: Mapping[str, Any] | None = None) -> GammaPolicy:
    """Instantiate policy ``name``; ``params`` may hold keys of other policies
    (a method config lists every knob), only this policy's are passed on."""
    cls = POLICIES.get(name)
    params = dict(params or {})
    kwargs = {k: params[k] for k in policy_params(cls) if k in params and params[k] is not None}
    try:
        return cls(gamma_init, **kwargs)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"policy {name!r}: {exc}") from exc
