"""A worker lost mid-fit with Dask collections: the fit fails at once, naming the worker
and the partitions, instead of waiting for the scheduler's ``no-workers-timeout``.

A collection's persisted partition lives in one worker's memory, and elmscale's tasks of
it are restricted to that worker (``allow_other_workers=False``: no partition moves
between workers, see :mod:`elmscale.distributed.collections`).  When that worker is lost,
the scheduler computes the partition again, but only where the restriction allows: on a
worker that is gone, so the tasks wait in the scheduler's ``no-worker`` state, by default
for ever (LightGBM's Dask training has the same limit).

:class:`LostPartitions`, a scheduler plugin registered once per scheduler by
:func:`watch`, fails those tasks instead: a task of elmscale's (a partition's ``_pack``,
``_rows_of`` or a unit's ``_attached`` task) that enters ``no-worker`` restricted strictly
to workers none of which is alive errs with :class:`LostPartitionsError`, and so do the
tasks that wait for it; the fit's wait raises it.  A task of the collections that such a
task waits for (computed under the pack's restriction, which covers the pack's whole graph)
has its restriction made loose instead: the collection's data are computed again wherever
the scheduler puts them, and the collection stays usable.  Other tasks are left alone.  Where the
scheduler cannot load elmscale (registration fails), fits behave as before.
"""

from __future__ import annotations

import logging
import re
import time

from distributed.diagnostics.plugin import SchedulerPlugin

__all__ = ["LostPartitions", "LostPartitionsError", "watch"]

logger = logging.getLogger(__name__)

#: Key prefixes of elmscale's tasks restricted to the worker that holds their partitions
PLACED_PREFIXES = ("_pack-", "_rows_of-", "_attached-")
_PARTITION = re.compile(r"^_pack-(\d+)-")


class LostPartitionsError(RuntimeError):
    """A worker holding persisted partitions of a fit's Dask collections was lost: the
    partitions are gone, and their tasks run nowhere else (see the module)."""


#: Tasks looked at, at most, for an elmscale task waiting on a stranded one
_MAX_WALK = 100_000


def _feeds_placed(ts) -> bool:
    """Whether one of elmscale's placed tasks waits on ``ts`` (directly or not)."""
    todo, seen = list(ts.dependents), set()
    while todo and len(seen) < _MAX_WALK:
        task = todo.pop()
        if task.key in seen:
            continue
        seen.add(task.key)
        if str(task.key).startswith(PLACED_PREFIXES):
            return True
        todo.extend(task.dependents)
    return False


def _partitions_of(ts) -> list[int]:
    """The partition numbers a task is (a pack) or reads (its packs)."""
    keys = [ts.key, *(d.key for d in ts.dependencies)]
    found = (_PARTITION.match(str(key)) for key in keys)
    return sorted({int(m.group(1)) for m in found if m})


class LostPartitions(SchedulerPlugin):
    """Fails elmscale's placed tasks whose workers are all gone (see the module)."""

    name = "elmscale-lost-partitions"
    idempotent = True

    async def start(self, scheduler) -> None:
        self.scheduler = scheduler

    def transition(self, key, start, finish, *args, **kwargs) -> None:
        if finish == "no-worker":
            # not inside the scheduler's own transition: right after it
            self.scheduler.loop.add_callback(self._fail_if_stranded, key)

    def _fail_if_stranded(self, key) -> None:
        from distributed.protocol import pickle

        scheduler = self.scheduler
        ts = scheduler.tasks.get(key)
        if ts is None or ts.state != "no-worker":
            return
        restricted = set(ts.worker_restrictions or ())
        if ts.loose_restrictions or not restricted or restricted & set(scheduler.workers):
            return
        stimulus_id = f"elmscale-lost-partitions-{time.time()}"
        if not str(key).startswith(PLACED_PREFIXES):
            if _feeds_placed(ts):  # the collection's own task: computed again anywhere
                ts.loose_restrictions = True
                scheduler.transitions({key: "processing"}, stimulus_id=stimulus_id)
            return
        partitions = _partitions_of(ts)
        which = f"partition(s) {partitions}" if partitions else "partitions"
        error = LostPartitionsError(
            f"the Dask worker {', '.join(sorted(restricted))} was lost with the persisted "
            f"{which} of the Dask collections it held (task {key}); a persisted partition "
            "lives only in its worker's memory, and elmscale runs its tasks there (none "
            "moves between workers). Persist the collections again and fit again, or fit "
            "from Parquet (any worker reads a Parquet unit)"
        )
        recommendations = scheduler.transition(
            key, "erred", exception=pickle.dumps(error), cause=key, stimulus_id=stimulus_id
        )
        scheduler.transitions(recommendations, stimulus_id=stimulus_id)
        logger.error("%s", error)


def watch(client) -> None:
    """Register :class:`LostPartitions` on ``client``'s scheduler (idempotent: once per
    scheduler; a scheduler that cannot load it leaves fits as before, with a warning in
    the log)."""
    try:
        client.register_plugin(LostPartitions(), name=LostPartitions.name)
    except Exception as exc:  # noqa: BLE001 - an older or foreign scheduler: as before
        logger.warning(
            "elmscale could not watch for lost partitions on the scheduler (%s): a worker "
            "lost mid-fit leaves the fit waiting for the scheduler's no-workers-timeout",
            exc,
        )
