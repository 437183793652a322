"""Connecting to a Dask scheduler or a Ray cluster, failing within seconds when it is absent.

A scheduler or a head that does not answer must not leave a run waiting forever (Ray's
``ray.init`` waits for a dead GCS address for minutes, a Dask ``Client`` given a scheduler
file that does not exist waits for it for good): :func:`connect_dask` and
:func:`connect_ray` give up after ``timeout`` seconds with a :class:`ConnectionError`
naming the address.  Neither imports Dask or Ray until called.

A Ray this process starts (``connect_ray("local")``, :func:`start_local_ray`) listens on
127.0.0.1 only: its GCS, raylet, workers, dashboard agent and runtime-env agent are
reachable from this machine alone (Ray's token authentication guards them too).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import os
import socket
import time
from urllib.parse import urlsplit

from elmscale.core.lifeline import sigterm_kept

__all__ = [
    "CONNECT_TIMEOUT",
    "LOOPBACK",
    "connect_dask",
    "connect_ray",
    "start_local_ray",
    "security_for",
    "tls_security",
]

CONNECT_TIMEOUT = 10.0  # seconds; a scheduler or head starting at the same time has this long
_RETRY_EVERY = 0.25
log = logging.getLogger(__name__)
_RAY_CLIENT_PORT = 10001
LOOPBACK = "127.0.0.1"  # the node address of a Ray started here


def connect_dask(
    address: str | None = None,
    *,
    scheduler_file: str | os.PathLike | None = None,
    timeout: float = CONNECT_TIMEOUT,
    security=None,
):
    """A ``distributed.Client`` of the scheduler at ``address`` (or named by
    ``scheduler_file``); :class:`ConnectionError` naming it if it does not answer within
    ``timeout`` seconds.

    ``security``: a ``distributed.Security`` (:func:`tls_security` makes one from files)
    for a ``tls://`` scheduler; unset, Dask's own configuration gives it
    (``distributed.comm.tls.ca-file``, ``.client.cert``, ``.client.key``, or their
    ``DASK_DISTRIBUTED__COMM__TLS__...`` variables).  A ``tls://`` address with neither is a
    :class:`ValueError` naming it, before any connection is tried."""
    from distributed import Client

    if (address is None) == (scheduler_file is None):
        raise ValueError("give a Dask scheduler address or a scheduler file, not both or neither")
    where = f"at {address}"
    if scheduler_file is not None:
        address = _scheduler_file_address(os.fspath(scheduler_file), timeout)
        where = f"at {address} (scheduler file {os.fspath(scheduler_file)})"
    security = security_for(str(address), security)
    try:
        if scheduler_file is not None:
            return Client(
                scheduler_file=os.fspath(scheduler_file), timeout=timeout, security=security
            )
        return Client(address, timeout=timeout, security=security)
    except (OSError, TimeoutError) as exc:
        raise ConnectionError(
            f"cannot reach the Dask scheduler {where} within {timeout:g} s ({exc}); is it running?"
        ) from exc


def tls_security(ca_file=None, cert=None, key=None):
    """A ``distributed.Security`` for a ``tls://`` scheduler from PEM files: the CA that
    signed the cluster's certificates, this client's certificate, and its key (omitted
    when the certificate file holds it).  None when no file is given.  A file that cannot
    be read is a :class:`ValueError` naming it; the files' contents never reach an error or
    a log."""
    if ca_file is None and cert is None and key is None:
        return None
    from distributed import Security

    for name, path in (("CA file", ca_file), ("certificate", cert), ("key", key)):
        if path is None:
            if name != "key":
                raise ValueError(
                    f"TLS to a Dask scheduler needs a {name} as well "
                    "(--tls-ca-file and --tls-cert, [compute] tls_ca_file and tls_cert)"
                )
            continue
        if not os.path.isfile(path) or not os.access(path, os.R_OK):
            raise ValueError(f"the TLS {name} {os.fspath(path)}: no such readable file")
    return Security(
        tls_ca_file=os.fspath(ca_file),
        tls_client_cert=os.fspath(cert),
        tls_client_key=None if key is None else os.fspath(key),
        require_encryption=True,
    )


def security_for(address: str, security):
    """The security to reach the scheduler at ``address`` with: ``security``, or for a
    ``tls://`` address without it, Dask's configured one; a ``tls://`` address that neither
    gives certificates for is refused here, naming it (Dask's own error would come from
    deep in its TLS setup, after the timeout)."""
    if security is not None or not address.startswith("tls://"):
        return security
    from distributed import Security

    configured = Security()
    if configured.tls_ca_file and configured.tls_client_cert:
        return configured
    raise ValueError(
        f"the Dask scheduler {address} speaks TLS: give its CA file and this client's "
        "certificate and key (--tls-ca-file, --tls-cert, --tls-key; [compute] tls_ca_file, "
        "tls_cert, tls_key; security= in Python), or set them in Dask's configuration "
        "(distributed.comm.tls.ca-file, distributed.comm.tls.client.cert / .key)"
    )


def _scheduler_file_address(path: str, timeout: float) -> str:
    """The address a scheduler file names, waiting up to ``timeout`` s for it to be written
    (a scheduler started at the same time writes it when it is up)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with open(path) as fh:
                return str(json.load(fh)["address"])
        except (OSError, ValueError, KeyError) as exc:
            if time.monotonic() >= deadline:
                reason = (
                    "does not exist"
                    if isinstance(exc, FileNotFoundError)
                    else f"names no scheduler ({type(exc).__name__}: {exc})"
                )
                raise ConnectionError(
                    f"the Dask scheduler file {path} {reason} after "
                    f"{timeout:g} s; is the scheduler running?"
                ) from exc
        time.sleep(_RETRY_EVERY)


