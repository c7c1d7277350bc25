"""Confirm every label of the haze corpus against an independent float64 numpy oracle.

Usage (from the project root):  python tests/corpus/diagnosis_haze/verify.py [--reference] [stem ...]
(--reference adds a sanity row: the instructor reference judged as a correct file; it is never an oracle.)

Adapted for this corpus from the squall corpus's verify.py (same label schema, component vocabulary, tiers,
confirmation rules, oracle, runs and judge), with its own seeds ("haze-"), a few extra cases and runs (Python and
integer coefficients of exactly 0 under the causal mask, one head with several tokens and widths, a lambda case
with lambda_init = 0.5), and its own WHERE predicates:

* The oracle is plain numpy in float64: its own masked softmax, the signed map and the value product, and
  hand-derived gradients (softmax vector-Jacobian products, d out / d coefficient = -<dO, A2 V>, the lambda
  formula's derivatives). It is checked at start-up against central finite differences and against the row-sum
  identity. It never calls the reference solution, and torch is never used to compute an expected value.
* One battery of runs per function (cases x dtypes x layouts x frozen inputs x coefficient kinds x grad modes x
  gradient APIs x tied arguments x earlier calls), inherited from squall (itself from rime, sleet and fog), plus
  the haze runs.
* Every run gets a fresh copy of the submission's module and is judged on the contract (no exception, a plain
  tensor of the right shape and dtype, inputs unchanged: values, version counters, requires_grad, shape and
  strides; default dtype unchanged; output attached to the graph when an input requires grad; no inference
  tensor outside inference_mode) and on values and gradients.
* float32 runs are compared with the oracle of the float32-rounded inputs. Tolerances relative to 1 + |oracle|:
  values 1e-9 (float64), 1e-4 (float32), 2e-3 (float32 with logits of hundreds or more); gradients 1e-9 (float64)
  and 2e-3 (float32); a float32 / float16 / bfloat16 coefficient's gradient at least 1e-6 / 2e-3 / 1e-2.

A label is confirmed when
  * a correct file passes every run of both batteries (the witnesses of every wrong file included);
  * a wrong file's other function passes its whole battery; every run of the blamed function outside the label's
    WHERE predicate passes; every witness lies inside WHERE and shows the labelled failure (T1: the contract check
    of the component; T2: a wrong value with the contract kept; T3: right values and contract on every run of the
    battery and a wrong gradient, or a raising backward, on the witnesses).

Prints one row per file, a summary, and exits 1 if any label is not confirmed.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import sys
import time
import types
import warnings
import zlib
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
LAM, ATT = "differential_lambda", "differential_attention"
COMPONENTS = {
    "load", "type", "shape", "dtype", "mutation", "graph", "mask", "scale", "softmax", "branch", "sign",
    "coefficient", "value", "lambda", "backward", "randomness", "state", "stability", "strided", "layout", "output",
}
T1_CHECK = {"mutation": ("mutation",), "dtype": ("dtype",), "shape": ("shape",), "graph": ("graph", "exc"),
            "strided": ("exc",), "type": ("type",), "lambda": ("exc",), "coefficient": ("exc",)}
ATT_NAMES = ("q1", "k1", "q2", "k2", "value", "coefficient")
LAM_NAMES = ("q1", "k1", "q2", "k2")
TDT = {"f64": torch.float64, "f32": torch.float32}
TOL = {"f64": 1e-9, "f32": 1e-4, "f32large": 2e-3}
TOL_GRAD = {"f64": 1e-9, "f32": 2e-3}
TRAINABLE_COEF = ("tensor", "f32", "f64", "half", "bf16", "param")
NO_GRAPH_MODES = ("no_grad", "inference")


# ====================================================================== numpy oracle
def np_maps(q, k, causal):
    """Row softmax over the keys of q k^T / sqrt(D) (+ the causal -inf mask), in float64."""
    t, d = q.shape[-2], q.shape[-1]
    s = np.einsum("bhid,bhjd->bhij", q, k) / math.sqrt(d)
    if causal:
        s = np.where(np.triu(np.ones((t, t), dtype=bool), 1), -np.inf, s)
    z = s - s.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def np_att(arrays, c, causal, cot):
    """Value of (A1 - c A2) V and its gradients with respect to q1, k1, q2, k2, value and c."""
    q1, k1, q2, k2, v = arrays
    scale = 1.0 / math.sqrt(q1.shape[-1])
    a1, a2 = np_maps(q1, k1, causal), np_maps(q2, k2, causal)
    p = a1 - c * a2
    out = np.einsum("bhij,bhje->bhie", p, v)
    g = np.asarray(cot, dtype=np.float64)
    d_v = np.einsum("bhij,bhie->bhje", p, g)
    d_p = np.einsum("bhie,bhje->bhij", g, v)
    grads = []
    for a, d_a, q, k in ((a1, d_p, q1, k1), (a2, -c * d_p, q2, k2)):
        d_s = a * (d_a - (d_a * a).sum(axis=-1, keepdims=True)) * scale
        grads += [np.einsum("bhij,bhjd->bhid", d_s, k), np.einsum("bhij,bhid->bhjd", d_s, q)]
    d_c = -float(np.einsum("bhie,bhie->", g, np.einsum("bhij,bhje->bhie", a2, v)))
    return out, grads + [d_v, np.asarray(d_c)]


def np_lam(arrays, init, cot):
    q1, k1, q2, k2 = arrays
    e1, e2 = math.exp(float(np.dot(q1, k1))), math.exp(float(np.dot(q2, k2)))
    g = float(cot)
    return np.asarray(e1 - e2 + init), [g * e1 * k1, g * e1 * q1, -g * e2 * k2, -g * e2 * q2]


def self_test_oracle():
    rng = np.random.default_rng(11)
    h = 1e-6
    for causal in (True, False):
        arrs = [rng.standard_normal((1, 2, 4, 3)) for _ in range(4)] + [rng.standard_normal((1, 2, 4, 6))]
        c = -0.43
        cot = rng.standard_normal((1, 2, 4, 6))
        _, grads = np_att(arrs, c, causal, cot)
        for i in range(5):
            num = np.zeros_like(arrs[i])
            for idx in np.ndindex(arrs[i].shape):
                plus = [a.copy() for a in arrs]
                minus = [a.copy() for a in arrs]
                plus[i][idx] += h
                minus[i][idx] -= h
                num[idx] = ((np_att(plus, c, causal, cot)[0] - np_att(minus, c, causal, cot)[0]) * cot).sum() / (2 * h)
            assert np.allclose(num, grads[i], rtol=1e-6, atol=1e-7), ("attention gradient", i, causal)
        num_c = ((np_att(arrs, c + h, causal, cot)[0] - np_att(arrs, c - h, causal, cot)[0]) * cot).sum() / (2 * h)
        assert abs(num_c - float(grads[5])) < 1e-6 * (1 + abs(num_c)), "coefficient gradient"
        const = arrs[:4] + [np.full((1, 2, 4, 6), 1.75)]
        assert np.allclose(np_att(const, c, causal, cot)[0], (1 - c) * 1.75), "row-sum identity"
    vecs = [rng.standard_normal(3) * 0.5 for _ in range(4)]
    _, grads = np_lam(vecs, 0.2, 0.7)
    for i in range(4):
        num = np.zeros(3)
        for j in range(3):
            plus = [v.copy() for v in vecs]
            minus = [v.copy() for v in vecs]
            plus[i][j] += h
            minus[i][j] -= h
            num[j] = 0.7 * (float(np_lam(plus, 0.2, 1)[0]) - float(np_lam(minus, 0.2, 1)[0])) / (2 * h)
        assert np.allclose(num, grads[i], rtol=1e-6, atol=1e-8), ("lambda gradient", i)


# ====================================================================== cases
def _rng(name):
    return np.random.default_rng(zlib.crc32(("haze-" + name).encode()))


ATT_CASES: dict = {}
LAM_CASES: dict = {}


def att_case(name, b, h, t, d, coef, causal, scale=1.0, head_constant=False, large=False, negative=False,
             arrays=None):
    rng = _rng(name)
    hh = 1 if head_constant else h
    arrs = [np.repeat(rng.standard_normal((b, hh, t, d)) * scale, h // hh, axis=1) for _ in range(4)]
    arrs.append(np.repeat(rng.standard_normal((b, hh, t, 2 * d)), h // hh, axis=1))
    if negative:   # large logits, all far below zero: queries along +u, keys along -u
        u = np.ones(d) / np.sqrt(d)
        for i in (0, 2):
            arrs[i] = scale * u + 0.5 * rng.standard_normal((b, h, t, d))
        for i in (1, 3):
            arrs[i] = -scale * u + 0.5 * rng.standard_normal((b, h, t, d))
    if arrays is not None:
        arrs = [np.asarray(a, dtype=np.float64) for a in arrays(rng)]
    cot = rng.standard_normal((b, h, t, 2 * d))
    ATT_CASES[name] = dict(name=name, b=b, h=h, t=t, d=d, coef=coef, causal=causal, arrays=arrs, cot=cot,
                           large=large, head_constant=head_constant)


def _one_hot_rows(q_value, k_first):
    """B = H = 1, T = 3, D = 1: every query q_value, keys (k_first, 100, 50); the first key dominates every row
    with a logit of q_value * k_first; the second branch has ordinary logits."""
    def build(rng):
        q1 = np.full((1, 1, 3, 1), q_value)
        k1 = np.array([k_first, 100.0, 50.0]).reshape(1, 1, 3, 1)
        q2, k2 = (rng.standard_normal((1, 1, 3, 1)) for _ in range(2))
        return [q1, k1, q2, k2, rng.standard_normal((1, 1, 3, 2))]
    return build


att_case("A", 2, 2, 5, 3, 0.37, True)
att_case("A2s", 2, 2, 5, 3, -0.6, True)                  # the shape of A, other content
att_case("B", 1, 3, 6, 4, -0.55, False)
att_case("C", 2, 1, 7, 2, 1.4, True)
att_case("E", 1, 2, 5, 3, 1.0, True)                     # coefficient exactly 1
att_case("EQ", 1, 2, 6, 3, 1.0, True)                    # used with tied arguments
att_case("Z", 1, 2, 6, 3, 0.0, True)                     # coefficient exactly 0
att_case("R1", 2, 1, 1, 2, -0.2, False)                  # T = 1
att_case("S1", 1, 1, 1, 3, 0.6, True)
att_case("O1", 2, 3, 7, 1, 0.45, True)                   # D = 1
att_case("O1n", 1, 2, 5, 1, -0.4, False)
att_case("D8", 1, 2, 6, 8, -0.35, True)
att_case("D16n", 2, 1, 7, 16, 0.6, False)
att_case("D32", 1, 2, 5, 32, 0.3, True)                  # 2D = 64
att_case("D33n", 1, 1, 4, 33, 0.4, False)                # 2D = 66
att_case("D64", 1, 2, 6, 64, -0.2, True)
att_case("BH1", 1, 1, 9, 4, 0.65, True)
att_case("HT", 1, 4, 3, 2, -0.3, False)                  # more heads than tokens, B < H
att_case("B3H1", 3, 1, 5, 3, 0.45, True)                 # B > H
att_case("BH40", 2, 20, 5, 3, 0.35, True)                # 40 (batch, head) pairs
att_case("M10", 1, 2, 12, 4, 0.45, True, scale=3.2)
att_case("PX", 2, 2, 5, 3, 0.123456789, True)            # coefficient with many digits
att_case("CB", 1, 1, 5, 3, 3e5, True)                    # a huge coefficient
att_case("NI", 1, 2, 5, 3, -3.0, False)                  # integer-valued negative coefficient
att_case("H", 2, 3, 5, 3, 0.4, True, head_constant=True)  # for layouts expanded over the heads
att_case("Hn", 1, 2, 6, 2, -0.3, False, head_constant=True)
att_case("K130", 1, 1, 130, 8, 0.5, True)
att_case("K130n", 1, 2, 130, 3, -0.6, False)
att_case("C300", 1, 1, 300, 3, 0.3, True)
att_case("N300", 1, 2, 300, 3, -0.25, False)
att_case("C600", 1, 1, 600, 4, 0.55, True)
att_case("L1", 1, 2, 6, 4, 0.5, True, scale=20.0, large=True)      # logits of hundreds to a thousand
att_case("L2", 1, 2, 40, 4, 0.6, False, scale=20.0, large=True)
att_case("L3", 2, 1, 9, 4, -0.3, True, scale=15.0, large=True, negative=True)
att_case("G1", 1, 2, 12, 4, 0.5, True, scale=30.0, large=True)     # logits of thousands
att_case("BF32", 1, 1, 3, 1, 0.5, True, large=True, arrays=_one_hot_rows(200.0, 164.34))     # row max 32868
att_case("BF64", 1, 1, 3, 1, -0.4, False, large=True, arrays=_one_hot_rows(1000.0, 263.144))  # row max 263144
att_case("K128", 1, 2, 128, 3, 0.35, True)               # exactly two chunks of 64, one chunk of 128
att_case("K192n", 1, 1, 192, 4, -0.45, False)            # three chunks of 64, two chunks of 128
att_case("P3", 1, 3, 3, 2, 0.7, True)                    # H == T, D = 2
att_case("TYP1", 1, 2, 6, 4, 0.5, True)                  # a typical small example (reported only)


def _zero_values(b, h, t, d):
    def build(rng):
        return [rng.standard_normal((b, h, t, d)) for _ in range(4)] + [np.zeros((b, h, t, 2 * d))]
    return build


att_case("VZ", 1, 2, 5, 3, 0.4, True, arrays=_zero_values(1, 2, 5, 3))     # every value row zero
att_case("VZn", 2, 1, 4, 2, -0.3, False, arrays=_zero_values(2, 1, 4, 2))


def _overflow_rows(q_value):
    """B = H = 1, T = 4, D = 1, causal: every query q_value, keys (-1, -1, 5, 5): in row 0 the hidden keys' logits
    exceed the visible one by 6 * q_value (600: past float32's exp range only; 1800: past float64's as well)."""
    def build(rng):
        q1 = np.full((1, 1, 4, 1), q_value)
        k1 = np.array([-1.0, -1.0, 5.0, 5.0]).reshape(1, 1, 4, 1)
        q2, k2 = (rng.standard_normal((1, 1, 4, 1)) for _ in range(2))
        return [q1, k1, q2, k2, rng.standard_normal((1, 1, 4, 2))]
    return build


att_case("OV", 1, 1, 4, 1, 0.4, True, large=True, arrays=_overflow_rows(100.0))
att_case("OV2", 1, 1, 4, 1, -0.3, True, large=True, arrays=_overflow_rows(300.0))

# added for the rime corpus
att_case("H16", 1, 16, 4, 2, 0.45, True)                 # two full groups of 8 heads
att_case("H16n", 2, 16, 3, 2, -0.35, False)
att_case("H8", 2, 8, 4, 3, 0.55, True)                   # exactly one group of 8 heads
att_case("DT", 1, 2, 3, 3, 0.4, True)                    # T == D
att_case("DT4", 2, 1, 4, 4, -0.5, True)

# added for the squall corpus
att_case("VN", 1, 2, 6, 4, 0.45, True, scale=60.0, large=True, negative=True)     # logits near -1800
att_case("VNn", 2, 1, 5, 3, -0.3, False, scale=60.0, large=True, negative=True)   # logits near -2000


def _hot_rows(q_level, noise):
    """B = 1, H = 2, T = 6, D = 4: every query entry about q_level, every key entry q_level + noise: logits of
    about 2 q_level^2 (past the exp range), with a spread (not one-hot) softmax in every row."""
    def build(rng):
        shape = (1, 2, 6, 4)
        q1 = q_level + 0.01 * rng.standard_normal(shape)
        k1 = q_level + noise * rng.standard_normal(shape)
        q2 = q_level + 0.01 * rng.standard_normal(shape)
        k2 = q_level + noise * rng.standard_normal(shape)
        return [q1, k1, q2, k2, rng.standard_normal((1, 2, 6, 8))]
    return build


att_case("HB", 1, 2, 6, 4, 0.35, True, large=True, arrays=_hot_rows(20.0, 0.1))      # logits near 800
att_case("HBn", 1, 2, 6, 4, -0.45, False, large=True, arrays=_hot_rows(9.0, 0.2))    # logits near 160
att_case("SN", 1, 2, 5, 3, 1 - 4e-7, True)               # within rounding noise of 1
att_case("SN0", 2, 1, 4, 2, 3e-7, False)                 # within rounding noise of 0

# added for the haze corpus
att_case("HZ1", 1, 1, 8, 5, -0.4, False)                 # one head, non-causal, odd width
att_case("HZ2", 2, 1, 6, 3, 0.0, True)                   # one head, coefficient exactly 0, causal
att_case("HZ3", 1, 3, 4, 1, 0.8, True)                   # D = 1 with several heads


def _vectors(seed, n, scale):
    rng = _rng(seed)
    return [rng.standard_normal(n) * scale for _ in range(4)]


def lam_case(name, vectors, init=None, cot=0.7):
    LAM_CASES[name] = dict(name=name, arrays=[np.asarray(v, dtype=np.float64) for v in vectors], init=init,
                           cot=cot, n=len(vectors[0]))


lam_case("a", _vectors("la", 6, 0.35))                    # default lambda_init
lam_case("b", _vectors("lb", 3, 0.5), 0.65)
lam_case("d", [[-0.3, 0.2], [0.6, -0.4], [0.9, 0.5], [0.8, 0.7]], 0.35)     # negative lambda
lam_case("e", _vectors("le", 64, 0.15), 0.8)
lam_case("k", [[1.0], [-0.7], [0.4], [0.9]], 0.2)                           # D_lambda = 1
lam_case("k2", [[0.5], [0.3], [-1.2], [0.6]], -0.4)
lam_case("w", _vectors("lw", 40, 0.2), -0.3)
lam_case("p150", _vectors("lp150", 150, 0.08), 0.3)
lam_case("zero", [[0.0, 0.0], [0.3, -0.2], [0.0, 0.0], [0.1, 0.4]], 0.0)    # zero vectors
lam_case("sqz", _vectors("lsqz", 3, 0.5), 0.0)                              # lambda_init = 0
lam_case("ihi", _vectors("lihi", 5, 0.3), 1.5)
lam_case("ineg", _vectors("lineg", 6, 0.3), -0.8)
lam_case("negc", _vectors("lneg", 5, 0.4), 0.3, cot=-0.8)                   # negative incoming gradient
lam_case("zc", _vectors("lzc", 4, 0.4), 0.2, cot=0.0)                       # zero incoming gradient
lam_case("big", [[5.0, 4.0], [6.0, 5.0], [1.0, 0.5], [1.0, 2.0]], 0.2)       # dot products 50 and 2
lam_case("nt", [[0.5, 0.2], [0.4, 0.5], [0.6, 0.1], [0.5, 0.04]], 0.3)      # near tie 0.300 / 0.304
_eq = _vectors("leqv", 5, 0.4)
lam_case("eqv", [_eq[0], _eq[1], _eq[0].copy(), _eq[2]], 0.25)              # q2 equal in value to q1 (separate)
lam_case("gap", [[2.0, 3.0], [2.5, 3.0], [0.5, 0.4], [0.2, -0.3]], 0.2)   # dot products 14 and -0.02
lam_case("gap64", [[3.0, 3.0, 2.0], [3.0, 3.0, 1.5], [0.1, 0.2, 0.3], [0.3, 0.2, -0.1]], 0.6)  # 21, 0.04
lam_case("gapr", [[0.5, 0.4], [0.2, -0.3], [2.0, 3.0], [2.5, 3.0]], 0.2)  # reversed: 14 on the second pair
lam_case("typ", _vectors("ltyp", 8, 0.3))
# added for the squall corpus
lam_case("orth", [[1.0, 0.0, 2.0], [0.0, 3.0, 0.0], [0.4, -0.3, 0.2], [0.5, 0.1, -0.6]], 0.3)   # q1 . k1 = 0
# added for the haze corpus
lam_case("half", _vectors("lhalf", 4, 0.4), 0.5)                            # lambda_init = 0.5 exactly


# ====================================================================== runs
def R(case, **kw):
    v = dict(case=case, dtype="f64", layout="contig", frozen=(), coef_kind="tensor", coef=None, mode=None,
             grads=True, api="backward", ties=(), pre=(), init_pos=False)
    v.update(kw)
    v["frozen"] = tuple(v["frozen"])
    v["ties"] = tuple(v["ties"])
    v["pre"] = tuple(v["pre"])
    return v


def _att_runs():
    runs = []
    small = ["A", "A2s", "B", "C", "E", "Z", "R1", "S1", "O1", "O1n", "D8", "D16n", "D32", "D33n", "D64", "BH1",
             "HT", "B3H1", "BH40", "M10", "PX", "CB"]
    runs += [R(c) for c in small]
    runs += [R("A", coef_kind="python"), R("B", coef_kind="python"), R("D8", coef_kind="python"),
             R("E", coef_kind="python"), R("E", coef_kind="pyint"), R("NI", coef_kind="pyint"),
             R("E", coef_kind="int"), R("NI", coef_kind="int"), R("A", coef_kind="const"),
             R("A", coef_kind="f32"), R("PX", coef_kind="f32", frozen=("coefficient",)),
             R("A", dtype="f32", coef_kind="f64"), R("B", dtype="f32", coef_kind="f64", frozen=("coefficient",)),
             R("A", coef_kind="half"), R("A", coef_kind="param", frozen=("coefficient",)), R("B", coef_kind="param"),
             R("A", coef_kind="i8edge"), R("B", dtype="f32", coef_kind="i16edge"), R("CB", coef_kind="python"),
             R("A", coef_kind="bf16"), R("C", dtype="f32", coef_kind="bf16", coef=0.7),
             R("A", dtype="f32", coef_kind="half", coef=0.123), R("B", coef_kind="half", coef=-0.3),
             R("D8", dtype="f32", coef_kind="f64", coef=0.123456789), R("P3"), R("P3", dtype="f32")]
    runs += [R(c, dtype="f32") for c in ("A", "B", "O1", "D8", "D33n", "BH40", "M10", "HT", "C300", "N300",
                                         "L1", "L2", "L3", "G1")]
    runs += [R("PX", dtype="f32", coef_kind="f32"), R("A", dtype="f32", coef_kind="python")]
    runs += [R("A", layout="perm"), R("B", layout="perm"), R("D8", layout="perm"), R("N300", layout="perm"),
             R("A", layout="tokmajor"), R("D16n", layout="tokmajor"), R("K130n", layout="tokmajor"),
             R("H", layout="expand"), R("Hn", layout="expand"), R("A", layout="perm", dtype="f32"),
             R("H", layout="expand", frozen=("q1", "k1", "q2", "k2", "value"))]
    for n in range(7):
        for keep in itertools.combinations(ATT_NAMES, n):
            runs.append(R("A", frozen=tuple(x for x in ATT_NAMES if x not in keep)))
    runs += [R("C", frozen=("q1", "k1")), R("C", frozen=("q2", "k2", "coefficient")),
             R("C300", frozen=("value", "coefficient")), R("D64", frozen=("q1", "q2", "value"))]
    runs += [R("S1", mode="no_grad"), R("C", dtype="f32", mode="inference", coef_kind="python"),
             R("Z", mode="no_grad"), R("R1", mode="inference"), R("D8", frozen=("q1", "k1", "value")),
             R("C", dtype="f32", api="grad", frozen=("value",)), R("A", mode="no_grad")]
    runs += [R("A", mode="no_grad"), R("B", mode="inference"), R("C", mode="no_grad"),
             R("D8", mode="no_grad", dtype="f32"), R("D64", mode="inference"), R("BH40", mode="inference"),
             R("N300", mode="inference"), R("A", mode="inference", coef_kind="python"),
             R("H", layout="expand", mode="no_grad"), R("A", layout="tokmajor", mode="inference"),
             R("E", mode="no_grad", coef_kind="int")]
    runs += [R("A", api="grad", frozen=("k1",)), R("B", api="grad", frozen=("value", "q2")), R("C", api="grad"),
             R("BH1", api="grad", coef_kind="python")]
    runs += [R(c) for c in ("K130", "K130n", "C300", "N300", "C600", "K128", "K192n")]
    runs += [R("K128", dtype="f32"), R("K192n", mode="no_grad"), R("K130", mode="inference"),
             R("C300", frozen=("value", "coefficient")), R("N300", dtype="f32", api="grad",
                                                          frozen=("q1", "k1", "q2", "k2"))]
    runs += [R("C600", coef_kind="python"), R("L1"), R("L2"), R("L3"), R("G1")]
    runs += [R("EQ", ties=(("q2", "q1"),)), R("A", ties=(("k2", "k1"),)), R("B", ties=(("k1", "q1"),)),
             R("EQ", ties=(("q2", "q1"), ("k2", "k1"))), R("EQ", dtype="f32", mode="no_grad", ties=(("q2", "q1"),)),
             R("B", coef_kind="python", ties=(("q2", "q1"),)), R("C", mode="no_grad", ties=(("k2", "k1"),)),
             R("A", ties=(("q2", "k1"),))]
    # earlier calls on the same module: same tensors and coefficient, other tensors, or the other grad mode
    runs += [R("A", mode="no_grad", pre=(R("A", mode="no_grad"),)),
             R("A", mode="no_grad", pre=(R("A2s", mode="no_grad"),)),
             R("A", mode="no_grad", pre=(R("A", coef=0.9),)),
             R("A", pre=(R("A", mode="no_grad", coef=0.9),)),
             R("B", mode="inference", dtype="f32", pre=(R("B", mode="inference", dtype="f32"),))]
    # added for the fog corpus
    runs += [R("E", dtype="f32"), R("E", dtype="f32", coef_kind="python"), R("E", dtype="f32", coef_kind="pyint"),
             R("EQ", dtype="f32", ties=(("q2", "q1"), ("k2", "k1"))), R("A", ties=(("q2", "q1"), ("k2", "k1"))),
             R("A", dtype="f32", coef_kind="python", ties=(("q2", "q1"), ("k2", "k1"))), R("B", mode="no_grad", ties=(("q2", "q1"), ("k2", "k1"))),
             R("Z", ties=(("q2", "q1"), ("k2", "k1"))),
             R("VZ"), R("VZ", dtype="f32"), R("VZn"), R("VZ", mode="no_grad"), R("VZn", dtype="f32", mode="inference"),
             R("VZ", frozen=("value", "coefficient")), R("VZn", frozen=("q1", "k1", "q2", "k2", "coefficient")),
             R("VZ", layout="perm"),
             R("C", frozen=("value",)), R("B", dtype="f32", frozen=("value", "q2", "k2")),
             R("D8", frozen=("value", "coefficient"), api="grad"), R("K130", frozen=("value",))]
    # added for the sleet corpus
    runs += [R("OV"), R("OV", dtype="f32"), R("OV2"), R("OV2", dtype="f32", mode="no_grad"),
             R("OV", dtype="f32", coef_kind="python", frozen=("value",)),
             R("K130", mode="no_grad"), R("C300", mode="no_grad"), R("K192n", dtype="f32", mode="no_grad"),
             R("A", coef_kind="half", mode="no_grad"), R("B", coef_kind="int", frozen=("q2",)),
             R("S1", mode="no_grad"), R("P3", mode="no_grad")]
    # added for the rime corpus
    runs += [R("H16"), R("H16", dtype="f32", coef_kind="python"), R("H16n", mode="no_grad"), R("H8"),
             R("H8", dtype="f32", mode="inference"), R("DT"), R("DT", dtype="f32"), R("DT4"),
             R("DT4", layout="perm"), R("L1", layout="tokmajor"), R("G1", coef_kind="python"),
             R("BF32", dtype="f32"), R("C", layout="perm", frozen=("value",)), R("A2s", coef_kind="f32")]
    # added for the squall corpus
    runs += [R("VN"), R("VN", dtype="f32"), R("VNn"), R("VNn", dtype="f32", mode="no_grad"), R("VN", layout="perm"),
             R("HB"), R("HB", dtype="f32"), R("HBn"), R("HBn", dtype="f32"), R("HB", coef_kind="python"),
             R("SN"), R("SN", coef_kind="python"), R("SN0"), R("SN0", coef_kind="python", mode="no_grad"),
             R("SN", dtype="f32", coef_kind="python"), R("H", layout="expand", dtype="f32"),
             R("A", coef_kind="i8edge", mode="no_grad"), R("E", coef_kind="f32")]
    # added for the haze corpus
    runs += [R("Z", coef_kind="python"), R("Z", coef_kind="pyint"), R("Z", coef_kind="int"),
             R("Z", dtype="f32", coef_kind="python", mode="no_grad"), R("HZ2"), R("HZ2", coef_kind="python"),
             R("HZ2", dtype="f32", frozen=("coefficient",)), R("HZ1"), R("HZ1", dtype="f32", coef_kind="python"),
             R("HZ1", layout="perm"), R("HZ3"), R("HZ3", dtype="f32", mode="no_grad"), R("HZ3", coef_kind="pyint"),
             R("A", frozen=("k1", "k2", "value", "coefficient"), dtype="f32"),
             R("B", ties=(("k2", "k1"),), coef_kind="python")]
    return runs


def _lam_runs():
    runs = [R(c) for c in ("a", "b", "d", "e", "k", "k2", "w", "p150", "zero", "sqz", "ihi", "ineg", "negc",
                           "zc", "big", "nt", "eqv")]
    runs += [R(c, dtype="f32") for c in ("a", "b", "d", "e", "k", "w", "sqz", "zero", "big")]
    runs += [R("a", layout="perm"), R("e", layout="perm"), R("a", layout="perm", dtype="f32")]
    for n in range(5):
        for keep in itertools.combinations(LAM_NAMES, n):
            runs.append(R("a", frozen=tuple(x for x in LAM_NAMES if x not in keep)))
    runs += [R("a", mode="no_grad"), R("b", mode="inference"), R("a", mode="no_grad", dtype="f32"),
             R("e", mode="inference")]
    runs += [R("a", api="grad", frozen=("q2",)), R("b", api="grad")]
    runs += [R("a", ties=(("q2", "q1"),)), R("a", ties=(("k2", "k1"),)), R("b", ties=(("k1", "q1"),)),
             R("d", ties=(("q2", "q1"), ("k2", "k1")))]
    runs += [R("b", init_pos=True), R("a", init_pos=True, dtype="f32")]
    runs += [R(c) for c in ("gap", "gap64", "gapr")] + [R(c, dtype="f32") for c in ("gap", "gap64", "gapr")]
    runs += [R("gap", mode="no_grad"), R("gap", frozen=("q2", "k2")), R("big", frozen=("q2", "k2")),
             R("gap64", api="grad", frozen=("q1", "k1")), R("gap", dtype="f32", layout="perm")]
    # added for the fog corpus: tied lambda vectors, frozen or without a graph
    runs += [R("b", ties=(("k1", "q1"),), frozen=("q1",)), R("b", ties=(("k1", "q1"),), mode="no_grad"),
             R("a", ties=(("k2", "q2"),), frozen=("q2",)), R("a", ties=(("k2", "q2"),)),
             R("e", ties=(("k1", "q1"),), mode="inference")]
    # added for the rime corpus
    runs += [R("k", dtype="f32"), R("k2", api="grad"), R("d", layout="perm"), R("zero", frozen=("k1", "k2"))]
    # added for the squall corpus
    runs += [R("orth"), R("orth", dtype="f32"), R("orth", frozen=("k1",)), R("orth", mode="no_grad"),
             R("zero", mode="no_grad"), R("big", layout="perm")]
    # added for the haze corpus
    runs += [R("half"), R("half", dtype="f32"), R("half", mode="no_grad"), R("half", ties=(("k2", "k1"),))]
    return runs


RUNS_ATT = _att_runs()
RUNS_LAM = _lam_runs()


def describe(run):
    parts = [run["case"], run["dtype"]]
    if run["layout"] != "contig":
        parts.append(run["layout"])
    if run["frozen"]:
        parts.append("frozen=" + "+".join(run["frozen"]))
    if run["coef_kind"] != "tensor":
        parts.append("coef=" + run["coef_kind"])
    if run["coef"] is not None:
        parts.append(f"c={run['coef']}")
    if run["mode"]:
        parts.append(run["mode"])
    if run["api"] != "backward":
        parts.append("api=" + run["api"])
    if run["ties"]:
        parts.append("ties=" + ",".join(f"{d}<-{s}" for d, s in run["ties"]))
    if run["pre"]:
        parts.append("after[" + "; ".join(describe(p) for p in run["pre"]) + "]")
    if run["init_pos"]:
        parts.append("init positional")
    return "(" + " ".join(parts) + ")"


# ====================================================================== calling a submission
CODE: dict = {}


def compile_file(path: Path):
    try:
        CODE[path] = compile(path.read_text(), str(path), "exec")
        fresh_module(path)
        return None
    except BaseException as exc:  # noqa: BLE001
        return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


def fresh_module(path: Path):
    mod = types.ModuleType(f"haze_corpus_{path.parent.name}_{path.stem}")
    mod.__file__ = str(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(CODE[path], mod.__dict__)   # noqa: S102
    return mod


def _rounded(arrays, dtype):
    if dtype == "f32":
        return [np.asarray(a, dtype=np.float32).astype(np.float64) for a in arrays]
    return [np.asarray(a, dtype=np.float64) for a in arrays]


def coef_value(run):
    """The coefficient's value as the function receives it."""
    c = ATT_CASES[run["case"]]["coef"] if run["coef"] is None else run["coef"]
    kind = run["coef_kind"]
    if kind == "i8edge":
        return -127.0
    if kind == "i16edge":
        return -32767.0
    if kind in ("pyint", "int"):
        return float(int(c))
    if kind in ("tensor", "const", "param"):
        return float(np.float32(c)) if run["dtype"] == "f32" else float(c)
    if kind == "f32":
        return float(np.float32(c))
    if kind == "half":
        return float(np.float16(c))
    if kind == "bf16":
        return float(torch.tensor(float(c), dtype=torch.float64).to(torch.bfloat16).double())
    return float(c)   # python, f64


