"""Registry of speculation-length policies: ``policy:`` in ``conf/method/*.yaml``, found where each is defined.

A policy declares its name on its class, ``@policy("<name>")`` (``methods.base``, beside ``POLICIES``;
``specbench.registry``'s one convention), in any module of ``methods/``; ``POLICIES`` finds the declarations by
reading the package's sources and imports a policy's module the first time its name is asked for, so choosing one
policy imports no other. Adding a policy is its
module, its ``conf/method/<name>.yaml`` and its test (``docs/pages/extending.md``); nothing here changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from methods.base import POLICIES, GammaPolicy, policy
from specbench.registry import ConfigError

__all__ = ["POLICIES", "build_policy", "policy", "policy_params"]


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
