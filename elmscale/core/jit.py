"""All numba kernels of elmscale, in one place.

Pure array-in / array-out functions: no Dask, no Ray, no Python objects.  Each
parallel kernel loops over rows with ``prange``; callers set numba's thread count
(see ``_threads.thread_budget``).  ``error_model="numpy"`` (no division-by-zero
checks) and 1-D row views (``W[k]`` rather than ``W[k, j]``) keep the inner loops
vectorised: measured 6x on the sigmoid layer.

Why a hand-written exp: inside ``@njit`` numba calls the scalar libm ``exp``,
which the compiler cannot vectorise.  ``_vexp32`` / ``_vexp64`` use a
Cody-Waite range reduction, a polynomial, and an integer add on the exponent
bits of a viewed array, which LLVM turns into SIMD code: 6x faster for the
sigmoid activation, at the accuracy of libm (float32: < 1.2e-7 relative;
float64: < 2e-16 relative, measured against numpy in tests/test_hidden.py).

The kernels that evaluate kernels and layers allow fastmath's "contract" only:
multiply-adds fuse (one rounding instead of two, never less accurate), nothing is
reordered, so results stay deterministic and K(a, b) = K(b, a) to the bit.  Measured
with it: the float64 exp 0.68 ns against 1.3 ns a value, a 2,400-row gaussian K
17 ms against 20, the exact float64 product of 5,204 support vectors with 29,768 rows
0.31 s against 0.40 s, a float32 solver column 30 us against 48 us (one thread).

Numba caches a function's machine code by its own file only (its path and content), but
sparse_dual.py's cached functions hold the code of these: so elmscale keys each cached
kernel by all kernel sources and drops the cache when any of them changed
(``core/compile_cache.py``), and nothing needs deleting after an edit here.  The cache files
(``*.nbi, *.nbc``) are in the ``__pycache__`` folders beside the code, or in the folder
``elmscale warmup`` names first (``ELMSCALE_CACHE_DIR``, a user cache folder for a
read-only install); deleting them costs a compile, and a wheel's carried kernels are put
back by the next process (``core/carried_kernels.py``).

First-fit compile time (``benchmarks/first_fit.py``): helpers that would be compiled on
their own and then again inside every caller (numba links a callee's code into the
caller's and optimises it there once more) are either inlined into their one caller
(``inline="always"``) or compiled once and called (``_kernel_row``, ``_hidden_row``: a
call per row segment, which keeps the parallel loops' bodies, and their compile time,
small); calls that pass a literal (``0``, ``False``) to a compiled function pass
``np.int64(0)`` / ``np.bool_(False)``, since numba compiles a literal argument's value as
a signature of its own.
"""

from __future__ import annotations

import platform

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

from elmscale.core import carried_kernels, compile_cache

# before the first kernel: numba caches in the folder compile_cache chose, keying each
# kernel by all kernel sources, and the kernels a wheel carries are in place there
compile_cache.prepare_numba()
carried_kernels.use(compile_cache.configured())

_LOG2E = 1.4426950408889634
# ln 2 split in a high part with few mantissa bits (k * hi is exact) and a low part.
_LN2_HI_32 = np.float32(0.693359375)
_LN2_LO_32 = np.float32(-2.12194440e-4)
_LN2_HI_64 = 6.93147180369123816490e-01
_LN2_LO_64 = 1.90821492927058770002e-10


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _exp32_parts(x):
    """``(p, k)`` with ``exp(x) = p 2^k`` for a float32 ``x`` (clamped to [-87, 88]): the
    one float32 exp polynomial (``_vexp32``, ``_exp32_one``; inlined, so it takes each
    caller's fastmath flags)."""
    x = min(max(x, np.float32(-87.0)), np.float32(88.0))
    k = np.floor(x * np.float32(_LOG2E) + np.float32(0.5))
    r = x - k * _LN2_HI_32 - k * _LN2_LO_32
    p = np.float32(1.0 / 5040.0)
    p = p * r + np.float32(1.0 / 720.0)
    p = p * r + np.float32(1.0 / 120.0)
    p = p * r + np.float32(1.0 / 24.0)
    p = p * r + np.float32(1.0 / 6.0)
    p = p * r + np.float32(0.5)
    p = p * r + np.float32(1.0)
    p = p * r + np.float32(1.0)
    return p, k


# Not inlined: the exps carry their own fastmath flag ("contract": the Horner steps
# become fused multiply-adds, 1.9x faster in float64, no less accurate), which an
# inlined body would take from its caller instead.
@njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"})
def _vexp32(buf, kbuf):
    """In place ``buf = exp(buf)`` for a 1-D float32 array (``kbuf``: int32 scratch)."""
    n = buf.shape[0]
    for j in range(n):
        p, k = _exp32_parts(buf[j])
        buf[j] = p
        kbuf[j] = np.int32(k) << 23
    bits = buf.view(np.int32)
    for j in range(n):
        bits[j] += kbuf[j]


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"})
def _vexp64(buf, kbuf):
    """In place ``buf = exp(buf)`` for a 1-D float64 array (``kbuf``: int64 scratch).

    Arguments below -708 give 0 (the true value is below 1e-307).
    """
    n = buf.shape[0]
    for j in range(n):
        x = buf[j]
        tiny = x < -708.0
        x = min(max(x, -708.0), 709.0)
        k = np.floor(x * _LOG2E + 0.5)
        r = (x - k * _LN2_HI_64) - k * _LN2_LO_64
        # Taylor series to r^13 / 13!: |r| <= 0.347, remainder < 1e-17 relative.
        p = 1.0 / 6227020800.0
        p = p * r + 1.0 / 479001600.0
        p = p * r + 1.0 / 39916800.0
        p = p * r + 1.0 / 3628800.0
        p = p * r + 1.0 / 362880.0
        p = p * r + 1.0 / 40320.0
        p = p * r + 1.0 / 5040.0
        p = p * r + 1.0 / 720.0
        p = p * r + 1.0 / 120.0
        p = p * r + 1.0 / 24.0
        p = p * r + 1.0 / 6.0
        p = p * r + 0.5
        p = p * r + 1.0
        p = p * r + 1.0
        buf[j] = 0.0 if tiny else p
        kbuf[j] = 0 if tiny else np.int64(k) << 52
    bits = buf.view(np.int64)
    for j in range(n):
        bits[j] += kbuf[j]


