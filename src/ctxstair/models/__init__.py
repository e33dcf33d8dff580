"""Models trained from γ-controlled initialization (SPEC §4-5), with an ensemble axis first."""

from ctxstair.models.activations import activation_fn
from ctxstair.models.cbow import CBOWEnsemble, MemberSpec
from ctxstair.models.init import gamma_normal_, realised_std

__all__ = ["CBOWEnsemble", "MemberSpec", "activation_fn", "gamma_normal_", "realised_std"]
