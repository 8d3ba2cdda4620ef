"""Registry of speculation-length policies: ``policy:`` in ``conf/method/*.yaml`` (imported lazily)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from methods.base import GammaPolicy
from specbench.registry import ConfigError, Registry

POLICIES: Registry[type[GammaPolicy]] = Registry("gamma policy", {
    "fixed": "methods.base:FixedGamma",  # SpecDecode
    # adaptive speculation length (GammaTune paper's comparison set)
    "hf_heuristic": "methods.hf_heuristic:HFHeuristic",
    "assistant_threshold": "methods.threshold:AssistantThreshold",
    "gammatune": "methods.gammatune:GammaTune",
    "gammatune_plus": "methods.gammatune:GammaTunePlus",
    # the γ-policy lab (issue 14): the field's training-free policies, and ours
    "adaedl": "methods.adaedl:AdaEDL",
    "svip": "methods.svip:SVIP",
    "max_confidence": "methods.max_confidence:MaxConfidence",
    "logit_margin": "methods.logit_margin:LogitMargin",
    "tapout": "methods.tapout:TapOut",
    "banditspec": "methods.banditspec:BanditSpec",
    "smartspec": "methods.smartspec:SmartSpec",
    "cost_aware": "methods.cost_aware:CostAware",
})


def policy_params(cls: type[GammaPolicy]) -> list[str]:
    """Constructor parameters of a policy besides ``gamma_init`` (``GammaPolicy.knobs``)."""
    return list(cls.knobs())


def build_policy(name: str, gamma_init: int, params: Mapping[str, Any] | None = None) -> GammaPolicy:
    """Instantiate policy ``name`` (once per job); ``params`` are its knobs. A knob the policy does
    not take is a ``ConfigError`` (a typo in ``method.<knob>=`` must not be ignored)."""
    cls = POLICIES.get(name)
    params = dict(params or {})
    known = policy_params(cls)
    unknown = sorted(k for k in params if k not in known)
    if unknown:
        raise ConfigError(
            f"policy {name!r} has no setting {unknown[0]!r}; its settings: {', '.join(known) or 'none'}"
        )
    kwargs = {k: v for k, v in params.items() if v is not None}
    try:
        return cls(gamma_init, **kwargs)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"policy {name!r}: {exc}") from exc