def connect_ray(address: str | None, *, timeout: float = CONNECT_TIMEOUT, **init_kwargs) -> None:
    """Initialise Ray for ``address`` unless Ray is initialised already (then it is used as
    it is).

    ``"local"`` starts a Ray in this process listening on 127.0.0.1 only
    (:func:`start_local_ray`; ``init_kwargs`` go to ``ray.init``, for example
    ``num_cpus``); a loopback ``host:port`` joins such a Ray from another process.
    ``"host:port"`` (a head's GCS) and ``"ray://host:port"`` (Ray
    Client) must accept a TCP connection within ``timeout`` seconds, and ``"auto"`` must
    find a running cluster (``RAY_ADDRESS``, or the last ``ray start`` on this machine)
    that does; otherwise :class:`ConnectionError` naming the address.
    """
    import ray

    if ray.is_initialized():
        return
    if address is None:
        raise ValueError(
            "Ray is not initialised: call ray.init() first or pass a Ray address "
            "(for example 'auto' for a cluster started with `ray start`)"
        )
    if address == "local":
        start_local_ray(**init_kwargs)
        return
    init_kwargs.setdefault("log_to_driver", False)
    target = _find_auto_address() if address == "auto" else address
    host, port = _host_port(target)
    if not _accepts_connections(host, port, timeout):
        found = f" (found by 'auto' at {target})" if address == "auto" else ""
        raise ConnectionError(
            f"cannot reach the Ray cluster at {address}{found}: nothing "
            f"accepts connections on {host}:{port} within {timeout:g} s;"
            " is it running?"
        )
    if is_loopback(host):
        # a local Ray on 127.0.0.1 (start_local_ray): joined with the same switch, else
        # Ray swaps 127.0.0.1 for this machine's outward address and cannot reach it
        with _ray_clusters_off(), sigterm_kept():
            ray.init(address=address, **init_kwargs)
    else:
        with sigterm_kept():
            ray.init(address=address, **init_kwargs)


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` is this machine only: "localhost", 127.0.0.0/8, ::1, or an
    IPv4-mapped loopback (``::ffff:127.0.0.1``: how Ray's gRPC servers on 127.0.0.1 show;
    Python < 3.13 does not count it); a scope (``%lo``) is ignored, other names are not."""
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host.split("%")[0])
    except ValueError:  # a host name
        return False
    return (getattr(ip, "ipv4_mapped", None) or ip).is_loopback


def start_local_ray(**init_kwargs) -> str:
    """Start a Ray in this process whose servers all listen on 127.0.0.1 (``init_kwargs``
    go to ``ray.init``, for example ``num_cpus``); returns its session folder, which the
    command line of each server it starts names (the raylet's agents and workers are the
    raylet's children), so that its processes can be told from another Ray's.

    Ray binds its GCS, raylet, core workers and agents to the node's address, and to every
    interface unless that address is a loopback one; but it turns a loopback
    ``_node_ip_address`` into the machine's outward address unless Ray clusters are off
    (``ray_constants.ENABLE_RAY_CLUSTER``, false on macOS and Windows, where a local Ray
    is on 127.0.0.1 for this reason).  It is switched off while ``ray.init`` starts the
    node, and back afterwards; Ray's processes are given the node address on their command
    lines.
    """
    import ray

    init_kwargs.setdefault("log_to_driver", False)
    init_kwargs.setdefault("_node_ip_address", LOOPBACK)
    init_kwargs.setdefault("dashboard_host", LOOPBACK)
    with _ray_clusters_off(), sigterm_kept():
        context = ray.init(address="local", **init_kwargs)
    node_ip = ray.util.get_node_ip_address()
    if not ipaddress.ip_address(node_ip).is_loopback:
        log.warning(
            "the local Ray's node address is %s, not %s: its servers listen beyond this "
            "machine (Ray's token authentication guards them)",
            node_ip,
            LOOPBACK,
        )
    return str(context.address_info["session_dir"])


@contextlib.contextmanager
def _ray_clusters_off():
    """Ray's "clusters off" switch (macOS / Windows: the node's address is 127.0.0.1)
    while the block runs; nothing when this Ray has none."""
    try:
        from ray._private import ray_constants
    except ImportError:  # a Ray whose internals moved: start_local_ray says so afterwards
        yield
        return
    if not hasattr(ray_constants, "ENABLE_RAY_CLUSTER"):
        yield
        return
    saved = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved


def _find_auto_address() -> str:
    """The cluster ``ray.init(address="auto")`` would join, without joining it."""
    try:
        from ray._private.services import get_ray_address_from_environment
    except ImportError:  # a Ray whose internals moved: the cluster is found by ray.init
        return "auto"
    try:
        return get_ray_address_from_environment("auto", None)
    except ConnectionError as exc:
        raise ConnectionError(
            "cannot reach a Ray cluster at auto: no running Ray found "
            "(RAY_ADDRESS is unset and no `ray start` cluster runs on this "
            "machine); start one or give its address"
        ) from exc


def _host_port(address: str) -> tuple[str, int] | tuple[None, None]:
    """Host and port of ``host:port`` or ``scheme://host[:port]``; (None, None) for "auto"
    left to Ray."""
    if address == "auto":
        return None, None
    parts = urlsplit(address if "://" in address else f"//{address}")
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"Ray address {address!r}: the port is not a number") from exc
    if port is None and parts.scheme == "ray":
        port = _RAY_CLIENT_PORT
    if not parts.hostname or port is None:
        raise ValueError(
            f"Ray address {address!r}: expected 'auto', 'local', 'host:port' or 'ray://host:port'"
        )
    return parts.hostname, port


def _accepts_connections(host: str | None, port: int | None, timeout: float) -> bool:
    """Whether ``host:port`` accepts a TCP connection within ``timeout`` s (retried: a head
    may be starting)."""
    if host is None:
        return True
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        try:
            with socket.create_connection((host, port), timeout=max(remaining, _RETRY_EVERY)):
                return True
        except OSError:
            if time.monotonic() + _RETRY_EVERY >= deadline:
                return False
        time.sleep(_RETRY_EVERY)