def effective_arrays(which, run):
    """The values the function receives (rounded to the run's dtype), tied arguments replaced by their source."""
    c = (ATT_CASES if which == ATT else LAM_CASES)[run["case"]]
    names = ATT_NAMES if which == ATT else LAM_NAMES
    arrays = _rounded(c["arrays"], run["dtype"])
    for dst, src in run["ties"]:
        arrays[names.index(dst)] = arrays[names.index(src)]
    return arrays


def _dense(x, tdt):
    x = np.ascontiguousarray(x)
    return torch.empty(x.shape, dtype=tdt).copy_(torch.from_numpy(x))


def _make(x, dtype, layout, rg):
    """(leaf, the view handed to the function, getter mapping a gradient of the leaf to the oracle's shape)."""
    tdt = TDT[dtype]
    if layout == "contig" or (layout in ("tokmajor", "expand") and x.ndim != 4):
        base = _dense(x, tdt).requires_grad_(rg)
        return base, base, (lambda g: g)
    if layout == "perm" and x.ndim == 4:          # storage [B, T, H, 2w], permuted, every second column
        b, h, t, w = x.shape
        full = np.zeros((b, t, h, 2 * w))
        full[..., 1::2] = x.transpose(0, 2, 1, 3)
        base = _dense(full, tdt).requires_grad_(rg)
        return base, base.permute(0, 2, 1, 3)[..., 1::2], (lambda g: g.permute(0, 2, 1, 3)[..., 1::2])
    if layout == "perm":                          # every third element of a longer vector
        full = np.zeros(3 * x.size)
        full[::3] = x
        base = _dense(full, tdt).requires_grad_(rg)
        return base, base[::3], (lambda g: g[::3])
    if layout == "tokmajor":                      # dense [B, T, H, w] storage seen as [B, H, T, w]
        base = _dense(x.transpose(0, 2, 1, 3), tdt).requires_grad_(rg)
        return base, base.permute(0, 2, 1, 3), (lambda g: g.permute(0, 2, 1, 3))
    if layout == "expand":                        # [B, 1, T, w] leaf expanded over the heads (stride 0)
        base = _dense(x[:, :1], tdt).requires_grad_(rg)
        return base, base.expand(x.shape), (lambda g: g)
    raise ValueError(layout)


