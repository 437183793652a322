"""Feature maps: random hidden layers (``layers``), kernels against basis rows (``kernels``)
and feature masks (``masks``), behind one small interface (``base.FeatureMap``; rebuilt from
their ``to_dict()`` by ``base.feature_map_from_dict``)."""

# Importing the maps' modules registers their types with base.feature_map_from_dict (they
# import base; base imports none of them, so there is no cycle).
from elmscale.features import kernels, layers, masks  # noqa: E402, F401
