"""Models trained from γ-controlled initialization (SPEC §4-5), with an ensemble axis first."""

from ctxstair.models.activations import activation_fn
from ctxstair.models.attention import AttentionEnsemble
from ctxstair.models.cbow import CBOWEnsemble, MemberSpec
from ctxstair.models.decoder import DecoderConfig, DecoderLM, next_token_loss
from ctxstair.models.init import gamma_normal_, realised_std

__all__ = ["AttentionEnsemble", "CBOWEnsemble", "DecoderConfig", "DecoderLM", "MemberSpec", "activation_fn",
           "gamma_normal_", "next_token_loss", "realised_std"]