def _trainable(run, name, which):
    names = ATT_NAMES if which == ATT else LAM_NAMES
    for dst, src in run["ties"]:
        if name == dst:
            name = src
    if not run["grads"] or name in run["frozen"]:
        return False
    if which == ATT and name == "coefficient":
        return run["coef_kind"] in TRAINABLE_COEF
    return name in names


def _coefficient(run, tdt):
    c = ATT_CASES[run["case"]]["coef"] if run["coef"] is None else run["coef"]
    kind = run["coef_kind"]
    rg = _trainable(run, "coefficient", ATT)
    if kind == "python":
        return c
    if kind == "pyint":
        return int(c)
    if kind == "int":
        return torch.tensor(int(c))
    if kind == "i8edge":
        return torch.tensor(-127, dtype=torch.int8)
    if kind == "i16edge":
        return torch.tensor(-32767, dtype=torch.int16)
    if kind == "param":
        return torch.nn.Parameter(torch.tensor(float(c), dtype=tdt), requires_grad=rg)
    dt = {"f32": torch.float32, "f64": torch.float64, "half": torch.float16, "bf16": torch.bfloat16}.get(kind, tdt)
    return torch.tensor(float(c), dtype=dt).requires_grad_(rg)


def build_inputs(which, run):
    c = (ATT_CASES if which == ATT else LAM_CASES)[run["case"]]
    names = ATT_NAMES if which == ATT else LAM_NAMES
    arrays = _rounded(c["arrays"], run["dtype"])
    n_t = 5 if which == ATT else 4
    made = [_make(arrays[i], run["dtype"], run["layout"], _trainable(run, names[i], which)) for i in range(n_t)]
    leaves = [m[0] if m[0].requires_grad else None for m in made]
    args = [m[1] for m in made]
    getters = [m[2] for m in made]
    kwargs = {}
    if which == ATT:
        coef = _coefficient(run, TDT[run["dtype"]])
        args.append(coef)
        leaves.append(coef if isinstance(coef, torch.Tensor) and coef.requires_grad else None)
        getters.append(lambda g: g)
        kwargs["causal"] = c["causal"]
    elif c["init"] is not None:
        if run["init_pos"]:
            args.append(c["init"])
        else:
            kwargs["lambda_init"] = c["init"]
    for dst, src in run["ties"]:
        d, s = names.index(dst), names.index(src)
        args[d] = args[s]
        leaves[d] = None
    watched = [a for a in args if isinstance(a, torch.Tensor)]
    return args, kwargs, watched, leaves, getters


