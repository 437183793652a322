"""ONNX export: a fitted estimator as an ONNX graph that ONNX Runtime scores.

``to_onnx(model)`` returns an ``onnx.ModelProto`` with one input ``X`` (float32,
``(n, n_features_in_)``) and the outputs

* classifiers: ``label`` (the class, as ``predict``: int64, or string for string classes)
  and ``decision`` (float32, as ``decision_function``: ``(n,)`` for two classes, else
  ``(n, n_classes)``); calibrated ones (``probability=True``) also ``probabilities``
  (float32, ``(n, n_classes)``, as ``predict_proba``: every coupling, the pairwise one by
  an unrolled solve, :func:`_pairwise_coupling`);
* regressors: ``prediction`` (float32, as ``predict``).

The graph computes in float64 where elmscale does: kernel expansions (their squared
distances ``|x|^2 + |b|^2 - 2 x.b`` would cancel in float32), RBF nodes' distances, every
output sum; additive random nodes (sigmoid, sinusoid) are evaluated in float32 as
elmscale evaluates them, and so are a sparse ELM's gaussian and laplacian exps when it
scores in single precision (its ``precision``).  Each family is a feature map
(:func:`_hidden_layer`, :func:`_kernel_expansion`, or one of these per one-vs-one pair on
masked inputs) followed by an output (:func:`_linear_output` decoded as the model's target
coding, :func:`_ovo_output` for one-vs-one votes).  Families are recognised by their fitted
attributes, not their classes, so a registered estimator with the same fitted state
exports too.

:func:`register_skl2onnx` registers every built-in estimator with skl2onnx
(``update_registered_converter``), so that ``skl2onnx.to_onnx(pipeline, X[:1])`` converts a
scikit-learn ``Pipeline`` of scalers ending in one; ``to_onnx(pipeline)`` does both.
Needs the ``onnx`` extra (``pip install "elmscale[onnx]"``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.sparse as sp

from elmscale import registry
from elmscale.data.storage import Location, locate, write_whole
from elmscale.features.kernels import Kernel, KernelFeatures
from elmscale.features.layers import ConcatenatedLayers, HiddenLayer
from elmscale.linalg.calibration import MIN_PROB

__all__ = ["OPSET", "UnsupportedModelError", "register_skl2onnx", "save_onnx", "to_onnx"]

OPSET = 17


class UnsupportedModelError(TypeError):
    """A model (or Pipeline step) that has no ONNX export."""


def _onnx():
    try:
        import onnx
    except ImportError as exc:  # pragma: no cover - the extra is installed in tests
        raise ImportError('ONNX export needs the onnx extra: pip install "elmscale[onnx]"') from exc
    return onnx


# -- a graph under construction ----------------------------------------------------------
class _Graph:
    """Nodes and constants of a graph, named ``<hint>_<n>`` as they are added."""

    def __init__(self) -> None:
        self.nodes: list[tuple[str, list[str], list[str], dict]] = []
        self.constants: dict[str, np.ndarray] = {}
        self._count = 0

    def _name(self, hint: str) -> str:
        self._count += 1
        return f"{hint}_{self._count}"

    def const(self, value, hint: str = "c") -> str:
        name = self._name(hint)
        self.constants[name] = np.asarray(value)
        return name

    def op(self, op_type: str, *inputs: str, hint: str | None = None, **attrs) -> str:
        out = self._name(hint or op_type.lower())
        self.nodes.append((op_type, list(inputs), [out], attrs))
        return out

    def rename(self, old: str, new: str) -> None:
        """Give the node output ``old`` the name ``new`` (a graph output)."""
        for _, inputs, outputs, _ in self.nodes:
            inputs[:] = [new if name == old else name for name in inputs]
            outputs[:] = [new if name == old else name for name in outputs]


def _f64(values) -> np.ndarray:
    if sp.issparse(values):  # a sparse fit's support rows: ONNX constants are dense
        values = values.toarray()
    return np.ascontiguousarray(values, dtype=np.float64)


# -- feature maps (float64 in, float64 out) -----------------------------------------------
def _squared_distances(g: _Graph, X: str, basis: np.ndarray) -> str:
    """``|x - b_j|^2`` ``(n, m)`` of the rows of ``X`` and of ``basis`` ``(m, d)``, clamped
    at 0 (the expansion's rounding may go below)."""
    B = _f64(basis)
    xx = g.op("MatMul", g.op("Mul", X, X), g.const(np.ones((B.shape[1], 1))))
    cross = g.op("MatMul", X, g.const(-2.0 * B.T, "basis_t"))
    d2 = g.op("Add", g.op("Add", cross, xx), g.const((B * B).sum(axis=1)[None, :]))
    return g.op("Relu", d2, hint="d2")


def _kernel_values(
    g: _Graph, X: str, kernel: Kernel, basis: np.ndarray, precision: str = "double"
) -> str:
    """``K(X, basis)`` ``(n, m)`` (``elmscale.core.jit.kernel_rows``'s formulas), float64.
    ``precision="single"`` (a sparse ELM scoring in single precision): the gaussian and
    laplacian exps in float32, as elmscale computes those values then (the distances stay
    float64 here: their expansion would cancel in float32), within
    ``features.kernels.float32_error_bound`` of the float64 values too."""

    def exp(z: str) -> str:
        if precision != "single":
            return g.op("Exp", z)
        exp32 = g.op("Exp", g.op("Cast", z, to=1))  # 1: FLOAT
        return g.op("Cast", exp32, to=11, hint="kernel")  # 11: DOUBLE

    if kernel.kind == "polynomial":
        dot = g.op("MatMul", X, g.const(_f64(basis).T, "basis_t"))
        base = g.op("Add", dot, g.const(np.float64(1.0)))
        return g.op("Pow", base, g.const(np.float64(kernel.degree)), hint="kernel")
    d2 = _squared_distances(g, X, basis)

    def gaussian(sigma: float) -> str:
        return g.op("Mul", d2, g.const(np.float64(-1.0 / (2.0 * sigma * sigma))))

    if kernel.kind == "gaussian":
        return exp(gaussian(kernel.sigma))
    if kernel.kind == "laplacian":
        dist = g.op("Sqrt", d2)
        return exp(g.op("Mul", dist, g.const(np.float64(-1.0 / kernel.sigma))))
    if kernel.kind == "mg":  # float64 in both precisions, as elmscale computes it
        wide = g.op("Mul", g.op("Exp", gaussian(kernel.sigma)), g.const(1.0 - kernel.tau))
        narrow = g.op("Mul", g.op("Exp", gaussian(kernel.sigma_star)), g.const(kernel.tau))
        return g.op("Add", wide, narrow, hint="kernel")
    raise UnsupportedModelError(f"kernel {kernel.kind!r} has no ONNX export")


def _hidden_layer(g: _Graph, X32: str, layer: HiddenLayer) -> str:
    """``h(X)`` ``(n, n_hidden)`` float64 from float32 rows ``X32``
    (``elmscale.core.jit._hidden_row``'s formulas and precisions: additive nodes in
    float32, as elmscale evaluates them: 2.9x the rows/s of float64 nodes in ONNX Runtime
    (benchmarks/score_throughput.py --quick, 1,000 sigmoid nodes, under load);
    RBF nodes' squared distances in float64)."""
    W, b = layer.weights, layer.biases
    if layer.kind in ("sigmoid", "sinusoid"):
        pre = g.op(
            "Add",
            g.op("MatMul", X32, g.const(W.astype(np.float32), "weights")),
            g.const(b.astype(np.float32)[None, :], "biases"),
        )
        H32 = g.op("Sigmoid" if layer.kind == "sigmoid" else "Sin", pre)
        return g.op("Cast", H32, to=11, hint="hidden")  # 11: DOUBLE
    b = _f64(b)
    d2 = _squared_distances(g, g.op("Cast", X32, to=11, hint="x64"), _f64(W).T)
    if layer.kind == "multiquadric":
        return g.op("Sqrt", g.op("Add", d2, g.const((b * b)[None, :])), hint="hidden")
    return g.op("Exp", g.op("Mul", d2, g.const(-1.0 / b[None, :])), hint="hidden")


def _feature_map(g: _Graph, X32: str, X: str, feature_map) -> str:
    """The columns (float64) of one of elmscale's feature maps of the rows ``X32`` (float32)
    or their float64 copy ``X``."""
    if isinstance(feature_map, HiddenLayer):
        return _hidden_layer(g, X32, feature_map)
    if isinstance(feature_map, ConcatenatedLayers):
        parts = [_hidden_layer(g, X32, layer) for layer in feature_map.layers]
        return parts[0] if len(parts) == 1 else g.op("Concat", *parts, axis=1)
    if isinstance(feature_map, KernelFeatures):
        return _kernel_values(g, X, feature_map.kernel, feature_map.basis)
    raise UnsupportedModelError(f"feature map {type(feature_map).__name__} has no ONNX export")


# -- outputs --------------------------------------------------------------------------------
def _labels(g: _Graph, index: str, classes: np.ndarray) -> str:
    """``classes[index]`` as int64 or string labels."""
    classes = np.asarray(classes)
    if classes.dtype.kind in "iub":
        table = classes.astype(np.int64)
    elif classes.dtype.kind in "UO":
        table = np.array([str(c) for c in classes], dtype=object)
    elif classes.dtype.kind == "f" and np.all(classes == np.round(classes)):
        table = classes.astype(np.int64)
    else:
        raise UnsupportedModelError(
            f"class labels of dtype {classes.dtype} have no ONNX label output; expected "
            "integer or string classes"
        )
    return g.op("Gather", g.const(table, "classes"), index, axis=0, hint="label")


def _to_float32(g: _Graph, values: str, hint: str) -> str:
    return g.op("Cast", values, to=1, hint=hint)  # 1: FLOAT


def _first_column(g: _Graph, values: str) -> str:
    """Column 0 of ``(n, k)`` values as ``(n,)``."""
    return g.op("Gather", values, g.const(np.int64(0)), axis=1)


def _linear_output(g: _Graph, H: str, coef, intercept=None) -> str:
    """``H @ coef (+ intercept)`` as ``(n, k)``."""
    coef = _f64(coef)
    out = g.op("MatMul", H, g.const(coef.reshape(coef.shape[0], -1), "coef"))
    if intercept is not None:
        out = g.op("Add", out, g.const(_f64(np.atleast_1d(intercept))[None, :], "intercept"))
    return out


def _coded_classifier_output(g: _Graph, out: str, n_columns: int, coding: str, classes):
    """``(decision, label)`` of outputs ``(n, n_columns)`` of a target coding
    (``elmscale.linalg.targets.TargetEncoder.decode``; decision values as the ELM
    classifiers': one column as it is, two columns' difference, else all)."""
    n_classes = len(classes)
    if n_columns == 1:
        decision = _first_column(g, out)
        cut = 0.0 if coding == "plus_minus" else 0.5
        index = g.op("Cast", g.op("Greater", decision, g.const(np.float64(cut))), to=7)
        return decision, _labels(g, index, classes)
    index = g.op("ArgMax", out, axis=1, keepdims=0)
    if n_classes == 2:
        decision = _first_column(g, g.op("MatMul", out, g.const(np.array([[-1.0], [1.0]]))))
    else:
        decision = out
    return decision, _labels(g, index, classes)


def _ovo_output(g: _Graph, scores: str, classes):
    """``(decision, label)`` of one-vs-one pair scores ``(n, n_pairs)``, pair p > 0 voting
    for its first class (``elmscale.models.sparse_elm.ovo_decision`` and
    ``decision_to_class_index``: votes plus ``c / (3 (|c| + 1))`` of the summed
    confidences ``c``, argmax; two classes: ``-score``, > 0 for ``classes[1]``)."""
    n_classes = len(classes)
    if n_classes == 2:
        decision = g.op("Neg", _first_column(g, scores))
        index = g.op("Cast", g.op("Greater", decision, g.const(np.float64(0.0))), to=7)
        return decision, _labels(g, index, classes)
    pairs = [(a, b) for a in range(n_classes) for b in range(a + 1, n_classes)]
    first = np.zeros((len(pairs), n_classes))
    second = np.zeros((len(pairs), n_classes))
    for p, (a, b) in enumerate(pairs):
        first[p, a] = 1.0
        second[p, b] = 1.0
    # votes: the first class when score >= 0, else the second
    negative = g.op("Cast", g.op("Less", scores, g.const(np.float64(0.0))), to=11)
    votes = g.op("Add", g.op("MatMul", negative, g.const(second - first)), g.const(first.sum(0)))
    conf = g.op("MatMul", scores, g.const(first - second))
    scale = g.op("Mul", g.op("Add", g.op("Abs", conf), g.const(np.float64(1.0))), g.const(3.0))
    decision = g.op("Add", votes, g.op("Div", conf, scale))
    index = g.op("ArgMax", decision, axis=1, keepdims=0)
    return decision, _labels(g, index, classes)


# -- probabilities (elmscale.models.probability) --------------------------------------------


def _probabilities(g: _Graph, scores: str, A, B, coupling: str, n_classes: int) -> str:
    """``calibrated_proba``: the sigmoids ``1 / (1 + exp(A f + B))`` of the problems'
    scores ``(n, n_problems)``, clipped to [MIN_PROB, 1 - MIN_PROB], coupled as
    ``coupling`` says."""
    A, B = _f64(np.atleast_1d(A)), _f64(np.atleast_1d(B))
    s = g.op("Sigmoid", g.op("Add", g.op("Mul", scores, g.const(-A[None, :])), g.const(-B)))
    s = g.op("Clip", s, g.const(np.float64(MIN_PROB)), g.const(np.float64(1.0 - MIN_PROB)))
    if coupling == "binary":
        return g.op("Concat", g.op("Sub", g.const(np.ones((1, 1))), s), s, axis=1)
    if coupling == "one_vs_rest":
        total = g.op("MatMul", s, g.const(np.ones((n_classes, 1))))
        share = g.op("Div", s, total)
        positive = g.op("Greater", total, g.const(np.float64(0.0)))
        return g.op("Where", positive, share, g.const(np.full((1, n_classes), 1.0 / n_classes)))
    if coupling == "pairwise":
        return _pairwise_coupling(g, s, n_classes)
    raise UnsupportedModelError(f"probability coupling {coupling!r} has no ONNX export")


def _pairwise_coupling(g: _Graph, r: str, k: int) -> str:
    """Wu, Lin and Weng's method 2 (``elmscale.linalg.calibration.pairwise_coupling``):
    ``p = Q^-1 1 / (1' Q^-1 1)`` per row, ``Q_tt = sum_s r_st^2``, ``Q_st = -r_st r_ts``;
    ``Q x = 1`` solved by Gaussian elimination unrolled over the ``k x k`` entries, each a
    ``(n, 1)`` column (Q is positive definite: no pivoting), then clipped at 0 and
    normalised as there."""
    r = g.op("Clip", r, g.const(np.float64(MIN_PROB)), g.const(np.float64(1.0 - MIN_PROB)))
    one = g.const(np.float64(1.0))
    R: dict[tuple[int, int], str] = {}  # R[i, j] = r_ij = P(i | i or j)
    pairs = [(a, b) for a in range(k) for b in range(a + 1, k)]
    for p, (a, b) in enumerate(pairs):
        R[a, b] = g.op("Gather", r, g.const(np.array([p], dtype=np.int64)), axis=1)
        R[b, a] = g.op("Sub", one, R[a, b])
    Q = [[""] * k for _ in range(k)]
    for t in range(k):
        squares = [g.op("Mul", R[s, t], R[s, t]) for s in range(k) if s != t]
        total = squares[0]
        for term in squares[1:]:
            total = g.op("Add", total, term)
        Q[t][t] = total
        for s in range(k):
            if s != t:
                Q[s][t] = g.op("Neg", g.op("Mul", R[s, t], R[t, s]))
    rhs = [one] * k  # broadcast: (n, 1) once eliminated
    for i in range(k):  # forward elimination
        for j in range(i + 1, k):
            f = g.op("Div", Q[j][i], Q[i][i])
            for col in range(i + 1, k):
                Q[j][col] = g.op("Sub", Q[j][col], g.op("Mul", f, Q[i][col]))
            rhs[j] = g.op("Sub", rhs[j], g.op("Mul", f, rhs[i]))
    x = [""] * k
    for i in reversed(range(k)):  # back substitution
        acc = rhs[i]
        for col in range(i + 1, k):
            acc = g.op("Sub", acc, g.op("Mul", Q[i][col], x[col]))
        x[i] = g.op("Div", acc, Q[i][i])
    p = g.op("Relu", g.op("Concat", *x, axis=1))
    return g.op("Div", p, g.op("MatMul", p, g.const(np.ones((k, 1)))))


# -- the families -----------------------------------------------------------------------------
def _pair_masked_scores(g: _Graph, X: str, model) -> str:
    """FELM / FKELM: each pair's feature map on its masked inputs, ``(n, n_pairs)``."""
    columns = []
    masks = np.asarray(model.pair_masks_, dtype=bool)
    for p, mask in enumerate(masks):
        if hasattr(model, "hidden_layer_"):  # FELM: the layer sees X * mask
            Xp = g.op("Mul", "X", g.const(mask.astype(np.float32)[None, :], "mask"))
            H = _hidden_layer(g, Xp, model.hidden_layer_)
            columns.append(_linear_output(g, H, np.asarray(model.coef_)[:, p]))
        elif model.support_.size == 0 or not mask.any():
            columns.append(g.op("MatMul", X, g.const(np.zeros((masks.shape[1], 1)))))
        else:  # FKELM: the kernel on the kept columns
            kept = np.flatnonzero(mask).astype(np.int64)
            Xp = g.op("Gather", X, g.const(kept, "kept"), axis=1)
            basis = _f64(model.support_vectors_)[:, mask]
            K = _kernel_values(g, Xp, model._kernel(), basis)
            columns.append(_linear_output(g, K, np.asarray(model.dual_coef_)[p]))
    return columns[0] if len(columns) == 1 else g.op("Concat", *columns, axis=1)


def _sparse_pair_scores(g: _Graph, X: str, model) -> str:
    """SparseELMClassifier: ``(n, n_pairs)`` from its random layer or kernel expansion."""
    if getattr(model, "hidden", None) is not None:
        return _linear_output(g, _hidden_layer(g, "X", model.hidden_layer_), model.coef_)
    if "part_centres_" in vars(model):
        raise UnsupportedModelError(
            f"{type(model).__name__} fitted with early_prediction=True has no ONNX export: "
            "its routing of each row to the part of its nearest centre is not exported "
            "(refit with early_prediction=False)"
        )
    n_pairs = len(model.pairs_)
    if model.support_.size == 0:
        return g.op("MatMul", X, g.const(np.zeros((model.n_features_in_, n_pairs))))
    precision = getattr(model, "precision", "double")
    K = _kernel_values(g, X, model._kernel_obj(), model.support_vectors_, precision)
    return _linear_output(g, K, np.asarray(model.dual_coef_).T)


def _is_classifier(model) -> bool:
    entry = registry.entry_for(model)
    if entry is not None:
        return entry.capabilities.task == "classifier"
    return hasattr(model, "classes_")


def _build(model) -> tuple[_Graph, dict[str, str]]:
    """The graph of ``model`` (input ``X``) and its outputs by name."""
    name = type(model).__name__
    fitted = vars(model)
    if "n_features_in_" not in fitted:
        raise UnsupportedModelError(
            f"{name} is not a fitted elmscale estimator (no n_features_in_); expected one of "
            f"{', '.join(registry.names())}, fitted"
        )
    g = _Graph()
    X = g.op("Cast", "X", to=11, hint="x64")  # 11: DOUBLE
    classifier = _is_classifier(model)
    if "pair_masks_" in fitted:  # FELM / FKELM
        scores = _pair_masked_scores(g, X, model)
        decision, label = _ovo_output(g, scores, model.classes_)
    elif "pairs_" in fitted:  # SparseELMClassifier
        scores = _sparse_pair_scores(g, X, model)
        decision, label = _ovo_output(g, scores, model.classes_)
    elif "hidden_layer_" in fitted or "X_fit_" in fitted:  # the ELMs and the boosting ridges
        coef = np.asarray(model._output_weights())
        out = _linear_output(g, _feature_map(g, "X", X, model.feature_map_), coef)
        if not classifier:
            return _regression_outputs(g, out, coef.ndim == 1)
        n_columns = 1 if coef.ndim == 1 else coef.shape[1]
        decision, label = _coded_classifier_output(
            g, out, n_columns, model.target_coding, model.classes_
        )
    elif "support_vectors_" in fitted and "intercept_" in fitted:  # FLSA-SVM
        alpha = np.asarray(model.dual_coef_, dtype=np.float64)
        alpha2 = alpha[:, None] if alpha.ndim == 1 else alpha
        if alpha2.shape[0] == 0:
            K = g.op("MatMul", X, g.const(np.zeros((model.n_features_in_, 1))))
            alpha2 = np.zeros((1, alpha2.shape[1]))
        else:
            K = _kernel_values(g, X, model._kernel_obj(), model.support_vectors_)
        out = _linear_output(g, K, alpha2, model.intercept_)
        if not classifier:
            return _regression_outputs(g, out, bool(model._single_output))
        decision, label = _coded_classifier_output(
            g, out, alpha2.shape[1], model.target_coding, model.classes_
        )
    else:
        raise UnsupportedModelError(
            f"{name} has no ONNX export; expected a fitted elmscale estimator "
            f"({', '.join(registry.names())})"
        )
    g.rename(label, "label")
    g.rename(_to_float32(g, decision, "decision32"), "decision")
    outputs = {"label": "label", "decision": "decision"}
    if "probability_coupling_" in fitted:
        n_classes = len(model.classes_)
        if "pairs_" in fitted or "pair_masks_" in fitted:  # _calibration_scores: pairs'
            calib = scores if n_classes > 2 else g.op("Neg", scores)
        elif n_classes > 2:  # one column per class
            calib = decision
        else:
            calib = g.op("Reshape", decision, g.const(np.array([-1, 1], dtype=np.int64)))
        proba = _probabilities(
            g, calib, model.prob_a_, model.prob_b_, model.probability_coupling_, n_classes
        )
        g.rename(_to_float32(g, proba, "probabilities32"), "probabilities")
        outputs["probabilities"] = "probabilities"
    return g, outputs


def _regression_outputs(g: _Graph, out: str, single: bool) -> tuple[_Graph, dict[str, str]]:
    values = _first_column(g, out) if single else out
    g.rename(_to_float32(g, values, "prediction32"), "prediction")
    return g, {"prediction": "prediction"}


def _output_types(model, outputs: dict[str, str]) -> dict[str, tuple[int, list]]:
    """ONNX element type and shape of each output."""
    onnx = _onnx()
    types = {}
    for name in outputs:
        if name == "label":
            kind = np.asarray(model.classes_).dtype.kind
            elem = onnx.TensorProto.STRING if kind in "UO" else onnx.TensorProto.INT64
            types[name] = (elem, ["N"])
        else:
            width = None
            if name == "probabilities" or (name == "decision" and len(model.classes_) > 2):
                width = len(model.classes_)
            elif name == "prediction" and _prediction_width(model) > 1:
                width = _prediction_width(model)
            types[name] = (onnx.TensorProto.FLOAT, ["N"] if width is None else ["N", width])
    return types


def _prediction_width(model) -> int:
    if "pair_masks_" in vars(model) or "pairs_" in vars(model):
        return 1
    if "hidden_layer_" in vars(model) or "X_fit_" in vars(model):
        coef = np.asarray(model._output_weights())
        return 1 if coef.ndim == 1 else coef.shape[1]
    return 1 if model._single_output else np.atleast_1d(model.intercept_).size


def _tensor(name: str, value: np.ndarray):
    onnx = _onnx()
    if value.dtype == object:
        tensor = onnx.helper.make_tensor(
            name, onnx.TensorProto.STRING, value.shape, [str(v).encode() for v in value.ravel()]
        )
        return tensor
    return onnx.numpy_helper.from_array(value, name)


def to_onnx(model, *, opset: int = OPSET):
    """The ONNX graph (``onnx.ModelProto``) of a fitted elmscale estimator, or of a
    scikit-learn ``Pipeline`` ending in one (converted by skl2onnx with this module's
    converters; its other steps need skl2onnx converters: scalers have them).

    Raises :class:`UnsupportedModelError` naming the model for anything else.  Also
    registers the converters with skl2onnx (:func:`register_skl2onnx`) when it is
    installed."""
    onnx = _onnx()
    from sklearn.pipeline import Pipeline

    if isinstance(model, Pipeline):
        return _pipeline_to_onnx(model, opset)
    try:  # so that skl2onnx.to_onnx converts Pipelines ending in one from now on
        register_skl2onnx()
    except ImportError:  # pragma: no cover - the extra brings skl2onnx
        pass
    g, outputs = _build(model)
    helper = onnx.helper
    n_features = int(model.n_features_in_)
    graph = helper.make_graph(
        [helper.make_node(op, inputs, outs, **attrs) for op, inputs, outs, attrs in g.nodes],
        f"elmscale_{type(model).__name__}",
        [helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, ["N", n_features])],
        [
            helper.make_tensor_value_info(name, elem, shape)
            for name, (elem, shape) in _output_types(model, outputs).items()
        ],
        [_tensor(name, value) for name, value in g.constants.items()],
    )
    proto = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", opset)],
        producer_name="elmscale",
        doc_string=f"{type(model).__name__}: {model!r}",
    )
    proto.ir_version = min(proto.ir_version, 8)  # readable by older ONNX Runtimes
    onnx.checker.check_model(proto)
    return proto