@intrinsic
def _prefetch(typingctx, arr, index):
    """LLVM's ``prefetch`` (read, keep in all cache levels) of ``&arr[index]``."""
    sig = types.void(arr, index)

    def codegen(context, builder, signature, args):
        array_type = signature.args[0]
        array = context.make_array(array_type)(context, builder, args[0])
        pointer = cgutils.get_item_pointer(
            context, builder, array_type, array, [args[1]], wraparound=False
        )
        byte_pointer = ir.IntType(8).as_pointer()
        int32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(
            builder.module,
            ir.FunctionType(ir.VoidType(), [byte_pointer, int32, int32, int32]),
            "llvm.prefetch.p0i8",
        )
        builder.call(
            fn,
            [
                builder.bitcast(pointer, byte_pointer),
                ir.Constant(int32, 0),
                ir.Constant(int32, 3),
                ir.Constant(int32, 1),
            ],
        )
        return context.get_dummy_value()

    return sig, codegen


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def prefetch(a, i):
    """Ask for ``a[i]`` (1-D) to be brought into cache, without waiting for it."""
    _prefetch(a, i)


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def prefetch_row(A, i):
    """Ask for row ``i`` of ``A`` (2-D, C order) to be brought into cache, a 64-byte line at
    a time, without waiting for it.  For loops over rows in a random order: the
    hardware prefetcher cannot guess the next row, and a dependent update (dual
    coordinate descent's beta) stops the CPU from running ahead; prefetching the row
    a few steps ahead made such a loop 1.8x faster here (200k x 200 float32 rows)."""
    row = A[i]
    step = max(1, 64 // row.itemsize)
    for k in range(0, row.size, step):
        _prefetch(row, k)


# Atomic loads and stores of int64 array entries, for the solver's helper thread: a plain
# load in a spin loop may be hoisted out of it, and without acquire / release
# ordering the data written before a flag need not be visible after it.
def _int64_pointer(context, builder, array_type, array_value, index):
    array = context.make_array(array_type)(context, builder, array_value)
    return cgutils.get_item_pointer(context, builder, array_type, array, [index], wraparound=False)


@intrinsic
def atomic_load_acquire(typingctx, arr, index):
    """``arr[index]`` (int64, 1-D) read with acquire ordering."""
    sig = types.int64(arr, index)

    def codegen(context, builder, signature, args):
        pointer = _int64_pointer(context, builder, signature.args[0], args[0], args[1])
        return builder.load_atomic(pointer, "acquire", 8)

    return sig, codegen


@intrinsic
def atomic_store_release(typingctx, arr, index, value):
    """``arr[index] = value`` (int64, 1-D) written with release ordering."""
    sig = types.void(arr, index, types.int64)

    def codegen(context, builder, signature, args):
        pointer = _int64_pointer(context, builder, signature.args[0], args[0], args[1])
        builder.store_atomic(args[2], pointer, "release", 8)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def atomic_cas(typingctx, arr, index, expected, new):
    """Compare-and-swap of ``arr[index]`` (int64, 1-D): ``new`` written only if it holds
    ``expected``, atomically (acquire-release); True if it was written."""
    sig = types.boolean(arr, index, types.int64, types.int64)

    def codegen(context, builder, signature, args):
        pointer = _int64_pointer(context, builder, signature.args[0], args[0], args[1])
        pair = builder.cmpxchg(pointer, args[2], args[3], "acq_rel", "acquire")
        return builder.extract_value(pair, 1)

    return sig, codegen


_X86 = platform.machine().lower() in ("x86_64", "amd64", "i686", "x86")


@intrinsic
def cpu_relax(typingctx):
    """A spin loop's pause (x86's ``pause``: the other hyper-thread runs, less power);
    nothing elsewhere."""
    sig = types.void()

    def codegen(context, builder, signature, args):
        if _X86:
            fnty = ir.FunctionType(ir.VoidType(), [])
            pause = cgutils.get_or_insert_function(builder.module, fnty, "llvm.x86.sse2.pause")
            builder.call(pause, [])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def yield_cpu(typingctx):
    """libc's ``sched_yield()``: let another runnable thread have this core."""
    sig = types.void()

    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(ir.IntType(32), [])
        builder.call(cgutils.get_or_insert_function(builder.module, fnty, "sched_yield"), [])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def sleep_us(typingctx, microseconds):
    """libc's ``usleep``: block this thread for about ``microseconds`` (int64)."""
    sig = types.void(types.int64)

    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(ir.IntType(32), [ir.IntType(32)])
        usleep = cgutils.get_or_insert_function(builder.module, fnty, "usleep")
        builder.call(usleep, [builder.trunc(args[0], ir.IntType(32))])
        return context.get_dummy_value()

    return sig, codegen


@njit(cache=True, nogil=True, error_model="numpy")
def shuffle_prefix(a, m, state):
    """Fisher-Yates shuffle of ``a[:m]`` in place, with xorshift64 (``state[0]``, uint64,
    nonzero, advanced) and a multiply-shift range reduction: 5x faster than numba's
    ``np.random.randint`` per element, which cost a tenth of a solver pass over a
    million rows."""
    x = state[0]
    for p in range(m - 1, 0, -1):
        x ^= x << np.uint64(13)
        x ^= x >> np.uint64(7)
        x ^= x << np.uint64(17)
        q = np.int64(((x >> np.uint64(32)) * np.uint64(p + 1)) >> np.uint64(32))
        a[p], a[q] = a[q], a[p]
    state[0] = x


# Dot products.  A plain ``s += a[j] * b[j]`` loop is a chain of dependent adds
# that LLVM may not reorder, so it runs one element per add latency; allowing
# reassociation (and only that) lets it vectorise.  The sums differ from the
# sequential ones by rounding only.
@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract"})
def dot(a, b):
    """``sum(a * b)`` in float64 for 1-D arrays of float32 or float64."""
    s = 0.0
    for j in range(a.shape[0]):
        s += np.float64(a[j]) * np.float64(b[j])
    return s


@njit(cache=True, nogil=True, error_model="numpy")
def weighted_row_sum(M, rows, coef, cols, out):
    """``out = coef @ M[rows][:, cols]`` (all columns when ``cols`` is empty), float64,
    reading only the rows needed and copying none: a precomputed symmetric kernel
    matrix's products with a sparse vector (``M[:, rows] @ coef`` by symmetry)."""
    out[:] = 0.0
    for k in range(rows.shape[0]):
        row = M[rows[k]]
        c = coef[k]
        if cols.shape[0] == 0:
            for j in range(out.shape[0]):
                out[j] += c * row[j]
        else:
            for j in range(out.shape[0]):
                out[j] += c * row[cols[j]]


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract"})
def rows_dot_f32(A, x, out, start, stop):
    """``out[i] = A[i] . x`` for the rows ``[start, stop)`` of a float32 ``A``, ``x`` and the
    sums float64: a cache of float32 kernel columns times a float64 vector, with no float32
    rounding of the products or the sums (BLAS's sgemv would round both)."""
    n = A.shape[1]
    for i in range(start, stop):
        row = A[i]
        acc = 0.0
        for k in range(n):
            acc += np.float64(row[k]) * x[k]
        out[i] = acc


@njit(cache=True, nogil=True, error_model="numpy")
def signed_block(M, rows, signs, out):
    """``out[a, b] = signs[a] signs[b] M[rows[a], rows[b]]``: a kernel matrix's block of
    ``Q = t t' K`` in one pass (``signs = t[rows]``), without numpy's temporaries."""
    m = rows.shape[0]
    for a in range(m):
        row = M[rows[a]]
        sa = signs[a]
        o = out[a]
        for b in range(m):
            o[b] = sa * signs[b] * row[rows[b]]


@njit(cache=True, parallel=True, nogil=True, error_model="numpy")
def exp_inplace_f64(a):
    """``a = exp(a)`` for a 2-D C-contiguous float64 array (used by tests and kernels)."""
    n, m = a.shape
    for i in prange(n):
        kbuf = np.empty(m, np.int64)
        _vexp64(a[i], kbuf)


@njit(cache=True, parallel=True, nogil=True, error_model="numpy")
def exp_inplace_f32(a):
    """``a = exp(a)`` for a 2-D C-contiguous float32 array."""
    n, m = a.shape
    for i in prange(n):
        kbuf = np.empty(m, np.int32)
        _vexp32(a[i], kbuf)


# ---------------------------------------------------------------------------
# Random hidden nodes, one row at a time: each output row depends only on its
# input row (scores do not change with the batch they are computed in), and
# scoring can fuse the layer with the output weights without storing H.
# ---------------------------------------------------------------------------

NODE_CODES = {"sigmoid": 0, "sinusoid": 1, "multiquadric": 2, "gaussian": 3}


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _additive_nodes(row, kind, kbuf32):
    """In place ``row = g(row)`` in float32 for additive nodes, ``row`` holding ``a.x + b``:
    sigmoid (``kind`` 0, eq. 25) or sinusoid (1, eq. 26)."""
    m = row.shape[0]
    if kind == 0:
        for j in range(m):
            row[j] = -row[j]
        _vexp32(row, kbuf32)
        for j in range(m):
            row[j] = np.float32(1.0) / (np.float32(1.0) + row[j])
    else:
        for j in range(m):
            row[j] = np.sin(row[j])


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _rbf_nodes(buf, b, kind, row, kbuf64):
    """``row = g(buf)`` for RBF nodes, ``buf`` (float64, overwritten) holding ``|x - a|^2``:
    multiquadric (``kind`` 2, eq. 27) or gaussian (3, eq. 28)."""
    m = row.shape[0]
    if kind == 2:
        for j in range(m):
            bj = np.float64(b[j])
            row[j] = np.sqrt(buf[j] + bj * bj)
    else:
        for j in range(m):
            buf[j] = -buf[j] / np.float64(b[j])
        _vexp64(buf, kbuf64)
        for j in range(m):
            row[j] = buf[j]


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"})
def _hidden_row(x, W, b, kind, row, buf, kbuf32, kbuf64):
    """``row = h(x)`` (float32) for the layer ``(W, b)`` of node type ``kind``.

    Additive nodes accumulate ``a.x + b`` in float32 (vectorised over nodes);
    RBF nodes accumulate ``|x - a|^2`` in float64 (no cancellation).
    """
    d = x.shape[0]
    m = row.shape[0]
    if kind <= 1:
        for j in range(m):
            row[j] = b[j]
        for k in range(d):
            xk = x[k]
            wk = W[k]  # a 1-D view: W[k, j] indexing defeats vectorisation
            for j in range(m):
                row[j] += xk * wk[j]
        _additive_nodes(row, kind, kbuf32)
        return
    for j in range(m):
        buf[j] = 0.0
    for k in range(d):
        xk = np.float64(x[k])
        wk = W[k]
        for j in range(m):
            diff = xk - np.float64(wk[j])
            buf[j] += diff * diff
    _rbf_nodes(buf, b, kind, row, kbuf64)


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"})
def activate_block(pre, b, kind, out):
    """``out = g(pre)``: the node values ``hidden_block`` computes, from pre-activations
    given (n, m) float64 (``a.x + b`` for additive nodes, rounded to float32 as there;
    ``|x - a|^2`` for RBF nodes), the layer's ``b`` (m,).  Serial: its callers (feature
    selection's re-solves) run side by side on threads."""
    n, m = pre.shape
    row = np.empty(m, np.float32)
    buf = np.empty(m, np.float64)
    kbuf32 = np.empty(m, np.int32)
    kbuf64 = np.empty(m, np.int64)
    for i in range(n):
        if kind <= 1:
            for j in range(m):
                row[j] = pre[i, j]
            _additive_nodes(row, kind, kbuf32)
        else:
            for j in range(m):
                buf[j] = pre[i, j]
            _rbf_nodes(buf, b, kind, row, kbuf64)
        for j in range(m):
            out[i, j] = row[j]


# Parallel loops run over up to 256 chunks of rows so that scratch buffers are
# allocated once per chunk: allocating them per row made the layer 5x slower.
_PARALLEL_CHUNKS = 256


@njit(cache=True, parallel=True, nogil=True, error_model="numpy", fastmath={"contract"})
def hidden_block(X, W, b, kind, out):
    """``out = h(X)``: X (n, d) float32, W (d, m) float32, b (m,) float32.

    The nodes are evaluated in float32; ``out`` (n, m) may be float32 or
    float64 (the same values, widened: their products are then exact in float64).
    """
    n = X.shape[0]
    m = W.shape[1]
    n_chunks = min(n, _PARALLEL_CHUNKS)
    for c in prange(n_chunks):
        row = np.empty(m, np.float32)
        buf = np.empty(m, np.float64)
        kbuf32 = np.empty(m, np.int32)
        kbuf64 = np.empty(m, np.int64)
        for i in range(c * n // n_chunks, (c + 1) * n // n_chunks):
            _hidden_row(X[i], W, b, kind, row, buf, kbuf32, kbuf64)
            orow = out[i]
            for j in range(m):
                orow[j] = row[j]


@njit(cache=True, parallel=True, nogil=True, error_model="numpy", fastmath={"contract"})
def hidden_block_scores(X, W, b, kind, coef, out):
    """``out = h(X) @ coef`` (float64 sums) without storing h(X); coef (m, k) float64."""
    n = X.shape[0]
    m = W.shape[1]
    n_out = coef.shape[1]
    coef_t = np.ascontiguousarray(coef.T)
    n_chunks = min(n, _PARALLEL_CHUNKS)
    for c in prange(n_chunks):
        row = np.empty(m, np.float32)
        buf = np.empty(m, np.float64)
        kbuf32 = np.empty(m, np.int32)
        kbuf64 = np.empty(m, np.int64)
        for i in range(c * n // n_chunks, (c + 1) * n // n_chunks):
            _hidden_row(X[i], W, b, kind, row, buf, kbuf32, kbuf64)
            for o in range(n_out):
                out[i, o] = dot(row, coef_t[o])


# ---------------------------------------------------------------------------
# Kernel blocks K(A, B): rows of A against rows of B.  B is given transposed
# (d x m, C-contiguous) so that the inner loop runs over B's rows and
# vectorises.  Distances and dot products are accumulated in float64.
# ---------------------------------------------------------------------------

KERNEL_CODES = {"gaussian": 0, "laplacian": 1, "polynomial": 2, "mg": 3}
_MATVEC_COLUMNS = 1024  # kernel_rows_matvec's columns at a time: 8 KB of float64 scratch


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _squared_distances(x, unit, Bt, start, stop, out):
    """``out[j] = |x - B[start + j]|^2`` for the columns ``start <= j < stop`` of ``Bt``,
    in the arithmetic of ``unit``'s type: ``x``'s entries are multiplied by it (1.0 or
    ``np.float32(1.0)``, exact), and B's float32 values meet them in that type.

    Four features a pass, the first one assigning: the scratch is read and written a
    quarter as often (measured: a float32 column of 29,768 rows 27 us against 33; the
    exact float64 product of 5,204 support vectors with 29,768 rows, one thread,
    263 ms against 333).
    """
    d = x.shape[0]
    m = stop - start
    d4 = d - d % 4
    for k in range(0, d4, 4):
        x0, x1, x2, x3 = x[k] * unit, x[k + 1] * unit, x[k + 2] * unit, x[k + 3] * unit
        b0, b1 = Bt[k, start:stop], Bt[k + 1, start:stop]
        b2, b3 = Bt[k + 2, start:stop], Bt[k + 3, start:stop]
        if k == 0:
            for j in range(m):
                u0 = x0 - b0[j]
                u1 = x1 - b1[j]
                u2 = x2 - b2[j]
                u3 = x3 - b3[j]
                out[j] = u0 * u0 + u1 * u1 + u2 * u2 + u3 * u3
        else:
            for j in range(m):
                u0 = x0 - b0[j]
                u1 = x1 - b1[j]
                u2 = x2 - b2[j]
                u3 = x3 - b3[j]
                out[j] += u0 * u0 + u1 * u1 + u2 * u2 + u3 * u3
    if d4 == 0:
        for j in range(m):
            out[j] = 0.0
    for k in range(d4, d):
        xk = x[k] * unit
        bk = Bt[k, start:stop]
        for j in range(m):
            diff = xk - bk[j]
            out[j] += diff * diff


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _distance_kernel(acc, m, kind, sigma, sigma_star, tau, kbuf):
    """In place ``acc = K(acc)`` for a kernel of the distance, ``acc`` holding squared
    distances ``|u - v|^2`` (float64, its first ``m`` entries): gaussian, laplacian or mg
    (``kind`` 0, 1, 3)."""
    if kind == 3:
        # memorization-generalization: two gaussians of one distance (scalar exps: the
        # vector exp works in place and this needs both)
        scale = 1.0 / (2.0 * sigma * sigma)
        scale_star = 1.0 / (2.0 * sigma_star * sigma_star)
        for j in range(m):
            d2 = acc[j]
            acc[j] = (1.0 - tau) * np.exp(-d2 * scale) + tau * np.exp(-d2 * scale_star)
        return
    if kind == 0:
        scale = 1.0 / (2.0 * sigma * sigma)
        for j in range(m):
            acc[j] = -acc[j] * scale
    else:
        scale = 1.0 / sigma
        for j in range(m):
            acc[j] = -np.sqrt(acc[j]) * scale
    _vexp64(acc, kbuf)


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"})
def _kernel_row(a_row, Bt, start, stop, kind, sigma, degree, sigma_star, tau, acc, kbuf):
    """``acc[j] = K(a_row, B[start + j])`` in float64 for the columns ``start <= j < stop``
    of ``Bt`` (a range, not a slice of ``Bt``: a 2-D slice's rows are not contiguous
    and its loops do not vectorise)."""
    d = a_row.shape[0]
    m = stop - start
    if kind == 2:
        for j in range(m):
            acc[j] = 0.0
        for k in range(d):
            a = np.float64(a_row[k])
            bk = Bt[k, start:stop]
            for j in range(m):
                acc[j] += a * np.float64(bk[j])
        for j in range(m):
            base = 1.0 + acc[j]
            v = 1.0
            for _ in range(degree):
                v *= base
            acc[j] = v
        return
    _squared_distances(a_row, 1.0, Bt, start, stop, acc)
    _distance_kernel(acc, m, kind, sigma, sigma_star, tau, kbuf)


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _kernel_row32(x, Bt, start, stop, kind, sigma, acc, kbuf):
    """``acc[j] = K(x, B[start + j])`` in float32 for the columns ``start <= j < stop`` of
    ``Bt``, a gaussian (``kind`` 0) or laplacian (1) kernel: float32 differences of the
    float32 inputs, float32 sums of their squares, the float32 exp (``_vexp32``; ``kbuf``
    int32 scratch).  The solver's kernel columns and the single-precision scoring
    (``kernel_rows_matvec``) compute their values here; ``float32_error_bound`` in
    ``features.kernels`` bounds their error."""
    _kernel_argument32(x, Bt, start, stop, kind, sigma, acc)
    _vexp32(acc, kbuf)


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _kernel_argument32(x, Bt, start, stop, kind, sigma, acc):
    """``acc[j]`` = the exp's argument of ``_kernel_row32``, ``-|x - b|^2 / (2 sigma^2)``
    (``kind`` 0) or ``-|x - b| / sigma`` (1), in float32."""
    m = stop - start
    _squared_distances(x, np.float32(1.0), Bt, start, stop, acc)
    if kind == 0:
        scale = np.float32(-1.0 / (2.0 * sigma * sigma))
        for j in range(m):
            acc[j] *= scale
    else:
        scale = np.float32(-1.0 / sigma)
        for j in range(m):
            acc[j] = np.sqrt(acc[j]) * scale


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"})
def distance_kernel_block(d2, kind, sigma, sigma_star, tau, out):
    """``out = K(d2)``: the kernel values ``kernel_rows`` computes, from squared distances
    given (n, m) float64, for a kernel of the distance (``kind`` 0, 1 or 3).  Serial: its
    callers (feature selection's re-solves) run side by side on threads."""
    n, m = d2.shape
    acc = np.empty(m, np.float64)
    kbuf = np.empty(m, np.int64)
    for i in range(n):
        for j in range(m):
            acc[j] = d2[i, j]
        _distance_kernel(acc, m, kind, sigma, sigma_star, tau, kbuf)
        for j in range(m):
            out[i, j] = acc[j]


# The kernel blocks are serial over a range of rows and run side by side on threads by
# ``features.kernels`` (``core.threads.parallel_rows``), not parallel loops: numba compiles
# a parallel loop in 4-5 s where the same serial body takes 1.3 s (a first fit and its first
# predict compiled two of them), and threads taking chunks as they free up share cores with
# a busy process better than a static split.
@njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"})
def kernel_rows(A, Bt, kind, sigma, degree, sigma_star, tau, out, start, stop, symmetric):
    """``out[i, j] = K(A[i], B[j])`` for the rows ``i`` in ``[start, stop)``, the kernel
    ``kind`` (see ``KERNEL_CODES``).  ``symmetric`` (B is A): row ``i`` computes the
    columns ``j >= i`` and writes each value at ``(i, j)`` and ``(j, i)``, half the work
    and the same values to the bit (|u - v| = |v - u|, summed in the same order); rows
    side by side write apart, each below the diagonal only in its own columns.

    gaussian: exp(-|u-v|^2 / (2 sigma^2)) (eq. 29); laplacian: exp(-|u-v| / sigma)
    (eq. 30); polynomial: (1 + u.v)^degree (eq. 31); mg (memorization-generalization,
    the FELM paper's eq. 8 in this library's widths): (1 - tau) exp(-|u-v|^2 / (2 sigma^2))
    + tau exp(-|u-v|^2 / (2 sigma_star^2)).  ``out`` may be float32 or float64; values
    are computed in float64.
    """
    m = Bt.shape[1]
    acc = np.empty(m, np.float64)
    kbuf = np.empty(m, np.int64)
    for i in range(start, stop):
        first = np.int64(i) if symmetric else np.int64(0)
        width = m - first  # the exp runs over the scratch it is given: only this row's part
        _kernel_row(
            A[i], Bt, first, m, kind, sigma, degree, sigma_star, tau, acc[:width], kbuf[:width]
        )
        row = out[i]
        for j in range(width):
            row[first + j] = acc[j]
        if symmetric:
            for j in range(1, width):
                out[first + j, i] = acc[j]


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"})
def kernel_rows_matvec(
    A, Bt, kind, sigma, degree, sigma_star, tau, coef_t, out, start, stop, single
):
    """``out[i, :] = sum_j K(A[i], B[j]) * coef_t[:, j]`` for the rows ``i`` in ``[start,
    stop)``, without storing the block.

    The fused scoring kernel: memory O(m), cost O(n m d).  Each row goes through B's
    columns ``_MATVEC_COLUMNS`` at a time, so that its scratch stays in L1 (measured: the
    exact product of 5,204 support vectors with 29,768 rows, one thread, 275 ms against
    305 ms with whole rows).  ``coef_t`` is (outputs, m), C-contiguous; the sums float64.
    ``single``: gaussian and laplacian values in float32 (``_kernel_row32``, the solver's
    own column arithmetic), the single-precision scoring; polynomial and
    memorization-generalization values are float64 either way, as the solver's columns.
    """
    m = Bt.shape[1]
    n_out = coef_t.shape[0]
    width = min(m, _MATVEC_COLUMNS)
    acc = np.empty(width, np.float64)
    kbuf = np.empty(width, np.int64)
    acc32 = np.empty(width, np.float32)
    kbuf32 = np.empty(width, np.int32)
    in_float32 = single and kind < 2
    for i in range(start, stop):
        for o in range(n_out):
            out[i, o] = 0.0
        for s in range(0, m, width):
            e = min(s + width, m)
            if in_float32:
                a32 = acc32[: e - s]
                _kernel_row32(A[i], Bt, s, e, kind, sigma, a32, kbuf32[: e - s])
                for o in range(n_out):
                    out[i, o] += dot(a32, coef_t[o, s:e])
                continue
            a = acc[: e - s]
            _kernel_row(A[i], Bt, s, e, kind, sigma, degree, sigma_star, tau, a, kbuf[: e - s])
            for o in range(n_out):
                out[i, o] += dot(a, coef_t[o, s:e])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract"})
def _bounded_sums(k32, z, coef, abs_coef):
    """``(sum_j k_j coef_j, sum_j |coef_j| k_j, sum_j |coef_j| k_j z_j)`` in float64, ``k``
    float32 (reassociated: vectorised; rounding only)."""
    total = 0.0
    weight = 0.0
    weight_z = 0.0
    for j in range(k32.shape[0]):
        k = np.float64(k32[j])
        total += k * coef[j]
        w = k * abs_coef[j]
        weight += w
        weight_z += w * np.float64(z[j])
    return total, weight, weight_z


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"})
def kernel_rows_matvec32_bounded(
    A, Bt, kind, sigma, relative, per_z, floor, coef, out, bound, start, stop
):
    """``out[i] = sum_j K32(A[i], B[j]) coef[j]`` (``kernel_rows_matvec``, single, for one
    output, gaussian or laplacian) and ``bound[i] = sum_j |coef[j]| (K32_ij (relative +
    per_z z_ij) + floor)``, ``z_ij`` the exp's float32 argument: the float32 product with
    its error bound (``features.kernels.float32_error_bound``'s terms, ``relative``
    raised by the caller to cover K32 for K), in one pass: the solver's final check."""
    m = Bt.shape[1]
    width = min(m, _MATVEC_COLUMNS)
    acc = np.empty(width, np.float32)
    z = np.empty(width, np.float32)
    kbuf = np.empty(width, np.int32)
    abs_coef = np.abs(coef)
    floor_part = floor * abs_coef.sum()
    for i in range(start, stop):
        total = 0.0
        weight = 0.0
        weight_z = 0.0
        for s in range(0, m, width):
            e = min(s + width, m)
            w = e - s
            a = acc[:w]
            _kernel_argument32(A[i], Bt, s, e, kind, sigma, a)
            for j in range(w):
                z[j] = -a[j]
            _vexp32(a, kbuf[:w])
            t, u, v = _bounded_sums(a, z[:w], coef[s:e], abs_coef[s:e])
            total += t
            weight += u
            weight_z += v
        out[i] = total
        bound[i] = relative * weight + per_z * weight_z + floor_part


SEGMENT_BLOCK = 512  # entries per inner block: the scratch stays in L1


@njit(cache=True, nogil=True, error_model="numpy")
def huber_step_losses(ahead, along, steps, hs, out):
    """``out[j, k]`` = the sum over rows of the Huber hinge with smoothing ``hs[j]`` at the
    margin ``ahead_i - (1 - steps[k]) along_i``: the Newton solver's line search, every
    smoothing and step in one read of the margins (``solvers.primal_newton``).  The Huber
    hinge of m: 1 - m below 1 - h, (1 + h - m)^2 / 4h within h of 1, 0 above 1 + h."""
    out[:] = 0.0
    for i in range(ahead.size):
        a = ahead[i]
        z = along[i]
        for k in range(steps.size):
            r = 1.0 - a + (1.0 - steps[k]) * z
            for j in range(hs.size):
                h = hs[j]
                if r > h:
                    out[j, k] += r
                elif r >= -h:
                    out[j, k] += (r + h) * (r + h) / (4.0 * h)


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"})
def q_segment(
    Xt,
    t,
    i,
    start,
    end,
    kind,
    sigma,
    degree,
    sigma_star,
    tau,
    xi,
    acc32,
    kbuf32,
    acc64,
    kbuf64,
    out,
):
    """``out[j] = t_i t_j K(x_i, x_j)`` (float32) for the columns j in ``[start, end)`` of ``Xt``.

    The solver's kernel-column kernel: ``q_segment_of`` for the column of row ``i`` of
    ``Xt`` itself (``xi``: scratch for its d features).
    """
    d = Xt.shape[0]
    for k in range(d):
        xi[k] = Xt[k, i]
    q_segment_of(
        xi,
        t[i],
        Xt,
        t,
        start,
        end,
        kind,
        sigma,
        degree,
        sigma_star,
        tau,
        acc32,
        kbuf32,
        acc64,
        kbuf64,
        out,
    )


@njit(cache=True, nogil=True, inline="always", error_model="numpy", fastmath={"contract"})
def q_segment_of(
    xi,
    ti,
    Xt,
    t,
    start,
    end,
    kind,
    sigma,
    degree,
    sigma_star,
    tau,
    acc32,
    kbuf32,
    acc64,
    kbuf64,
    out,
):
    """``out[j] = ti t_j K(xi, x_j)`` (float32) for the columns j in ``[start, end)`` of ``Xt``.

    ``Xt`` is (d, n) float32, ``t`` float32 labels (+-1), ``xi`` the column's row (d
    float32 values, any row: the working-set solver's columns belong to rows other
    workers hold).  Gaussian and laplacian
    columns are computed in float32 (differences of float32 inputs, an exp
    accurate to 1.2e-7): the stored values are within 5e-8 of the float64 ones,
    the size of float32 rounding itself, at 2.5x the speed of float64
    distances; polynomial columns, whose dot products can be large, and
    memorization-generalization ones in float64 (``_kernel_row``, the kernel every
    other block uses).
    Works in blocks of ``SEGMENT_BLOCK`` through 1-D slices, which keeps every
    loop vectorised (scratch: the rest ``SEGMENT_BLOCK``).
    """
    for s in range(start, end, SEGMENT_BLOCK):
        e = min(s + SEGMENT_BLOCK, end)
        m = e - s
        o = out[s:e]
        ts = t[s:e]
        if kind >= 2:
            a = acc64[:m]
            _kernel_row(xi, Xt, s, e, kind, sigma, degree, sigma_star, tau, a, kbuf64[:m])
            for j in range(m):
                o[j] = ti * ts[j] * a[j]
            continue
        b = acc32[:m]
        _kernel_row32(xi, Xt, s, e, kind, sigma, b, kbuf32[:m])
        for j in range(m):
            o[j] = ti * ts[j] * b[j]


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"})
def q_columns(Xt, t, n, XB, tB, slots, first, stop, kind, sigma, degree, sigma_star, tau, cols):
    """``cols[slots[k], :n] = t_B[k] t_j K(x_B[k], x_j)`` (float32) over the first ``n``
    columns of ``Xt`` for the working set's rows ``k`` in ``[first, stop)``: Q's columns of
    rows held anywhere (``XB`` (m, d) float32, ``tB`` their float32 labels) over this
    block's rows (``Xt`` (d, n_rows), ``t``), each computed as the solver's own
    (``q_segment_of``)."""
    d = Xt.shape[0]
    xi = np.empty(d, np.float32)
    acc32 = np.empty(SEGMENT_BLOCK, np.float32)
    kbuf32 = np.empty(SEGMENT_BLOCK, np.int32)
    acc64 = np.empty(SEGMENT_BLOCK, np.float64)
    kbuf64 = np.empty(SEGMENT_BLOCK, np.int64)
    for k in range(first, stop):
        for f in range(d):
            xi[f] = XB[k, f]
        q_segment_of(
            xi,
            tB[k],
            Xt,
            t,
            0,
            n,
            kind,
            sigma,
            degree,
            sigma_star,
            tau,
            acc32,
            kbuf32,
            acc64,
            kbuf64,
            cols[slots[k]],
        )


_UPDATE_ROWS = 2048  # add_weighted_columns's rows at a time: its float64 sums stay in L1


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"})
def add_weighted_columns(cols, slots, coef, out, start, stop):
    """``out[i] += sum_k coef[k] cols[slots[k], i]`` for ``i`` in ``[start, stop)``: float32
    columns times float64 weights, summed in float64 in the order of ``k`` (each entry the
    same whichever rows run together)."""
    m = slots.shape[0]
    for s in range(start, stop, _UPDATE_ROWS):
        e = min(s + _UPDATE_ROWS, stop)
        o = out[s:e]
        for k in range(m):
            col = cols[slots[k], s:e]
            c = coef[k]
            for i in range(e - s):
                o[i] += c * np.float64(col[i])


# ---------------------------------------------------------------------------
# Sigmoid scores in one vectorised loop (``HiddenLayer.scores`` for sigmoid nodes).
# The same float32 node values as ``_hidden_row`` to the bit (the same fused
# multiply-adds in the same order, the same exp, an exact division), so that
# ``scores`` still equals ``transform(X) @ coef``; what changes is the loop shape:
# the exp is written for one value (its exponent added through a bit cast, not a
# second pass over an int32 scratch array) so that the activation and the
# division run in one SIMD loop (512-bit where the CPU has it), rows go in pairs
# and four inputs are added per pass over them.
# ---------------------------------------------------------------------------


@intrinsic
def _f32_as_i32(typingctx, x):
    """The bits of a float32 as an int32 (an LLVM bit cast: vectorises)."""
    if x != types.float32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return types.int32(types.float32), codegen


@intrinsic
def _i32_as_f32(typingctx, x):
    """The float32 whose bits are the low 32 bits of an integer."""
    if not isinstance(x, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        value = args[0]
        if x.bitwidth > 32:
            value = builder.trunc(value, ir.IntType(32))
        elif x.bitwidth < 32:
            value = builder.sext(value, ir.IntType(32))
        return builder.bitcast(value, ir.FloatType())

    return types.float32(x), codegen


@intrinsic
def _prefer_512_bit_vectors(typingctx):
    """Let LLVM vectorise the calling function with 512-bit registers where the CPU has
    them (the function attribute ``"prefer-vector-width"="512"``: LLVM's default for
    AVX-512 CPUs is 256).  Does nothing if this llvmlite cannot set the attribute."""

    def codegen(context, builder, signature, args):
        try:  # llvmlite checks attribute names against a list without this one
            set.add(builder.function.attributes, '"prefer-vector-width"="512"')
        except Exception:  # pragma: no cover - another llvmlite: 256-bit vectors
            pass
        return context.get_dummy_value()

    return types.void(), codegen


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _exp32_one(x):
    """``exp(x)`` for one float32: ``_vexp32``'s arithmetic, to the bit."""
    p, k = _exp32_parts(x)
    return _i32_as_f32(_f32_as_i32(p) + (np.int32(k) << 23))


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"})
def _affine_row(x, W, b, z):
    """``z = b + x @ W`` in float32, one fused multiply-add per input in input order
    (``_hidden_row``'s rounding), four inputs per pass over ``z``."""
    m = z.shape[0]
    d = x.shape[0]
    for j in range(m):
        z[j] = b[j]
    k = 0
    while k + 4 <= d:
        x0, x1, x2, x3 = x[k], x[k + 1], x[k + 2], x[k + 3]
        w0, w1, w2, w3 = W[k], W[k + 1], W[k + 2], W[k + 3]
        for j in range(m):
            t = z[j] + x0 * w0[j]
            t = t + x1 * w1[j]
            t = t + x2 * w2[j]
            z[j] = t + x3 * w3[j]
        k += 4
    while k < d:
        xk = x[k]
        wk = W[k]
        for j in range(m):
            z[j] += xk * wk[j]
        k += 1


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"})
def _affine_rows2(x, y, W, b, z, u):
    """``_affine_row`` for two rows at once (``z`` from ``x``, ``u`` from ``y``), each weight
    loaded once for both; the same rounding."""
    _prefer_512_bit_vectors()
    m = z.shape[0]
    d = x.shape[0]
    for j in range(m):
        z[j] = b[j]
        u[j] = b[j]
    k = 0
    while k + 4 <= d:
        x0, x1, x2, x3 = x[k], x[k + 1], x[k + 2], x[k + 3]
        y0, y1, y2, y3 = y[k], y[k + 1], y[k + 2], y[k + 3]
        w0, w1, w2, w3 = W[k], W[k + 1], W[k + 2], W[k + 3]
        for j in range(m):
            a0, a1, a2, a3 = w0[j], w1[j], w2[j], w3[j]
            t = z[j] + x0 * a0
            t = t + x1 * a1
            t = t + x2 * a2
            z[j] = t + x3 * a3
            t = u[j] + y0 * a0
            t = t + y1 * a1
            t = t + y2 * a2
            u[j] = t + y3 * a3
        k += 4
    while k < d:
        xk = x[k]
        yk = y[k]
        wk = W[k]
        for j in range(m):
            z[j] += xk * wk[j]
            u[j] += yk * wk[j]
        k += 1


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"})
def _sigmoid_inplace(z):
    """``z = 1 / (1 + exp(-z))`` (float32) in one loop."""
    _prefer_512_bit_vectors()
    for j in range(z.shape[0]):
        z[j] = np.float32(1.0) / (np.float32(1.0) + _exp32_one(-z[j]))


@njit(cache=True, parallel=True, nogil=True, error_model="numpy", fastmath={"contract"})
def sigmoid_block_scores(X, W, b, coef, out):
    """``out = sigmoid(X @ W + b) @ coef`` (float64 sums) without storing the layer.

    X (n, d) float32, W (d, m) float32, b (m,) float32, coef (m, k) float64; the
    node values are ``hidden_block``'s (kind 0) to the bit.
    """
    n = X.shape[0]
    m = W.shape[1]
    n_out = coef.shape[1]
    coef_t = np.ascontiguousarray(coef.T)
    n_chunks = min(n, _PARALLEL_CHUNKS)
    for c in prange(n_chunks):
        z = np.empty(m, np.float32)
        u = np.empty(m, np.float32)
        start = c * n // n_chunks
        stop = (c + 1) * n // n_chunks
        for i in range(start, stop - 1, 2):  # rows in pairs: each weight loaded once
            _affine_rows2(X[i], X[i + 1], W, b, z, u)
            _sigmoid_inplace(z)
            _sigmoid_inplace(u)
            for o in range(n_out):
                out[i, o] = dot(z, coef_t[o])
                out[i + 1, o] = dot(u, coef_t[o])
        if (stop - start) % 2:
            _affine_row(X[stop - 1], W, b, z)
            _sigmoid_inplace(z)
            for o in range(n_out):
                out[stop - 1, o] = dot(z, coef_t[o])


# ---------------------------------------------------------------------------
# Feature selection's dual screen (``solvers.feature_flips``), fused: a candidate flip's
# weak-duality bound from the current mask's kept quantity without storing the moved
# pre-activations (squared distances) or the node (kernel) values, only over the rows
# whose dual coefficient is nonzero (the others add nothing to it).  The moves are
# ``ExplicitMaskProblem.moved`` / ``KernelMaskProblem.moved``'s arithmetic to the bit
# (helpers compiled without fastmath: no multiply-add fuses); the values come from the
# helpers ``activate_block`` / ``distance_kernel_block`` use (``_additive_nodes``,
# ``_rbf_nodes``, ``_distance_kernel``), under those kernels' flags.  The sums run in
# another order than numpy's products, so each kernel also returns a bound on its
# rounding error: the caller decides by the fused value only outside that margin.
# ---------------------------------------------------------------------------

_EPS64 = 2.0**-52


@njit(cache=True, nogil=True, error_model="numpy")
def _moved_pre_row(pre_row, xi, w, on, additive, out):
    """``out = pre_row + delta`` (``on``) or ``pre_row - delta``, ``delta`` the rank-1
    term of one row: ``xi w`` (additive nodes) or ``xi^2 - 2 xi w`` (RBF nodes, the sum
    then clipped at 0 as ``ExplicitMaskProblem.features`` does)."""
    m = out.shape[0]
    if additive:
        if on:
            for k in range(m):
                out[k] = pre_row[k] + xi * w[k]
        else:
            for k in range(m):
                out[k] = pre_row[k] - xi * w[k]
        return
    xx = xi * xi
    if on:
        for k in range(m):
            out[k] = max(pre_row[k] + (xx - 2.0 * (xi * w[k])), 0.0)
    else:
        for k in range(m):
            out[k] = max(pre_row[k] - (xx - 2.0 * (xi * w[k])), 0.0)


@njit(cache=True, nogil=True, error_model="numpy")
def _moved_sq_row(d2_row, cols, xi, xs, on, out):
    """``out[c] = d2_row[cols[c]] + (xi - xs[c])^2`` (``on``) or ``max(d2_row[cols[c]] -
    (xi - xs[c])^2, 0)``: one row of a moved squared-distance matrix, at the columns
    ``cols``."""
    m = out.shape[0]
    if on:
        for c in range(m):
            diff = xi - xs[c]
            out[c] = d2_row[cols[c]] + diff * diff
    else:
        for c in range(m):
            diff = xi - xs[c]
            out[c] = max(d2_row[cols[c]] - diff * diff, 0.0)


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"})
def moved_nodes_beta_sq(pre, x, w, on, b, kind, u, rows):
    """``(|beta|^2, err)``: ``beta = H' u`` with ``H = g(pre +- x w')`` (the node values
    ``activate_block`` computes from the moved pre-activations; ``kind`` as
    ``NODE_CODES``, ``b`` the layer's biases / widths), summed over ``rows`` (those with
    ``u != 0``); ``err`` bounds the rounding of ``|beta|^2`` here or in numpy's ``H.T @ u``
    (first-order, each ``beta_k`` within ``(rows + 2) eps sum_i |u_i h_ik|``)."""
    m = pre.shape[1]
    additive = kind <= 1
    row = np.empty(m, np.float32)
    buf = np.empty(m, np.float64)
    kbuf32 = np.empty(m, np.int32)
    kbuf64 = np.empty(m, np.int64)
    beta = np.zeros(m, np.float64)
    absb = np.zeros(m, np.float64)
    for r in range(rows.shape[0]):
        i = rows[r]
        _moved_pre_row(pre[i], x[i], w, on, additive, buf)
        if additive:
            for k in range(m):
                row[k] = buf[k]
            _additive_nodes(row, kind, kbuf32)
        else:
            _rbf_nodes(buf, b, kind, row, kbuf64)
        ui = u[i]
        ai = abs(ui)
        for k in range(m):
            h = np.float64(row[k])
            beta[k] += ui * h
            absb[k] += ai * abs(h)
    gamma = (rows.shape[0] + 2) * _EPS64
    bb = 0.0
    err = 0.0
    for k in range(m):
        bk = beta[k]
        bb += bk * bk
        e = gamma * absb[k]
        err += (2.0 * abs(bk) + e) * e
    return bb, err + (m + 2) * _EPS64 * bb


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"})
def moved_kernel_quad(d2, x, on, kind, sigma, sigma_star, tau, u, rows):
    """``(u'Ku, err)``: ``K`` the kernel (``KERNEL_CODES``, one of the distance: 0, 1, 3)
    of the squared distances ``d2`` moved by ``+- (x_i - x_k)^2``, the values
    ``distance_kernel_block`` computes, summed over ``rows`` x ``rows`` (those with
    ``u != 0``; the upper triangle, mirrored); ``err`` bounds the rounding of the sum here
    or in numpy's ``u @ (K @ u)`` (``2 (rows + 2) eps sum |u_i u_k K_ik|``)."""
    s = rows.shape[0]
    acc = np.empty(s, np.float64)
    kbuf = np.empty(s, np.int64)
    xs = np.empty(s, np.float64)
    us = np.empty(s, np.float64)
    for a in range(s):
        xs[a] = x[rows[a]]
        us[a] = u[rows[a]]
    total = 0.0
    magnitude = 0.0
    for a in range(s):
        width = s - a
        _moved_sq_row(d2[rows[a]], rows[a:], xs[a], xs[a:], on, acc[:width])
        _distance_kernel(acc[:width], width, kind, sigma, sigma_star, tau, kbuf[:width])
        ua = us[a]
        off = 0.0
        off_abs = 0.0
        for c in range(1, width):
            v = us[a + c] * acc[c]
            off += v
            off_abs += abs(v)
        total += ua * (ua * acc[0] + 2.0 * off)
        magnitude += abs(ua) * (abs(ua) * abs(acc[0]) + 2.0 * off_abs)
    return total, 2.0 * (s + 2) * _EPS64 * magnitude


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"})
def box_dual_ascent(Q, alpha0, C, passes):
    """``(value, scale)``: the dual ``1'a - a'Qa / 2`` (``0 <= a <= C``, ``Q`` PSD) at the
    point ``passes`` cyclic coordinate-ascent passes reach from the feasible ``alpha0``
    (each step maximises along its coordinate and clips to the box, so the value never
    drops; it stops early after a pass that moves nothing), the value computed afresh
    there; ``scale = (sum_i a_i sqrt(Q_ii))^2 / 2`` bounds ``|a'Qa| / 2`` and the sizes of
    its terms (a rounding margin's unit).  Feature selection's second screen: any feasible
    dual's value bounds the mask's optimum from below."""
    n = Q.shape[0]
    a = alpha0.copy()
    g = np.zeros(n, np.float64)
    for i in range(n):
        ai = a[i]
        if ai != 0.0:
            row = Q[i]
            for k in range(n):
                g[k] += ai * row[k]
    for _ in range(passes):
        moved = False
        for i in range(n):
            qii = Q[i, i]
            if qii <= 0.0:
                continue
            new = min(max(a[i] + (1.0 - g[i]) / qii, 0.0), C)
            delta = new - a[i]
            if delta != 0.0:
                moved = True
                a[i] = new
                row = Q[i]
                for k in range(n):
                    g[k] += delta * row[k]
        if not moved:
            break
    total = 0.0
    quad = 0.0
    s = 0.0
    for i in range(n):
        ai = a[i]
        if ai == 0.0:
            continue
        total += ai
        s += ai * np.sqrt(max(Q[i, i], 0.0))
        row = Q[i]
        acc = 0.0
        for k in range(n):
            acc += row[k] * a[k]
        quad += ai * acc
    return total - 0.5 * quad, 0.5 * s * s