MODES = {"no_grad": torch.no_grad, "inference": torch.inference_mode}


def _snapshot(ts):
    return [(t.detach().clone(), t._version, t.dtype, t.requires_grad, tuple(t.shape), t.stride()) for t in ts]


def _changed(ts, snap):
    return any(t._version != ver or t.dtype != dt or t.requires_grad != rg or tuple(t.shape) != sh
               or t.stride() != st or not torch.equal(t.detach(), old)
               for t, (old, ver, dt, rg, sh, st) in zip(ts, snap))


def call(path, which, run):
    res = dict(exc=None, bexc=None, out=None, tensor=False, shape=None, dtype=None, inference=False,
               requires_grad=False, mutated=False, default_dtype_ok=True, grads=None, graph_needed=False)
    mod = fresh_module(path)
    fn = getattr(mod, which)
    for pre in run["pre"]:
        pargs, pkw, _, pleaves, _ = build_inputs(which, pre)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with MODES.get(pre["mode"], contextlib.nullcontext)():
                    pout = fn(*pargs, **pkw)
                if pre["mode"] is None and isinstance(pout, torch.Tensor) and pout.requires_grad:
                    pout.sum().backward()
        except Exception:  # noqa: BLE001
            pass
    args, kwargs, watched, leaves, getters = build_inputs(which, run)
    res["graph_needed"] = run["mode"] is None and any(x is not None for x in leaves)
    c = (ATT_CASES if which == ATT else LAM_CASES)[run["case"]]
    snap = _snapshot(watched)
    default_dtype = torch.get_default_dtype()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with MODES.get(run["mode"], contextlib.nullcontext)():
                out = fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001
        res["exc"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:90]}"
        res["mutated"] = _changed(watched, snap)
        torch.set_default_dtype(default_dtype)
        return res
    res["default_dtype_ok"] = torch.get_default_dtype() == default_dtype
    torch.set_default_dtype(default_dtype)
    res["mutated"] = _changed(watched, snap)
    if not isinstance(out, torch.Tensor):
        return res
    res.update(tensor=type(out) is torch.Tensor, shape=tuple(out.shape), dtype=out.dtype,
               inference=out.is_inference(), requires_grad=bool(out.requires_grad),
               out=out.detach().double().numpy().copy())
    if res["graph_needed"] and out.requires_grad:
        names = ATT_NAMES if which == ATT else LAM_NAMES
        try:
            cot = torch.tensor(np.asarray(c["cot"]), dtype=out.dtype)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if run["api"] == "grad":
                    want = [(i, x) for i, x in enumerate(leaves) if x is not None]
                    got = torch.autograd.grad(out, [x for _, x in want], cot, allow_unused=True)
                    returned = {i: g for (i, _), g in zip(want, got)}
                else:
                    out.backward(cot)
                    returned = {i: x.grad for i, x in enumerate(leaves) if x is not None}
            res["grads"] = {names[i]: (None if g is None else getters[i](g).double().numpy())
                            for i, g in returned.items()}
        except Exception as exc:  # noqa: BLE001
            res["bexc"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:90]}"
        res["mutated"] = res["mutated"] or _changed(watched, snap)
    return res


