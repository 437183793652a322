"""Each Dask pass's time and traffic (issue 53), as one record per pass: the Newton
passes' (``pass_timings_``), the ELM's Gram reduction's (``gram_timings_``).

A pass is one map (or map-reduce) over the data's blocks or units, started and awaited by
this process (the coordinator).  Its record's fields, ``PASS_COLUMNS``:

* ``seconds``: the pass's wall time here;
* ``coordinator_s``: this process's own work in it (building and sending the tasks, the
  last sums, the solves between passes);
* ``map_s``: from the tasks sent to the answer in hand;
* ``compute_s``: the workers' compute, from Dask's task stream (``get_task_stream``: each
  task's ``compute`` interval), as the slowest block's (Newton: one task a block) or the
  busiest worker's (the Gram: a worker's unit and sum tasks added);
* ``cpu_s``: the thread CPU of the same (Newton: timed in the task; the Gram: Dask's own
  per-worker metric, ``Worker.digests_total``'s ``("execute", ..., "thread-cpu",
  "seconds")``, before and after the pass);
* ``wait_s``: ``map_s`` less ``compute_s``: the scheduler's round trips, the messages and
  their (de)serialization, the workers' idle time between tasks;
* ``transfer_s``: inputs fetched from other workers (the task stream's ``transfer``);
* ``bytes_sent``, ``bytes_returned``: what the tasks took in (their arguments: Dask's
  ``sizeof``) and what came back here (Dask's ``nbytes`` of the results).

Without a client the same fields are filled where they mean something here: no task
stream, so ``compute_s`` and ``wait_s`` are NaN, ``cpu_s`` this process's CPU time, no
bytes.  ``timings_array`` is the float array an estimator keeps (a model file holds it);
``breakdown_table`` prints it.
"""

from __future__ import annotations

import time
from collections import defaultdict

import numpy as np

__all__ = ["PASS_COLUMNS", "DaskPass", "breakdown_table", "payload_bytes", "timings_array"]

#: The columns of ``timings_array`` (an estimator's ``pass_timings_``, ``gram_timings_``)
PASS_COLUMNS = (
    "seconds",
    "coordinator_s",
    "map_s",
    "compute_s",
    "cpu_s",
    "wait_s",
    "transfer_s",
    "bytes_sent",
    "bytes_returned",
)


def payload_bytes(value) -> int:
    """The bytes of the arrays in ``value`` (nested tuples, lists, dicts): what a message
    carrying it moves, the few bytes of its scalars and framing left out."""
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, dict):
        return sum(payload_bytes(v) for v in value.values())
    if isinstance(value, (tuple, list)):
        return sum(payload_bytes(v) for v in value)
    return 0


def timings_array(timings: list[dict]) -> np.ndarray:
    """Pass records as a (passes x ``PASS_COLUMNS``) float array (what a model file can
    hold): a field given per block (a list) as its largest, the slowest block's."""
    out = np.full((len(timings), len(PASS_COLUMNS)), np.nan)
    for i, t in enumerate(timings):
        for j, name in enumerate(PASS_COLUMNS):
            value = t[name]
            if isinstance(value, list):
                value = max(value) if value else np.nan
            out[i, j] = np.nan if value is None else value
    return out


def breakdown_table(timings) -> str:
    """Each pass's breakdown (pass records, or ``timings_array``'s) as a table, one line a
    pass, then the sums."""
    if not isinstance(timings, np.ndarray):
        timings = timings_array(timings)
    columns = ("seconds", "compute_s", "cpu_s", "wait_s", "coordinator_s")
    at = [PASS_COLUMNS.index(c) for c in columns]
    sent, back = PASS_COLUMNS.index("bytes_sent"), PASS_COLUMNS.index("bytes_returned")
    lines = [
        f"{'pass':>4} {'wall s':>7} {'compute s':>9} {'cpu s':>7} {'wait s':>7} "
        f"{'coord s':>7} {'KB sent':>8} {'KB back':>8}"
    ]
    for i, row in enumerate(timings):
        cells = " ".join(f"{row[j]:>{w}.3f}" for j, w in zip(at, (7, 9, 7, 7, 7)))
        lines.append(f"{i:>4} {cells} {row[sent] / 1024:>8.0f} {row[back] / 1024:>8.0f}")
    sums = np.nansum(timings, axis=0)
    cells = " ".join(f"{sums[j]:>{w}.2f}" for j, w in zip(at, (7, 9, 7, 7, 7)))
    lines.append(f"{'all':>4} {cells} {sums[sent] / 1024:>8.0f} {sums[back] / 1024:>8.0f}")
    lines.append(
        "(compute, cpu: the slowest block's or busiest worker's; wait: the map's time beyond"
        " its compute)"
    )
    return "\n".join(lines)


