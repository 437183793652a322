"""The target encoder: +1 / -1, one-of-J and values codings, Gram sums, decoding."""

import numpy as np
import pytest

from elmscale.linalg.targets import TargetEncoder, merge_classes


def test_plus_minus_one_column_for_two_classes_else_one_per_class():
    two = TargetEncoder("plus_minus").fit(["no", "yes", "no"])
    assert two.classes.tolist() == ["no", "yes"] and two.n_columns == 1
    np.testing.assert_array_equal(two.transform(["yes", "no"]), [[1.0], [-1.0]])
    three = TargetEncoder("plus_minus").fit([3, 1, 2, 1])
    np.testing.assert_array_equal(three.transform([2, 3]), [[-1, 1, -1], [-1, -1, 1]])
    assert three.decode(np.array([[0.1, 0.5, -2], [1, 0, 0]])).tolist() == [1, 0]
    assert two.decode(np.array([[0.3], [-0.1]])).tolist() == [1, 0]


def test_one_of_j_is_zero_one_for_every_class():
    enc, T = TargetEncoder("one_of_j").fit_transform(np.array([5, 7, 5]))
    np.testing.assert_array_equal(T, [[1, 0], [0, 1], [1, 0]])
    assert enc.n_columns == 2
    assert enc.decode(np.array([[0.2, 0.7], [0.9, 0.1]])).tolist() == [1, 0]


def test_values_as_given_and_checked():
    enc = TargetEncoder("values").fit([1.5, 2.0])
    np.testing.assert_array_equal(enc.transform([1.5, 2.0]), [[1.5], [2.0]])
    assert enc.transform(np.ones((4, 2))).shape == (4, 2)
    with pytest.raises(ValueError, match="NaN or infinity"):
        enc.transform([1.0, np.nan])
    with pytest.raises(ValueError, match="must be numbers"):
        enc.transform(["a", "b"])
    with pytest.raises(ValueError, match="no classes"):
        enc.decode(np.zeros((2, 1)))


def test_gram_targets_equal_the_products_of_encoded_targets():
    rng = np.random.default_rng(0)
    H = rng.normal(size=(300, 7))
    for n_classes in (2, 4):
        y = rng.integers(0, n_classes, 300)
        indicators = TargetEncoder("one_of_j").fit(y)
        Y = indicators.transform(y)
        sums = (H.T @ Y, np.square(Y).sum(axis=0), Y.sum(axis=0).astype(np.int64))
        for coding in ("plus_minus", "one_of_j"):
            enc = TargetEncoder(coding, indicators.classes)
            T = enc.transform(y)
            HtT, TtT = enc.gram_targets(*sums)
            np.testing.assert_allclose(HtT, H.T @ T, rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(TtT, np.square(T).sum(axis=0))


def test_unknown_labels_and_merging_classes():
    enc = TargetEncoder("plus_minus", np.array([1, 3]))
    assert enc.index([3, 2, 1, 9]).tolist() == [1, -1, 0, -1]
    with pytest.raises(ValueError, match="not among the classes"):
        enc.transform([1, 2])
    with pytest.raises(ValueError, match="fit it first"):
        TargetEncoder("one_of_j").transform([1])
    with pytest.raises(ValueError, match="coding must be one of"):
        TargetEncoder("binary")
    classes, where = merge_classes(np.array(["b", "c"]), np.array(["a", "c"]))
    assert classes.tolist() == ["a", "b", "c"]
    assert [w.tolist() for w in where] == [[1, 2], [0, 2]]
