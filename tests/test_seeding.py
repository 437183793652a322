"""The one splitmix64 behind elmscale's seeds: the reference algorithm's outputs, the same
numbers from Python ints and uint64 arrays, and the streams that use it."""

import numpy as np

from elmscale.core.seeding import GAMMA, mix64, xorshift_state
from elmscale.distributed.units import fold_of_rows


def test_mix64_is_splitmix64():
    # splitmix64 from state 0: its first outputs (Vigna's reference implementation)
    assert mix64(GAMMA) == 0xE220A8397B1DCDAF
    assert mix64((2 * GAMMA) % 2**64) == 0x6E789E6AA1B965F4
    z = np.array([0, 1, GAMMA, 2**64 - 1], dtype=np.uint64)
    assert [int(v) for v in mix64(z)] == [mix64(int(v)) for v in z]


def test_the_streams_seeded_by_it_are_nonzero_and_differ():
    assert xorshift_state(0) == 1 and xorshift_state(3) != xorshift_state(4)
    assert len({xorshift_state(s) for s in range(400)}) == 400
    folds = fold_of_rows(0, 10_000, 5, seed=2)
    np.testing.assert_array_equal(folds[4_000:], fold_of_rows(4_000, 6_000, 5, seed=2))
    assert np.bincount(folds).min() > 1_900  # about a fifth each