ORACLE_CACHE: dict = {}


def oracle_for(which, run):
    coef = coef_value(run) if which == ATT else None
    key = (which, run["case"], run["dtype"], coef, run["ties"])
    if key not in ORACLE_CACHE:
        names = ATT_NAMES if which == ATT else LAM_NAMES
        arrays = effective_arrays(which, run)
        if which == ATT:
            c = ATT_CASES[run["case"]]
            out, grads = np_att(arrays, coef, c["causal"], c["cot"])
        else:
            c = LAM_CASES[run["case"]]
            out, grads = np_lam(arrays, 0.2 if c["init"] is None else c["init"], c["cot"])
        grads = list(grads)
        for dst, src in run["ties"]:                  # the source tensor collects the argument's gradient
            d, s = names.index(dst), names.index(src)
            grads[s] = grads[s] + grads[d]
            grads[d] = np.zeros_like(grads[d])
        ORACLE_CACHE[key] = (out, grads)
    out, grads = ORACLE_CACHE[key]
    grads = list(grads)
    if which == ATT and run["layout"] == "expand":
        grads = [g.sum(axis=1, keepdims=True) for g in grads[:5]] + [grads[5]]
    return out, grads


def close(got, want, tol):
    if got is None:
        return False
    got = np.asarray(got, dtype=np.float64)
    if got.shape != np.shape(want) or not np.all(np.isfinite(got)):
        return False
    return bool(np.all(np.abs(got - want) <= tol * (1.0 + np.abs(want))))