def _thread_cpu(dask_worker) -> float:
    """The thread CPU seconds of every task this worker has run (Dask's own metric)."""
    return float(
        sum(
            value
            for name, value in dask_worker.digests_total.items()
            if isinstance(name, tuple)
            and name[0] == "execute"
            and name[-2:] == ("thread-cpu", "seconds")
        )
    )


def _workers_cpu(client) -> dict:
    """``_thread_cpu`` of each worker that answers (a worker lost during a pass, or not
    back yet, is left out: the record's CPU is then None, the fit goes on)."""
    try:
        return client.run(_thread_cpu, on_error="ignore")
    except Exception:  # (the cluster going away: the pass's own error, if any, stands)
        return {}


class DaskPass:
    """One pass's record (``PASS_COLUMNS``), appended to ``timings`` when the pass ends.

    ``with DaskPass(client, timings) as record:`` around the pass; the code that submits
    its tasks calls ``record.sent(futures, inputs)`` once they are sent (their keys find
    them in the task stream; ``inputs``: what they took in), and the ``with`` block ends
    once the answer is in hand.  ``timings`` None: nothing is recorded (no task stream, no
    extra round trip).  Without a client: the wall time and this process's CPU.
    """

    def __init__(self, client, timings: list | None):
        self.client = client if timings is not None else None
        self.timings = timings
        self.keys: list = []
        self.back_keys: list = []
        self.bytes_sent = 0
        self._submitted = None

    def sent(self, futures, inputs=None, back=None) -> None:
        """The pass's tasks are sent: ``futures``; ``inputs``: what they took in;
        ``back``: those whose results come here (default: all)."""
        if self.timings is None:
            return
        self._submitted = time.perf_counter()
        self.keys.extend(f.key for f in futures)
        self.back_keys.extend(f.key for f in (futures if back is None else back))
        if self.client is not None and inputs is not None:
            from dask.sizeof import sizeof

            self.bytes_sent += int(sizeof(inputs))

    def __enter__(self):
        if self.timings is None:
            return self
        self._stream = None
        if self.client is not None:
            from distributed import get_task_stream

            self._cpu_before = _workers_cpu(self.client)
            self._stream = get_task_stream(client=self.client)
            self._stream.__enter__()
        self._cpu = time.process_time()
        self._started = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        if self.timings is None:
            return
        answered = time.perf_counter()
        cpu = time.process_time() - self._cpu
        submitted = self._submitted if self._submitted is not None else self._started
        if self._stream is None:
            if exc[0] is None:
                self.timings.append(
                    {
                        "seconds": answered - self._started,
                        "coordinator_s": submitted - self._started,
                        "map_s": answered - submitted,
                        "compute_s": None,
                        "cpu_s": cpu,
                        "wait_s": None,
                        "transfer_s": 0.0,
                        "bytes_sent": 0,
                        "bytes_returned": 0,
                    }
                )
            return
        self._stream.__exit__(*exc)
        if exc[0] is not None:
            return
        after = _workers_cpu(self.client)
        wanted, back = set(self.keys), set(self.back_keys)
        found = [r for r in self._stream.data if r["key"] in wanted]
        compute: dict = defaultdict(float)
        transfer = 0.0
        for record in found:
            for s in record["startstops"]:
                if s["action"] == "compute":
                    compute[record["worker"]] += s["stop"] - s["start"]
                elif s["action"] == "transfer":
                    transfer += s["stop"] - s["start"]
        busiest = max(compute, key=compute.get) if compute else None
        map_s = answered - submitted
        compute_s = compute[busiest] if busiest is not None else 0.0
        self.timings.append(
            {
                "seconds": answered - self._started,
                "coordinator_s": submitted - self._started,
                "map_s": map_s,
                "compute_s": compute_s,
                "cpu_s": (
                    max(0.0, after[busiest] - self._cpu_before[busiest])
                    if busiest in after and busiest in self._cpu_before
                    else None  # (a worker lost or come since: none to compare)
                ),
                "wait_s": max(0.0, map_s - compute_s),
                "transfer_s": transfer,
                "bytes_sent": self.bytes_sent,
                "bytes_returned": int(sum(r.get("nbytes", 0) for r in found if r["key"] in back)),
            }
        )
