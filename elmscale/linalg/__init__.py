"""Dense linear algebra of the ridge ELMs: Gram reductions (``gram``), the ridge solution
and its eigendecomposition C path (``ridge``) and target encodings (``targets``)."""
