"""Feature maps: random hidden layers (``layers``), kernels against basis rows (``kernels``)
and feature masks (``masks``), behind one small interface (``base.FeatureMap``; rebuilt from
their ``to_dict()`` by ``base.feature_map_from_dict``)."""
