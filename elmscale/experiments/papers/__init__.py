"""The papers ``elmscale reproduce`` knows: name -> "module:function" giving its protocol.

A paper plugs in as one module here with a ``protocol(quick, trials)`` function and one
entry below; ``None`` marks a paper whose family is not built yet.
"""

from __future__ import annotations

PAPERS: dict[str, str | None] = {
    "sparse-elm": "elmscale.experiments.papers.sparse_elm:protocol",
    "boosting-ridge": "elmscale.experiments.papers.boosting_ridge:protocol",
    "flsa-svm": "elmscale.experiments.papers.flsa_svm:protocol",
    "felm": "elmscale.experiments.papers.felm:protocol",
}
