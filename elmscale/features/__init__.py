"""Feature maps: random hidden layers (``layers``), kernels (``kernels``) and feature masks
(``masks``), behind one small interface (``base.FeatureMap``)."""
