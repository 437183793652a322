"""What every layer uses: errors, atomic file writes, thread budgets, large arrays, and the
numba kernels (``jit``) that both the feature maps and the solvers call."""
