"""The sparse ELM's dual solvers (``sparse_dual``): a kernel-column solver with an LRU
column cache and shrinking, dual coordinate descent for random nodes, and the dense box QP."""