def save_onnx(model, path, *, storage_options=None) -> Path | Location:
    """Write ``to_onnx(model)`` to ``path`` (a temporary name, then renamed), or to an fsspec
    URL with ``storage_options`` (put whole)."""
    proto = to_onnx(model)
    data = proto.SerializeToString()
    return write_whole(locate(path, storage_options), lambda tmp: Path(tmp).write_bytes(data))


# -- skl2onnx ---------------------------------------------------------------------------------
def _pipeline_to_onnx(pipeline, opset: int):
    try:
        import skl2onnx
        from skl2onnx.common.data_types import FloatTensorType
    except ImportError as exc:  # pragma: no cover - the extra is installed in tests
        raise ImportError(
            'exporting a Pipeline needs skl2onnx: pip install "elmscale[onnx]"'
        ) from exc
    register_skl2onnx()
    n_features = getattr(pipeline, "n_features_in_", None)
    if n_features is None:
        raise UnsupportedModelError("the Pipeline is not fitted (no n_features_in_)")
    try:
        return skl2onnx.to_onnx(
            pipeline,
            initial_types=[("X", FloatTensorType([None, int(n_features)]))],
            target_opset={"": opset, "ai.onnx.ml": 3},
        )
    except RuntimeError as exc:
        raise UnsupportedModelError(f"the Pipeline has a step without ONNX export: {exc}") from exc


