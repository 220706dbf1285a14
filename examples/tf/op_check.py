"""Element-wise ops on the GPU against TensorFlow's CPU, on operands that tell the operand order
apart (non-commutative values), same-shape and broadcast. Prints each failing case and
`op_check: N passed, M failed, K unavailable on the GPU`; run it on the simulated GPU in data mode."""
import numpy as np
import tensorflow as tf

rng = np.random.default_rng(1)
OPS = {
    "Sub": tf.math.subtract,
    "Mul": tf.math.multiply,
    "AddV2": tf.math.add,
    "RealDiv": tf.math.truediv,
    "Div": lambda x, y: tf.raw_ops.Div(x=x, y=y),
    "DivNoNan": tf.math.divide_no_nan,
    "Maximum": tf.math.maximum,
    "Minimum": tf.math.minimum,
    "FloorMod": tf.math.floormod,
    "FloorDiv": tf.math.floordiv,
    "Less": tf.math.less,
    "LessEqual": tf.math.less_equal,
    "Greater": tf.math.greater,
    "GreaterEqual": tf.math.greater_equal,
    "Equal": tf.math.equal,
    "NotEqual": tf.math.not_equal,
    "SquaredDifference": tf.math.squared_difference,
}
TYPES = {"float32": np.float32, "int64": np.int64, "int32": np.int32}


def values(dt, shape):
    if np.issubdtype(dt, np.floating):
        v = rng.standard_normal(shape).astype(dt) * 4
        return v
    v = rng.integers(-9, 10, size=shape).astype(dt)
    v[v == 0] = 3
    return v


passed = failed = unavailable = 0
for name, f in OPS.items():
    for tname, dt in TYPES.items():
        for sa, sb in [((7,), (7,)), ((7,), ()), ((), (7,)), ((3, 4), (3, 1))]:
            a, b = values(dt, sa), values(dt, sb)
            try:
                with tf.device("/CPU:0"):
                    want = f(tf.constant(a), tf.constant(b)).numpy()
            except Exception:
                continue  # not an op of this type
            try:
                with tf.device("/GPU:0"):
                    got = f(tf.constant(a), tf.constant(b)).numpy()
            except Exception as e:
                # TensorFlow's own failure (its run-time compiled kernels need libdevice on
                # disk for some ops): not a result to compare.
                unavailable += 1
                print(f"UNAVAILABLE {name} {tname} {sa} {sb}: {type(e).__name__}")
                continue
            same = got.shape == want.shape and (
                np.array_equal(got, want)
                or (got.dtype.kind == "f" and np.allclose(got, want, rtol=1e-6, atol=0, equal_nan=True))
            )
            if same:
                passed += 1
            else:
                failed += 1
                print(f"FAIL {name} {tname} {sa} {sb}: got {got.ravel()[:4]} want {want.ravel()[:4]}")
print(f"op_check: {passed} passed, {failed} failed, {unavailable} unavailable on the GPU")
