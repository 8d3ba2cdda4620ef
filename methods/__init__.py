"""Speculation-length policies and cross-vocabulary verification methods."""

from methods.base import FixedGamma, GammaPolicy, RoundOutcome
from methods.policies import POLICIES, build_policy

__all__ = ["POLICIES", "FixedGamma", "GammaPolicy", "RoundOutcome", "build_policy"]