def _skl2onnx_parser(scope, model, inputs, custom_parsers=None):
    from skl2onnx.common.data_types import (
        FloatTensorType,
        Int64TensorType,
        StringTensorType,
    )

    alias = f"elmscale_{type(model).__name__}"
    operator = scope.declare_local_operator(alias, model)
    operator.inputs = inputs
    if _is_classifier(model):
        kind = np.asarray(model.classes_).dtype.kind
        label_type = StringTensorType() if kind in "UO" else Int64TensorType()
        operator.outputs.append(scope.declare_local_variable("label", label_type))
        operator.outputs.append(scope.declare_local_variable("decision", FloatTensorType()))
        if "probability_coupling_" in vars(model):
            operator.outputs.append(
                scope.declare_local_variable("probabilities", FloatTensorType())
            )
    else:
        operator.outputs.append(scope.declare_local_variable("prediction", FloatTensorType()))
    return operator.outputs


def _skl2onnx_shape(operator) -> None:
    model = operator.raw_operator
    n = operator.inputs[0].get_first_dimension()
    types = _output_types(model, _build(model)[1])
    for variable, (_, shape) in zip(operator.outputs, types.values()):
        variable.type = variable.type.__class__([n, *shape[1:]])


def _skl2onnx_converter(scope, operator, container) -> None:
    onnx = _onnx()
    g, outputs = _build(operator.raw_operator)
    names = {"X": operator.inputs[0].full_name}
    for variable, name in zip(operator.outputs, outputs):
        names[name] = variable.full_name

    def mapped(name: str) -> str:
        if name == "":
            return name
        if name not in names:
            names[name] = scope.get_unique_variable_name(name)
        return names[name]

    for name, value in g.constants.items():
        tensor = _tensor(mapped(name), value)
        container.add_initializer(
            tensor.name, tensor.data_type, list(value.shape), onnx.numpy_helper.to_array(tensor)
        )
    if operator.inputs[0].type.__class__.__name__ != "FloatTensorType":
        raise UnsupportedModelError(
            f"{type(operator.raw_operator).__name__} in a Pipeline expects float32 inputs; "
            f"got {operator.inputs[0].type}"
        )
    for op, inputs, outs, attrs in g.nodes:
        container.add_node(
            op,
            [mapped(i) for i in inputs],
            [mapped(o) for o in outs],
            name=scope.get_unique_operator_name(op),
            op_version=OPSET,
            **attrs,
        )


