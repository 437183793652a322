"""The sparse-ELM paper's parameter grids (Bai et al. 2014, Section VI-C), per family.

``PAPER_C_GRID`` is C's grid, ``PAPER_SIGMA_GRID`` the gaussian / laplacian width's and
``PAPER_DEGREE_GRID`` the polynomial degree's.  The registry names the function that gives
each family's grid for its parameters (``unified_elm_grid``, ``sparse_elm_grid``).
"""

from __future__ import annotations

PAPER_C_GRID = (0.01, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
PAPER_SIGMA_GRID = PAPER_C_GRID
PAPER_DEGREE_GRID = (1, 2, 3, 4, 5)


def paper_grid(kernel: str = "gaussian", Cs=PAPER_C_GRID) -> dict:
    """The sparse-ELM paper's grid (Section VI-C) for ``kernel``."""
    if kernel in ("gaussian", "laplacian"):
        return {"C": list(Cs), "sigma": list(PAPER_SIGMA_GRID)}
    if kernel == "polynomial":
        return {"C": list(Cs), "degree": list(PAPER_DEGREE_GRID)}
    raise ValueError(f"no paper grid for kernel {kernel!r}")


def unified_elm_grid(params: dict) -> dict:
    """The unified ELM's grid: C alone for random nodes, C and the kernel's parameter."""
    if params.get("kernel") is None:
        return {"C": list(PAPER_C_GRID)}
    return paper_grid(params["kernel"])


def sparse_elm_grid(params: dict) -> dict:
    """The sparse ELM's grid: C and its kernel's parameter."""
    return paper_grid(params.get("kernel", "gaussian"))


#: The boosting-ridge paper's grid of its C (which multiplies I) and of its gaussian gamma
#: (which divides the squared distance), Section "Experiments": 10^-2 .. 10^2 each.
BOOSTING_PAPER_C_GRID = (0.01, 0.1, 1.0, 10.0, 100.0)
BOOSTING_PAPER_GAMMA_GRID = (0.01, 0.1, 1.0, 10.0, 100.0)


def boosting_ridge_grid(params: dict) -> dict:
    """The boosting-ridge paper's grid in the library's conventions: C = 1 / the paper's C
    (the same five values, reversed), and for KBRELM sigma = sqrt(gamma / 2)."""
    grid = {"C": sorted(1.0 / c for c in BOOSTING_PAPER_C_GRID)}
    if params.get("kernel") is not None:
        grid["sigma"] = [float((gamma / 2.0) ** 0.5) for gamma in BOOSTING_PAPER_GAMMA_GRID]
    return grid
