"""Gradient-flow theory of the embeddings (SPEC §6): order-by-order decomposition of the CBOW
embedding flow into signature-driven terms, its checks against autograd, and the scaling laws.

Example::

    from ctxstair import tasks, theory
    ds = tasks.make("sum_mod", N=6, L=3)
    terms = theory.cbow_label_terms(W_E, W_U, ds.X, ds.y, coeffs=(1, 1, 1))   # (V, 3, d): orders 0, 1, 2
    terms.sum(axis=1)   # == ∇_{W_E} mean_n f(X_n)[y_n] (autograd: theory.embedding_gradient(..., "label"))
    paths = theory.attention_label_paths(params, ds.X, ds.y)   # attention-only model (SPEC §6.3):
    # {"value", "key", "query"} from the signatures; theory.attention_path_gradients is its autograd check
    paths = theory.decoder_embedding_paths(model, tokens)      # pre-norm decoder (SPEC §6.4): direct,
    # attn.ℓ, mlp.ℓ paths of the embedding gradient; theory.direct_path_prediction predicts the direct one

docs/theory.md lists every formula with the function that computes it and the test that checks it.
"""

from ctxstair.theory.activation_fit import (
    DEFAULT_DEGREE,
    ActivationFitTerms,
    cbow_terms_with_fit,
    fit_activation,
    preactivation_range,
)
from ctxstair.theory.attention import (
    PATH_OBJECTIVES,
    attention_forward,
    attention_label_paths,
    attention_path_gradients,
)
from ctxstair.theory.cbow_terms import (
    cbow_label_terms,
    cbow_prediction_correction_terms,
    cbow_prediction_terms,
    correction_max_order,
    label_max_order,
)
from ctxstair.theory.decoder_paths import DECODER_OBJECTIVES, decoder_embedding_paths, direct_path_prediction
from ctxstair.theory.late_regime import (
    collinear_order_ratios,
    late_regime_prefactor,
    late_regime_scan,
    order_norm_ratios,
    order_pattern_count,
    stirling2,
)
from ctxstair.theory.reference import OBJECTIVES, embedding_gradient
from ctxstair.theory.scaling import (
    SlopeFit,
    fit_order_slopes,
    init_order_mean_squares,
    order_rms_ratios,
    predicted_slope,
)

__all__ = [
    "DECODER_OBJECTIVES",
    "DEFAULT_DEGREE",
    "OBJECTIVES",
    "PATH_OBJECTIVES",
    "ActivationFitTerms",
    "SlopeFit",
    "attention_forward",
    "attention_label_paths",
    "attention_path_gradients",
    "cbow_label_terms",
    "cbow_prediction_correction_terms",
    "cbow_prediction_terms",
    "cbow_terms_with_fit",
    "collinear_order_ratios",
    "correction_max_order",
    "decoder_embedding_paths",
    "direct_path_prediction",
    "embedding_gradient",
    "fit_activation",
    "fit_order_slopes",
    "init_order_mean_squares",
    "label_max_order",
    "late_regime_prefactor",
    "late_regime_scan",
    "order_norm_ratios",
    "order_pattern_count",
    "order_rms_ratios",
    "preactivation_range",
    "predicted_slope",
    "stirling2",
]