_REGISTERED: set[type] = set()


def register_skl2onnx(classes: list[type] | None = None) -> None:
    """Register the ONNX converter of every built-in estimator (or of ``classes``) with
    skl2onnx, so that ``skl2onnx.to_onnx`` converts Pipelines ending in one; and
    :class:`elmscale.data.Scaler` as the ``MinMaxScaler`` it is (``elmscale train``'s model
    files hold it)."""
    from skl2onnx import update_registered_converter
    from skl2onnx.common._registration import get_converter, get_shape_calculator

    from elmscale.data.scaling import Scaler

    if Scaler not in _REGISTERED:  # the paper's scaling is a MinMaxScaler
        alias = "SklearnMinMaxScaler"
        scaler_converter = get_converter(alias)

        def convert_scaler(scope, operator, container):
            return scaler_converter(scope, operator, container)

        update_registered_converter(
            Scaler, alias, get_shape_calculator(alias), convert_scaler, overwrite=True
        )
        _REGISTERED.add(Scaler)
    if classes is None:
        classes = [entry.load() for entry in registry.entries()]
    for cls in classes:
        if cls in _REGISTERED:
            continue
        update_registered_converter(
            cls,
            f"elmscale_{cls.__name__}",
            _skl2onnx_shape,
            _skl2onnx_converter,
            parser=_skl2onnx_parser,
        )
        _REGISTERED.add(cls)
