"""Running work elsewhere: executors (this process, a Dask client, a Ray address), the unit
functions a worker runs on a Parquet work unit (``units``) and the data-plane operations
built on them (``dataset_ops``)."""