def judge(path, which, run):
    """-> dict(fwd_ok, contract (failed checks), wrong (gradient names), exc, res)."""
    res = call(path, which, run)
    c = (ATT_CASES if which == ATT else LAM_CASES)[run["case"]]
    want, wgrads = oracle_for(which, run)
    want_shape = tuple(c["arrays"][4].shape) if which == ATT else ()
    large = which == ATT and c["large"]
    ftol = TOL["f64"] if run["dtype"] == "f64" else (TOL["f32large"] if large else TOL["f32"])
    gtol = TOL_GRAD[run["dtype"]]
    contract = set()
    if res["exc"]:
        contract.add("exc")
    else:
        if not res["tensor"]:
            contract.add("type")
        elif res["shape"] != want_shape:
            contract.add("shape")
        if res["tensor"] and res["dtype"] != TDT[run["dtype"]]:
            contract.add("dtype")
        if not res["default_dtype_ok"]:
            contract.add("dtype")
        if res["graph_needed"] and not res["requires_grad"]:
            contract.add("graph")
        if run["mode"] != "inference" and res["inference"]:
            contract.add("graph")
    if res["mutated"]:
        contract.add("mutation")
    j = dict(res=res, exc=res["exc"] or res["bexc"], contract=contract, wrong=set(),
             fwd_ok=res["exc"] is None and res["tensor"] and close(res["out"], want, ftol))
    if res["grads"] is not None:
        names = ATT_NAMES if which == ATT else LAM_NAMES
        for name, g in res["grads"].items():
            tol = gtol
            if name == "coefficient" and run["coef_kind"] in ("f32", "half", "bf16"):
                tol = max(tol, {"f32": 1e-6, "half": 2e-3, "bf16": 1e-2}[run["coef_kind"]])
            if not close(g, wgrads[names.index(name)], tol):
                j["wrong"].add(name)
    return j


def run_ok(j):
    return not j["contract"] and j["fwd_ok"] and not j["wrong"] and not j["res"]["bexc"]


def summary(j):
    bits = []
    if j["contract"]:
        bits.append("contract:" + ",".join(sorted(j["contract"])))
    if j["exc"]:
        bits.append(j["exc"][:70])
    if not j["fwd_ok"] and not j["res"]["exc"]:
        bits.append("values wrong")
    if j["wrong"]:
        bits.append("grads wrong:" + ",".join(sorted(j["wrong"])))
    return "; ".join(bits) or "ok"


# ====================================================================== WHERE predicates
def _a(run):
    return ATT_CASES[run["case"]]


def _graph(run):
    return run["mode"] is None and run["grads"]


def _tied(run, dst, src):
    return (dst, src) in run["ties"]


def _any_trainable(run, names, which=ATT):
    return any(_trainable(run, n, which) for n in names)


def _value_all_zero(run):
    return not np.any(effective_arrays(ATT, run)[4])


def _causal(run):
    return _a(run)["causal"]


def _lam_init(run):
    init = LAM_CASES[run["case"]]["init"]
    return 0.2 if init is None else init


def _where_lam_graph(run):
    return _graph(run) and _any_trainable(run, LAM_NAMES, LAM)


def _coef_trainable_in_graph(run):
    return _graph(run) and _trainable(run, "coefficient", ATT)


def _second_branch_counts(run):
    """The second branch reaches the output (a nonzero coefficient) or a gradient (a trainable coefficient)."""
    return coef_value(run) != 0 or _coef_trainable_in_graph(run)


def _where_reused_probs(run):
    """A graph with a trainable query or key and rows of two or more keys (at T = 1 the map is constant)."""
    return _graph(run) and _a(run)["t"] > 1 and _any_trainable(run, ("q1", "k1", "q2", "k2"))


def _where_detached_queries(run):
    """A graph in which a tensor passed as q1 or q2 is trainable (tied arguments resolved to their source)."""
    return _graph(run) and (_trainable(run, "q1", ATT) or _trainable(run, "q2", ATT))


def _where_stacked_sequence(run):
    """Without the mask both maps are normalised over 2T keys; with it only the second (its rows also see K1)."""
    return not _causal(run) or _second_branch_counts(run)


