"""Mathematical labels written the plain-text way (``ρ_next``, ``S^emb``, ``W_O W_V w_α``) as HTML
with sub- and superscripts, for the pages a browser shows: ``report.html`` and the explorer, whose
plotly.js draws ``<sub>`` and ``<sup>`` in titles, legends and axes. No TeX renderer: a page must
open offline, and the labels need nothing beyond sub- and superscripts (docs/explorer.md)."""

from __future__ import annotations

import re
from html import escape

#: A symbol (one letter, Greek or Latin) with a sub- or superscript written the
#: plain-text way: ``ρ_next``, ``S^emb``, ``S^sig,(0)``, ``φ^{attn,ℓ}``, ``W_O``, ``ρ_(0)``, ``c_k``.
_SCRIPT = re.compile(r"(?<![\w.])([A-Za-zα-ωΑ-Ω])([_^])(\{[^}]*\}|\([^)]*\)|[A-Za-z0-9α-ωℓ]+(?:,\([^)]*\))?)")


def typeset(text: str) -> str:
    """``text`` as HTML that Plotly and the browser show typeset: ``ρ_next`` → ρ<sub>next</sub>,
    ``S^emb`` → S<sup>emb</sup>, ``φ^{attn,ℓ}`` → φ<sup>attn,ℓ</sup> (braces dropped); the rest
    HTML-escaped. A script follows a lone letter only, so names such as ``val_loss`` stay."""
    def script(match: re.Match) -> str:
        body = match.group(3)
        body = body[1:-1] if body.startswith("{") else body
        tag = "sub" if match.group(2) == "_" else "sup"
        return f"{match.group(1)}<{tag}>{body}</{tag}>"

    return _SCRIPT.sub(script, escape(text, quote=False))
