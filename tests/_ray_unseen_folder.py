"""A script run by tests/test_batch_scoring.py (not a test module): a local Ray started
here, then this process's main thread alone in a private mount namespace with a tmpfs over
``hidden`` (the Ray workers, other processes, keep the machine's view), then the Ray
shared-folder probe of each case, one line each on stdout."""

import ctypes
import sys
from pathlib import Path

from elmscale.core.errors import DataError
from elmscale.data.storage import locate
from elmscale.distributed.connect import start_local_ray
from elmscale.io.batch_scoring import ScoreJob, check_workers_see

shared, hidden = Path(sys.argv[1]), Path(sys.argv[2])
start_local_ray(num_cpus=1, include_dashboard=False, log_to_driver=False)
libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNS, MS_REC, MS_PRIVATE = 0x00020000, 0x4000, 0x40000
if libc.unshare(CLONE_NEWNS) != 0:
    sys.exit(f"unshare: errno {ctypes.get_errno()}")
if libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
    sys.exit(f"mount --make-rprivate /: errno {ctypes.get_errno()}")
if libc.mount(b"tmpfs", str(hidden).encode(), b"tmpfs", 0, None) != 0:
    sys.exit(f"mount tmpfs: errno {ctypes.get_errno()}")
(hidden / "in.parquet").write_bytes(b"x" * 100)  # seen by this thread only


def job(source, target):
    return ScoreJob(locate(source), locate(target), ("f1",), (), False, 1000, 1)


cases = {
    "shared": job(shared / "in.parquet", shared / "out" / "in.parquet"),
    "hidden_output": job(shared / "in.parquet", hidden / "out" / "in.parquet"),
    "hidden_input": job(hidden / "in.parquet", shared / "out2" / "in.parquet"),
}
for name, one in cases.items():
    try:
        check_workers_see(None, [one], ray_address="auto")
        print(f"{name}: seen")
    except DataError as exc:
        print(f"{name}: DataError: {exc}")