QUERIES_ONLY = ("k1", "k2", "value", "coefficient")


WHERE = {
    # ---------------------------------------------------------------- attention
    "wrong/att_flash1_value_halves_crossed_in_second_branch": (
        _second_branch_counts,
        [R("A"), R("B", dtype="f32"), R("D8", mode="no_grad")]),
    "wrong/att_flash1_second_half_reuses_returned_probs": (
        _where_reused_probs,
        [R("A"), R("B", dtype="f32"), R("C", api="grad")]),
    "wrong/att_queries_scaled_on_detached_copy": (
        _where_detached_queries,
        [R("A", frozen=QUERIES_ONLY), R("A", frozen=QUERIES_ONLY, dtype="f32"),
         R("B", frozen=("q2",) + QUERIES_ONLY, api="grad")]),
    "wrong/att_coefficient_cast_with_type_as": (
        lambda r: r["coef_kind"] in ("python", "pyint"),
        [R("A", coef_kind="python"), R("NI", coef_kind="pyint"),
         R("C", dtype="f32", mode="inference", coef_kind="python")]),
    "wrong/att_packed_projection_split_even_odd": (
        lambda r: _a(r)["d"] > 1 and _a(r)["t"] > 1,
        [R("A"), R("B", dtype="f32"), R("HT", mode="no_grad")]),
    "wrong/att_causal_mask_rows_counted_from_one": (
        lambda r: _causal(r) and _a(r)["t"] > 1,
        [R("A"), R("C", dtype="f32"), R("D8", mode="no_grad")]),
    "wrong/att_pseudocode_groupnorm_per_head": (
        lambda r: True,
        [R("A"), R("B", dtype="f32"), R("HT", mode="no_grad")]),
    "wrong/att_stacked_branches_one_sequence_softmax": (
        _where_stacked_sequence,
        [R("A"), R("B", dtype="f32"), R("S1", mode="no_grad")]),
    "wrong/att_attention_helper_scale_default_from_value": (
        lambda r: _a(r)["t"] > 1 and _second_branch_counts(r),
        [R("A"), R("C", dtype="f32"), R("HT", mode="no_grad")]),
    "wrong/att_pseudocode_shapes_heads_in_width": (
        lambda r: _a(r)["h"] > 1 and _a(r)["t"] > 1,
        [R("A"), R("B", dtype="f32"), R("D8", mode="no_grad")]),
    # ---------------------------------------------------------------- lambda
    "wrong/lam_init_replaced_by_output_factor": (
        lambda r: _lam_init(r) != 0.5,
        [R("a"), R("b", dtype="f32"), R("d", mode="no_grad")]),
    "wrong/lam_gradient_kept_for_logging": (
        lambda r: not _where_lam_graph(r),
        [R("a", mode="no_grad"), R("b", mode="inference"), R("a", frozen=LAM_NAMES)]),
    "wrong/lam_learnable_scalar_returned_as_leaf": (
        _where_lam_graph,
        [R("a"), R("b", api="grad"), R("a", dtype="f32", frozen=("q2",))]),
    "wrong/lam_four_separate_vectors_enforced": (
        lambda r: bool(r["ties"]),
        [R("a", ties=(("q2", "q1"),)), R("b", ties=(("k1", "q1"),), mode="no_grad"),
         R("d", ties=(("q2", "q1"), ("k2", "k1")))]),
}


ALL_WITNESS_ATT = [w for k, (_, ws) in WHERE.items() if "/att_" in k for w in ws]
ALL_WITNESS_LAM = [w for k, (_, ws) in WHERE.items() if "/lam_" in k for w in ws]


def battery(which):
    return (RUNS_ATT + ALL_WITNESS_ATT) if which == ATT else (RUNS_LAM + ALL_WITNESS_LAM)


def judge_all(path, which):
    return [(run, judge(path, which, run)) for run in battery(which)]


def failures(results):
    return [f"{describe(r)}: {summary(j)}" for r, j in results if not run_ok(j)]


# ====================================================================== confirming a label
def schema_errors(lab):
    if not isinstance(lab.get("correct"), bool):
        return ["'correct' must be a bool"]
    if lab["correct"]:
        ok = set(lab) == {"correct", "style"} and isinstance(lab["style"], str) and lab["style"].strip()
        return [] if ok else ["a correct label has exactly 'correct' and a 'style' sentence"]
    errs = []
    if set(lab) != {"correct", "function", "tier", "component", "bug", "where", "names"}:
        errs.append("wrong keys")
    if lab.get("function") not in (LAM, ATT):
        errs.append("bad function")
    if lab.get("tier") not in ("T1", "T2", "T3"):
        errs.append("bad tier")
    if lab.get("component") not in COMPONENTS:
        errs.append("bad component")
    if lab.get("tier") == "T1" and lab.get("component") not in T1_CHECK:
        errs.append("T1 label needs a contract component")
    for field in ("bug", "where"):
        if not isinstance(lab.get(field), str) or not lab[field].strip():
            errs.append(f"missing {field} sentence")
    names = lab.get("names")
    if not (isinstance(names, list) and 6 <= len(names) <= 10
            and all(isinstance(n, str) and n and n == n.lower() for n in names)):
        errs.append("names must be 6-10 lowercase strings")
    return errs


def confirm(key, lab):
    path = HERE / (key + ".py")
    err = compile_file(path)
    if err:
        return False, "does not load: " + err
    if lab["correct"]:
        fails = failures(judge_all(path, LAM)) + failures(judge_all(path, ATT))
        n = len(battery(LAM)) + len(battery(ATT))
        return not fails, (f"all {n} runs agree (contract, values, gradients)" if not fails
                           else f"{len(fails)} runs fail: " + "; ".join(fails[:4]))
    fn, tier, comp = lab["function"], lab["tier"], lab["component"]
    if key not in WHERE:
        return False, "no WHERE entry"
    where, witness = WHERE[key]
    other = ATT if fn == LAM else LAM
    other_fails = failures(judge_all(path, other))
    if other_fails:
        return False, f"{other} should be correct but fails: " + "; ".join(other_fails[:3])
    results = judge_all(path, fn)
    inside = [(r, j) for r, j in results if where(r)]
    outside_bad = [f"{describe(r)}: {summary(j)}" for r, j in results if not where(r) and not run_ok(j)]
    if outside_bad:
        return False, f"differs outside its where: {outside_bad[:3]} ({len(outside_bad)})"
    not_inside = [describe(r) for r in witness if not where(r)]
    if not_inside:
        return False, f"witness outside its own where: {not_inside}"
    wit = [(r, judge(path, fn, r)) for r in witness]
    n_in_bad = sum(1 for _, j in inside if not run_ok(j))
    note = f"right on {len(results) - len(inside)} runs outside, {n_in_bad}/{len(inside)} inside differ"
    if tier == "T1":
        checks = T1_CHECK[comp]
        bad = [(r, j) for r, j in wit if not any(ch in j["contract"] for ch in checks)]
        if bad:
            return False, f"witness without the '{'/'.join(checks)}' contract failure: " + "; ".join(
                f"{describe(r)}: {summary(j)}" for r, j in bad)
        seen = sorted(set().union(*(j["contract"] for _, j in wit)))
        return True, f"witnesses break the contract ({','.join(seen)}); {note}"
    if tier == "T2":
        bad = [(r, j) for r, j in wit if j["contract"] or j["fwd_ok"]]
        if bad:
            return False, "witness keeps the values right, or breaks the contract: " + "; ".join(
                f"{describe(r)}: {summary(j)}" for r, j in bad)
        return True, f"witness values differ with the contract kept; {note}"
    fwd_bad = [f"{describe(r)}: {summary(j)}" for r, j in results if not j["fwd_ok"] or j["contract"]]
    if fwd_bad:
        return False, f"T3 label but forward or contract fails: {fwd_bad[:3]} ({len(fwd_bad)})"
    shown = [(r, j) for r, j in wit if j["wrong"] or j["exc"]]
    if len(shown) != len(wit):
        return False, "witness shows no gradient failure: " + ", ".join(
            describe(r) for r, j in wit if not (j["wrong"] or j["exc"]))
    wrong = sorted(set().union(*(j["wrong"] for _, j in shown)))
    excs = [j["exc"] for _, j in shown if j["exc"]]
    note = (f"forward and contract right everywhere; witness gradients wrong for {wrong}"
            + (f", backward raises ({excs[0][:45]})" if excs else "") + f"; {note}")
    if comp == "graph":
        return not excs, note
    return True, note


