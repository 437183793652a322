"""Test-session settings.  Data helpers: ``_datasets.py`` (../shared/data), ``_problems.py``."""

import os

# scikit-learn's estimator checks include an array-API check that runs only
# when SciPy's array API support is on; it must be set before SciPy loads.
os.environ.setdefault("SCIPY_ARRAY_API", "1")

import pytest


@pytest.fixture(scope="session")
def dask_client():
    """A real two-worker Dask LocalCluster (processes, one thread each), once per session."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        yield client


@pytest.fixture(scope="session")
def ray_session():
    """A real local Ray with 2 CPUs, once per session."""
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