def battery_spread() -> str:
    ra, rl = battery(ATT), battery(LAM)
    a = [ATT_CASES[r["case"]] for r in ra]
    count = lambda pred: sum(1 for r, c in zip(ra, a) if pred(r, c))  # noqa: E731
    shapes = {(c["b"], c["h"], c["t"], c["d"]) for c in a}
    return (f"attention: {len(ra)} runs over {len(shapes)} (B, H, T, D) shapes, "
            f"T = 1: {count(lambda r, c: c['t'] == 1)}, D = 1: {count(lambda r, c: c['d'] == 1)}, "
            f"D > 32: {count(lambda r, c: c['d'] > 32)}, T >= 130: {count(lambda r, c: c['t'] >= 130)}, "
            f"B != H: {count(lambda r, c: c['b'] != c['h'])}, float32: {count(lambda r, c: r['dtype'] == 'f32')}, "
            f"causal=False: {count(lambda r, c: not c['causal'])}, "
            f"large logits: {count(lambda r, c: c['large'])}, "
            f"Python coefficient: {count(lambda r, c: r['coef_kind'] in ('python', 'pyint'))}, "
            f"integer tensor coefficient: {count(lambda r, c: r['coef_kind'] in ('int', 'i8edge', 'i16edge'))}, "
            f"trainable tensor coefficient: {count(lambda r, c: _trainable(r, 'coefficient', ATT))}, "
            f"non-contiguous layouts: {count(lambda r, c: r['layout'] != 'contig')}, "
            f"tied arguments: {count(lambda r, c: bool(r['ties']))}, "
            f"with earlier calls: {count(lambda r, c: bool(r['pre']))}, "
            f"no_grad / inference_mode: {count(lambda r, c: r['mode'] is not None)}\n"
            f"lambda: {len(rl)} runs, D_lambda from {min(LAM_CASES[r['case']]['n'] for r in rl)} to "
            f"{max(LAM_CASES[r['case']]['n'] for r in rl)}, float32: {sum(r['dtype'] == 'f32' for r in rl)}, "
            f"strided: {sum(r['layout'] != 'contig' for r in rl)}, tied: {sum(bool(r['ties']) for r in rl)}, "
            f"lambda_init values: {sorted({_lam_init(r) for r in rl})}")


TYPICAL = ([R("TYP1", dtype="f32", coef_kind="python"), R("TYP1", dtype="f32")], [R("typ", dtype="f32")])


def typical_ok(key: str) -> bool:
    """Right (values, contract, gradients) on a typical small float32 causal example: B = 1, H = 2, T = 6, D = 4,
    coefficient 0.5 as a Python float and as a trainable tensor, every input trainable; lambda with D_lambda = 8,
    the default lambda_init, every vector trainable."""
    path = HERE / (key + ".py")
    return (all(run_ok(judge(path, ATT, r)) for r in TYPICAL[0])
            and all(run_ok(judge(path, LAM, r)) for r in TYPICAL[1]))


def main() -> int:
    start = time.time()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    self_test_oracle()
    labels = json.loads((HERE / "labels.json").read_text())
    reference = "--reference" in sys.argv[1:]
    only = {a for a in sys.argv[1:] if a != "--reference"}
    files = {f"{p.parent.name}/{p.stem}" for d in ("correct", "wrong") for p in (HERE / d).glob("*.py")}
    problems = [f"{k}: file without a label" for k in sorted(files - labels.keys())]
    problems += [f"{k}: label without a file" for k in sorted(labels.keys() - files)]
    problems += [f"{k}: wrong label without a WHERE entry" for k in sorted(labels)
                 if not labels[k].get("correct") and k not in WHERE]
    stub = (HERE.parents[2] / "exercise" / "diff_attention.py").read_text().splitlines(keepends=True)
    banner = next(i for i, line in enumerate(stub) if "Your work starts here" in line)
    header = "".join(stub[: banner + 2])
    for p in sorted(q for d in ("correct", "wrong") for q in (HERE / d).glob("*.py")):
        text = p.read_text()
        for line in text.splitlines():
            s = line.strip()
            if s.startswith(("import ", "from ")) and s not in (
                    "import math", "import torch", "from __future__ import annotations",
                    "import torch.nn.functional as F"):
                problems.append(f"{p.parent.name}/{p.stem}: imports something else: {s}")
        first, _, rest = text.partition("\n")
        if not (first.startswith("# ") and rest.startswith(header)):
            problems.append(f"{p.parent.name}/{p.stem}: does not start with one comment line and the stub's header")
        for fn in ("def differential_lambda(", "def differential_attention(",
                   "check_lambda_inputs(q1, k1, q2, k2)", "check_attention_inputs(q1, k1, q2, k2, value, coefficient)"):
            if fn not in rest[len(header):]:
                problems.append(f"{p.parent.name}/{p.stem}: missing {fn}")
    rows = []
    for key in sorted(labels):
        if only and key not in only and key.split("/")[-1] not in only:
            continue
        lab = labels[key]
        errs = schema_errors(lab)
        if errs:
            rows.append((key, "-", False, "schema: " + "; ".join(errs)))
            print(f"{key:<62}  {'-':<16}  NO   {rows[-1][3]}", flush=True)
            continue
        if key not in files:
            continue
        tag = "correct" if lab["correct"] else f"{lab['tier']} {lab['component']}"
        t0 = time.time()
        try:
            ok, obs = confirm(key, lab)
        finally:
            torch.set_default_dtype(torch.float32)
        rows.append((key, tag, ok, f"{obs} [{time.time() - t0:.1f}s]"))
        print(f"{key:<62}  {tag:<16}  {'yes' if ok else 'NO '}  {rows[-1][3]}", flush=True)
    for p in problems:
        print("PROBLEM", p)
    wrong = [labels[k] for k, *_ in rows if not labels[k].get("correct")]
    n_ok = sum(1 for r in rows if r[2])
    print()
    print(f"SUMMARY: {len(rows)} labelled files ({len(rows) - len(wrong)} correct, {len(wrong)} wrong); "
          f"{n_ok} confirmed, {len(rows) - n_ok} not confirmed; {time.time() - start:.1f} s")
    for field in ("tier", "component", "function"):
        counts: dict = {}
        for lab in wrong:
            counts[lab[field]] = counts.get(lab[field], 0) + 1
        print(f"  by {field}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    typical = [k for k, *_ in rows if not labels[k].get("correct") and typical_ok(k)]
    print(f"  right on the typical small float32 causal example: {len(typical)} of {len(wrong)} wrong files "
          f"({', '.join(k.split('/')[-1] for k in typical)})")
    print("  battery: " + battery_spread().replace("\n", "\n  battery: "))
    if reference:   # sanity row: the instructor reference judged as a correct file (not counted above)
        ref = HERE.parents[2] / "reference" / "diff_attention.py"
        err = compile_file(ref)
        fails = [] if err else failures(judge_all(ref, LAM)) + failures(judge_all(ref, ATT))
        n = len(battery(LAM)) + len(battery(ATT))
        status = ("does not load: " + err) if err else (f"all {n} runs agree" if not fails
                                                          else f"{len(fails)} runs fail: " + "; ".join(fails[:4]))
        print(f"{'reference/diff_attention (sanity row)':<62}  {'correct':<16}  {'yes' if not err and not fails else 'NO '}  "
              f"{status}")
    print(f"{n_ok}/{len(rows)} labels verified")
    return 0 if n_ok == len(rows) and not problems else 1


if __name__ == "__main__":
    sys.exit(main())
