"""Confirm every label of the mist corpus against an independent float64 numpy oracle.

Usage (from the project root):  python tests/corpus/diagnosis_mist/verify.py [stem ...]

Adapted from the verify.py of the thaw corpus (itself adapted from ice's, hail's, gale's and tide's): one battery of
runs per function, a fresh copy of the submission's module per run, optional ``pre`` calls, contract checks, an
explicit WHERE predicate and witness runs for every wrong file, and the numpy oracle with hand-derived gradients,
checked at start-up against central finite differences. The oracle never calls the reference or torch autograd.
Changes for this corpus:

* New runs for the input properties this corpus's bugs depend on: more heads than tokens (H > T, e.g. one token and
  several heads), float64 tensor coefficients with float32 inputs, floating tensor coefficients that do not require
  grad, integer tensor coefficients, lambda_init above 1, on 1 and below 0.
* The thaw-specific WHERE predicates are replaced by this corpus's (shape, dtype, layout, contiguity, coefficient kind
  and lambda_init predicates computed from the run description).
* Components follow this corpus's vocabulary; a T1 label of component ``lambda`` or ``coefficient`` (a validation
  that rejects a legal argument) is confirmed by an exception on its witnesses. Labels carry 6-10 names.
* Submissions may also import ``torch.nn.functional as F``.

float32 runs are compared with the oracle of the float32-rounded inputs.
Tolerances (relative to 1 + |oracle|): values 1e-9 in float64, 1e-4 in float32 (2e-3 for logits of hundreds);
gradients 1e-9 in float64 and 2e-3 in float32.

A label is confirmed when
  * a correct file passes every run of both batteries (witnesses included);
  * for a wrong file: the other function passes its whole battery; every run of the blamed function outside
    WHERE passes; every witness lies inside WHERE and shows the labelled failure (T1 the contract check of the
    component, T2 a wrong value with the contract kept, T3 right values and contract on every run and a wrong
    gradient or a raising backward on the witnesses).

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
TOL = {"f64": 1e-9, "f32": 1e-4, "f32large": 2e-3}
TOL_GRAD = {"f64": 1e-9, "f32": 2e-3}
TDT = {"f64": torch.float64, "f32": torch.float32}
# the coefficient's value as the function receives it, per coefficient kind ("tensor", "const" and "param" have the
# inputs' dtype, "f32" / "f64" / "half" are 0-dim tensors of that dtype, "int" an int64 tensor, "python" a number)
COEF_VALUE = {"f32": lambda x: float(np.float32(x)), "half": lambda x: float(np.float16(x)), "int": int}


# ====================================================================== numpy oracle
def _np_maps(q, k, causal):
    d = q.shape[-1]
    t = q.shape[-2]
    s = np.einsum("bhid,bhjd->bhij", q, k) / math.sqrt(d)
    if causal:
        s = np.where(np.triu(np.ones((t, t), dtype=bool), 1), -np.inf, s)
    z = s - s.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def np_att(arrays, c, causal, cot):
    """Forward value and gradients (q1, k1, q2, k2, value, coefficient) of the contract's formula."""
    q1, k1, q2, k2, v = arrays
    d = q1.shape[-1]
    a1, a2 = _np_maps(q1, k1, causal), _np_maps(q2, k2, causal)
    p = a1 - c * a2
    out = np.einsum("bhij,bhje->bhie", p, v)
    g = np.asarray(cot, dtype=np.float64)
    d_v = np.einsum("bhij,bhie->bhje", p, g)
    d_p = np.einsum("bhie,bhje->bhij", g, v)
    grads = []
    for a, d_a, q, k in ((a1, d_p, q1, k1), (a2, -c * d_p, q2, k2)):
        d_s = a * (d_a - (d_a * a).sum(axis=-1, keepdims=True)) / math.sqrt(d)
        grads += [np.einsum("bhij,bhjd->bhid", d_s, k), np.einsum("bhij,bhid->bhjd", d_s, q)]
    d_c = -float((d_p * a2).sum())
    return out, grads + [d_v, np.asarray(d_c)]


def np_lam(arrays, init, cot):
    q1, k1, q2, k2 = arrays
    e1, e2 = math.exp(float(np.dot(q1, k1))), math.exp(float(np.dot(q2, k2)))
    g = float(cot)
    return np.asarray(e1 - e2 + init), [g * e1 * k1, g * e1 * q1, -g * e2 * k2, -g * e2 * q2]


def self_test_oracle():
    rng = np.random.default_rng(7)
    h = 1e-6
    for causal in (True, False):
        arrs = [rng.standard_normal((1, 2, 4, 3)) for _ in range(4)] + [rng.standard_normal((1, 2, 4, 6))]
        c = 0.37
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
        assert abs(num_c - float(grads[5])) < 1e-6 * (1 + abs(num_c))
        # each row of the signed map sums to 1 - c: the output of constant values is (1 - c) v
        ones = [arrs[0], arrs[1], arrs[2], arrs[3], np.ones((1, 2, 4, 6)) * 1.5]
        assert np.allclose(np_att(ones, c, causal, cot)[0], (1 - c) * 1.5)
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
    return np.random.default_rng(zlib.crc32(("mist-" + name).encode()))


ATT_CASES: dict = {}
LAM_CASES: dict = {}


def _logit_stats(arrs, d, causal):
    """(max |scaled logit|, largest gap between a row's overall and visible maximum,
    largest gap between a row's visible maximum and its maximum over the visible keys 0, 8, 16, ...)."""
    t = arrs[0].shape[-2]
    biggest, gap, sampled_gap = 0.0, 0.0, 0.0
    future = np.triu(np.ones((t, t), dtype=bool), 1)
    for q, k in ((arrs[0], arrs[1]), (arrs[2], arrs[3])):
        s = np.einsum("bhid,bhjd->bhij", q, k) / math.sqrt(d)
        biggest = max(biggest, float(np.abs(s).max()))
        vis = np.where(future, -np.inf, s) if causal else s
        if causal:
            gap = max(gap, float((s.max(axis=-1) - vis.max(axis=-1)).max()))
        sampled_gap = max(sampled_gap, float((vis.max(axis=-1) - vis[..., ::8].max(axis=-1)).max()))
    return biggest, gap, sampled_gap


def att_case(name, b, h, t, d, coef, causal, scale=1.0, head_constant=False, large=False, negative=False,
             tied_queries=False, arrays=None, q_const=False, edit=None):
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
    if tied_queries:
        arrs[2] = arrs[0].copy()
    if arrays is not None:
        arrs = [np.asarray(a, dtype=np.float64) for a in arrays(rng)]
    if q_const:    # one query per (batch, head), repeated along the sequence
        for i in (0, 2):
            arrs[i] = np.repeat(arrs[i][:, :, :1], t, axis=2)
    if edit is not None:
        edit(arrs)
    cot = rng.standard_normal((b, h, t, 2 * d))
    biggest, gap, sampled_gap = _logit_stats(arrs, d, causal)
    ATT_CASES[name] = dict(name=name, b=b, h=h, t=t, d=d, coef=coef, causal=causal, arrays=arrs, cot=cot,
                           large=large, maxlogit=biggest, gap=gap, sgap=sampled_gap, tied=tied_queries,
                           eq_branches=all(np.array_equal(arrs[i], arrs[i + 2]) for i in (0, 1)))


def _spike(size, t, d, strength):
    """Queries along e0; every key near 0 except key 5 (not a multiple of 8), which lies along e0."""
    def build(rng):
        out = []
        for _ in range(2):
            q = 0.05 * rng.standard_normal((1, 1, t, d))
            q[..., 0] += size
            k = 0.05 * rng.standard_normal((1, 1, t, d))
            k[..., 5, 0] += strength
            out += [q, k]
        return out + [rng.standard_normal((1, 1, t, 2 * d))]
    return build


def _vectors(seed, n, scale):
    rng = _rng(seed)
    return [rng.standard_normal(n) * scale for _ in range(4)]


def lam_case(name, vectors, init=None, cot=0.7):
    arrays = [np.asarray(v, dtype=np.float64) for v in vectors]
    dots = (float(np.dot(arrays[0], arrays[1])), float(np.dot(arrays[2], arrays[3])))
    LAM_CASES[name] = dict(name=name, arrays=arrays, init=init, cot=cot, large=False, dots=dots,
                           n=len(arrays[0]))


att_case("A", 2, 2, 5, 3, 0.37, True)
att_case("A2s", 2, 2, 5, 3, -0.6, True)                 # same shape as A, other content
att_case("B", 1, 3, 6, 4, -0.55, False)
att_case("B2s", 1, 3, 6, 4, 0.8, False)
att_case("C", 2, 1, 7, 2, 1.4, True)
att_case("E", 1, 2, 5, 3, 1, True)                      # coefficient exactly 1
att_case("EQ", 1, 2, 6, 3, 1, True, tied_queries=True)  # q2 equal to q1 in value, coefficient 1
att_case("EQn", 2, 1, 5, 4, 0.5, False, tied_queries=True)
att_case("O1", 2, 3, 7, 1, 0.45, True)                  # D = 1
att_case("D8", 1, 2, 6, 8, -0.35, True)
att_case("D16n", 2, 1, 7, 16, 0.6, False)
att_case("D32", 1, 2, 5, 32, 0.3, True)
att_case("D64", 1, 2, 6, 64, -0.2, True)
att_case("N64", 1, 1, 9, 64, 0.3, False)
att_case("W40", 1, 2, 6, 40, 0.3, False)
att_case("W5", 2, 2, 6, 5, 0.7, True)
att_case("R1", 2, 1, 1, 2, -0.2, False)                 # T = 1
att_case("S1", 1, 1, 1, 3, 0.6, True)
att_case("Z", 1, 2, 6, 3, 0.0, True)                    # coefficient exactly 0
att_case("MX", 2, 2, 5, 3, 0.375, True)                 # exact in float32
att_case("BH40", 2, 20, 5, 3, 0.35, True)
att_case("BH1", 1, 1, 9, 4, 0.65, True)
att_case("BH1n", 1, 1, 8, 3, -0.45, False)
att_case("H", 2, 3, 5, 3, 0.4, True, head_constant=True)
att_case("Hn", 1, 2, 6, 2, -0.3, False, head_constant=True)
att_case("H8", 1, 2, 5, 8, 0.5, True, head_constant=True)
att_case("M10", 1, 2, 12, 4, 0.45, True, scale=3.2)
att_case("M10n", 1, 1, 10, 4, -0.5, False, scale=3.2)
att_case("K130", 1, 1, 130, 8, 0.5, True)
att_case("K130n", 1, 2, 130, 3, -0.6, False)
att_case("S200", 1, 2, 200, 4, -0.35, False)
att_case("C256", 1, 1, 256, 3, 0.3, True)
att_case("C300", 1, 1, 300, 3, 0.45, True)
att_case("N300", 1, 2, 300, 3, -0.25, False)
att_case("C600", 1, 1, 600, 4, 0.55, True)
att_case("N600", 1, 1, 600, 3, -0.4, False)
att_case("Z600", 1, 1, 600, 3, 0.0, True)
att_case("C1030", 1, 1, 1030, 3, 0.35, True)
att_case("C2100", 1, 1, 2100, 3, 0.3, True)
att_case("N2100", 1, 1, 2100, 4, -0.3, False)
att_case("L1", 1, 2, 6, 4, 0.5, True, scale=20.0, large=True)
att_case("L2", 1, 2, 40, 4, 0.6, False, scale=20.0, large=True)
att_case("L3", 2, 1, 9, 4, -0.3, True, scale=15.0, large=True, negative=True)
att_case("L3n", 1, 2, 9, 4, 0.4, False, scale=40.0, large=True, negative=True)
att_case("L32g", 1, 2, 8, 4, 0.5, True, scale=12.0, large=True)
att_case("G1", 1, 2, 12, 4, 0.5, True, scale=30.0, large=True)
att_case("G2", 1, 1, 10, 4, -0.6, False, scale=30.0, large=True)
att_case("G3", 1, 2, 10, 3, 0.3, True, scale=45.0, large=True)
# cases first written for the gale corpus (shapes near kernel conditions, long rows, lengths)
att_case("F20n", 1, 4, 20, 3, 0.45, False)              # 16 < T <= 4096, T % 4 == 0, B*H % 4 == 0
att_case("F20", 2, 2, 20, 3, -0.3, True)
att_case("F24n", 2, 4, 24, 2, 0.6, False)
att_case("F18n", 1, 4, 18, 3, 0.45, False)             # T % 4 != 0
att_case("F20nb", 1, 3, 20, 3, 0.45, False)            # B*H % 4 != 0
att_case("F16n", 2, 2, 16, 3, 0.3, False)              # T = 16
att_case("W128", 1, 1, 5, 128, 0.4, True)               # D = 128
att_case("W128n", 1, 2, 4, 130, -0.35, False)
att_case("W127", 1, 1, 5, 127, 0.4, True)
att_case("P17", 1, 2, 17, 3, 0.25, True)                # T = 17 (a multiple of 16 plus one)
att_case("P32n", 1, 1, 32, 3, -0.45, False)
att_case("P16", 1, 1, 16, 2, 0.5, True)
att_case("SP32", 1, 1, 1030, 2, 0.35, True, large=True, arrays=_spike(10.0, 1030, 2, 17.0))   # gap ~120
att_case("SP64", 1, 1, 1030, 2, -0.4, False, large=True, arrays=_spike(20.0, 1030, 2, 57.0))  # gap ~800
att_case("SP32s", 1, 1, 1000, 2, 0.35, True, large=True, arrays=_spike(10.0, 1000, 2, 17.0))  # T <= 1024


def _zero_rows(which, rows):
    """Zero some query rows of one branch (every key then gets the same logit in those rows)."""
    def edit(arrs):
        arrs[which][:, 0, list(rows)] = 0.0
    return edit


def _const_keys(which):
    """Every key of one branch is the same vector (every row of that map has equal logits)."""
    def edit(arrs):
        arrs[which][...] = arrs[which][:, :, :1]
    return edit


def _blank(which):
    """One query or key tensor entirely zero (a zero-initialised projection)."""
    def edit(arrs):
        arrs[which][...] = 0.0
    return edit


# hail cases
att_case("TK1", 3, 1, 5, 3, 0.45, True)                              # one head, several batch elements
att_case("TK1n", 2, 1, 6, 2, -0.35, False)
att_case("ZR", 1, 2, 6, 3, 0.4, True, edit=_zero_rows(0, (2, 4)))    # rows of equal logits (zero query rows)
att_case("ZRn", 2, 1, 5, 4, -0.3, False, edit=_zero_rows(2, (0, 3)))
att_case("KC", 1, 2, 5, 3, 0.55, True, edit=_const_keys(3))          # all keys of k2 equal
att_case("BQ", 2, 1, 5, 3, 0.35, True, edit=_blank(0))               # q1 all zero
att_case("BK", 1, 2, 6, 2, -0.5, False, edit=_blank(3))              # k2 all zero
att_case("BQ1", 1, 1, 1, 3, 0.6, True, edit=_blank(2))               # T = 1, q2 all zero
att_case("QB", 2, 2, 6, 3, 0.3, True, q_const=True)                  # each query constant along the sequence
att_case("QBn", 1, 2, 5, 4, -0.45, False, q_const=True)
att_case("QB1", 1, 1, 1, 2, 0.5, True, q_const=True)
att_case("Abig", 2, 2, 5, 3, 0.37, True, scale=40.0, large=True)    # the shape of A, logits of thousands
att_case("Bbig", 1, 3, 6, 4, -0.55, False, scale=40.0, large=True)  # the shape of B
att_case("PX", 2, 2, 5, 3, 0.123456789, True)                       # coefficients with more than 6 decimals
att_case("PY", 1, 2, 6, 4, -1.0 / 3.0, False)
att_case("PZ", 1, 1, 7, 2, 2.5e-7, True)                             # a tiny coefficient

lam_case("a", _vectors("la", 6, 0.35))
lam_case("b", _vectors("lb1", 3, 0.5), 0.65)
lam_case("d", [[-0.3, 0.2], [0.6, -0.4], [0.9, 0.5], [0.8, 0.7]], 0.35)          # negative lambda
lam_case("e", _vectors("le", 64, 0.15), 0.8)    # D_lambda = 64
lam_case("k", [[1.0], [-0.7], [0.4], [0.9]], 0.2)                                # D_lambda = 1
lam_case("k2", [[0.5], [0.3], [-1.2], [0.6]], -0.4)                              # D_lambda = 1
lam_case("w", _vectors("lw", 40, 0.2), -0.3)
lam_case("p12", _vectors("lp12", 12, 0.3), 0.45)
lam_case("p20", _vectors("lp20", 20, 0.25), 0.1)
lam_case("p9", _vectors("lp9", 9, 0.3))
lam_case("p150", _vectors("lp150", 150, 0.08), 0.3)
lam_case("g", [[2.5, 2.0, 1.5], [2.0, 2.5, 1.0], [1.0, 0.5, 1.0], [1.0, 2.0, 1.0]], 0.5)
lam_case("tie", [[1.0, 2.0], [0.5, 0.25], [2.0, 1.0], [0.25, 0.5]], 0.2)
lam_case("zero", [[0.0, 0.0], [0.3, -0.2], [0.0, 0.0], [0.1, 0.4]], 0.0)
lam_case("b3", LAM_CASES["b"]["arrays"], 0.65, cot=3.0)
lam_case("negc", _vectors("lneg", 5, 0.4), 0.3, cot=-0.8)                         # negative incoming gradient
lam_case("zc", _vectors("lzc", 4, 0.4), 0.2, cot=0.0)                             # zero incoming gradient
lam_case("big35", [[5.0, 3.5], [5.0, 3.0], [1.0, 1.0], [1.0, 1.0]], 0.2)
lam_case("gap64", [[15.0, 10.0], [12.0, 12.0], [-21.0, -21.0], [10.0, 10.0]], 0.2)
lam_case("neg50", [[-5.0, -5.0], [5.0, 5.0], [4.0, -4.0], [6.0, 6.0]], 0.2)       # dots -50 and 0
LAM_CASES["gap64"]["large"] = LAM_CASES["big35"]["large"] = True
lam_case("sq", _vectors("lsq", 4, 0.4), 0.45)
lam_case("sqz", _vectors("lsqz", 3, 0.5), 0.0)                                      # lambda_init = 0
lam_case("nx", _vectors("lnx", 7, 0.3), -1.5)                                       # lambda_init = -1.5
lam_case("c1", _vectors("lc1", 5, 0.3), 0.25, cot=1.0)                              # incoming gradient 1
lam_case("z1", [[0.0, 0.0, 0.0], [0.4, -0.3, 0.5], [0.2, 0.6, -0.1], [0.5, 0.1, 0.3]], 0.3)   # q1 = 0
lam_case("z2", [[0.3, -0.2, 0.4, 0.1], [0.5, 0.2, -0.3, 0.6], [0.1, 0.4, 0.2, -0.5], [0.0, 0.0, 0.0, 0.0]], -0.2)
lam_case("zz", [[0.0, 0.0], [0.0, 0.0], [0.3, 0.2], [0.5, -0.4]], 0.1)                       # q1 = k1 = 0
lam_case("z1d", [[0.0], [0.7], [0.5], [-0.4]], 0.25)                                          # D_lambda = 1


# ice cases: lambda exponents near a tie, both far below zero, large but finite
lam_case("nt", [[0.5, 0.2], [0.4, 0.5], [0.6, 0.1], [0.5, 0.04]], 0.3)            # dots 0.300 and 0.304
lam_case("nt2", [[0.3, -0.2, 0.5], [0.6, 0.1, 0.2], [0.2, 0.4, 0.1], [0.6, 0.2, 0.504]], -0.1)  # dots 0.26, 0.2504
lam_case("vn", [[-10.0, -2.0], [11.0, 5.0], [12.0, 1.0], [-10.0, -10.0]], 0.25)   # dots -120, -130
lam_case("vn64", [[-30.0, -5.0], [25.0, 10.0], [25.0, 5.0], [-26.0, -20.0]], 0.4)  # dots -800, -750
lam_case("big50", [[5.0, 4.0], [6.0, 5.0], [1.0, 0.5], [1.0, 2.0]], 0.2)          # dots 50, 2
lam_case("big100", [[8.0, 6.0], [8.0, 6.0], [6.0, 3.0], [10.0, 10.0]], 0.3)       # dots 100, 90
lam_case("big400", [[20.0, 10.0], [15.0, 10.0], [3.0, -2.0], [2.0, 1.0]], 0.2)    # dots 400, 4
LAM_CASES["big50"]["large"] = LAM_CASES["big100"]["large"] = LAM_CASES["big400"]["large"] = True
# mist cases: lambda_init above 1, exactly 1, and a larger negative value
lam_case("ihi", _vectors("lihi", 5, 0.3), 1.5)
lam_case("ione", _vectors("lione", 4, 0.4), 1.0)
lam_case("ineg", _vectors("lineg", 6, 0.3), -0.8)


def _scaled(which, factor):
    def edit(arrs):
        arrs[which][...] = arrs[which] * factor
    return edit


def _zero_value_head(arrs):
    arrs[4][0, 0] = 0.0


def _future_spike(rng):
    """Causal rows 0..4 have key 5 in their future with a logit of about 2.5e4; visible logits are small."""
    t, d = 6, 2
    out = []
    for _ in range(2):
        q = 0.05 * rng.standard_normal((1, 1, t, d))
        q[..., 0] += 100.0
        k = 0.05 * rng.standard_normal((1, 1, t, d))
        k[..., 5, 0] += 354.0
        out += [q, k]
    return out + [rng.standard_normal((1, 1, t, 2 * d))]


def _near_tied_block_maxima(rise):
    """Every query along e0; key 10 (first block of 64) and key 70 (second block) dominate, 70 by `rise`."""
    def build(rng):
        t, d = 100, 2
        out = []
        for _ in range(2):
            q = np.zeros((1, 1, t, d))
            q[..., 0] = 10.0
            k = 0.05 * rng.standard_normal((1, 1, t, d))
            k[..., 10, :] = [1.7, 0.0]
            k[..., 70, :] = [1.7 + rise * math.sqrt(d) / 10.0, 0.0]
            out += [q, k]
        return out + [rng.standard_normal((1, 1, t, 2 * d))]
    return build


def _second_branch_sharp(scale):
    """The second branch has logits of hundreds (its off-peak log-probabilities far below the first's)."""
    def build(rng):
        b, h, t, d = 1, 2, 8, 4
        q1, k1 = (0.5 * rng.standard_normal((b, h, t, d)) for _ in range(2))
        q2, k2 = (scale * rng.standard_normal((b, h, t, d)) for _ in range(2))
        return [q1, k1, q2, k2, rng.standard_normal((b, h, t, 2 * d))]
    return build


att_case("VB", 1, 2, 6, 3, 0.4, True, edit=_scaled(4, 2e5))                # values of 1e5: outputs past 65504
att_case("VBn", 2, 1, 5, 2, -0.3, False, edit=_scaled(4, 1e4))             # values of 1e4: outputs below it
att_case("CB", 1, 1, 5, 3, 3e5, True)                                      # coefficient 3e5
att_case("MF", 1, 1, 6, 2, 0.45, True, large=True, arrays=_future_spike)   # future logit 2.5e4 above
att_case("MFn", 1, 1, 6, 2, 0.45, False, large=True, arrays=_future_spike)
att_case("LZ", 1, 1, 100, 2, 0.35, True, arrays=_near_tied_block_maxima(5e-4))
att_case("LZ9", 1, 1, 100, 2, -0.4, False, arrays=_near_tied_block_maxima(9e-4))
att_case("LZ2", 1, 1, 100, 2, 0.35, True, arrays=_near_tied_block_maxima(2e-2))   # rise above the band
att_case("VZ", 1, 2, 5, 3, 0.3, True, edit=_zero_value_head)              # value of head 0 all zero
att_case("VZn", 2, 1, 4, 2, -0.5, False, edit=_zero_value_head)
att_case("SH", 1, 2, 8, 4, 0.5, True, large=True, arrays=_second_branch_sharp(12.0))
att_case("SH64", 1, 2, 8, 4, -0.4, False, large=True, arrays=_second_branch_sharp(40.0))
att_case("NG", 1, 1, 7, 4, 0.3, False, scale=12.0, large=True, negative=True)
# thaw cases: many (batch, head) pairs
att_case("BH80", 2, 40, 5, 3, 0.35, True)
att_case("BH64n", 1, 64, 4, 2, -0.3, False)
# mist cases: more heads than tokens (and the boundary H == T), lambda_init above 1
att_case("HT1", 1, 3, 1, 2, 0.4, True)                  # one token, three heads
att_case("HT1n", 2, 2, 1, 3, -0.7, False)
att_case("HT2", 2, 4, 3, 2, -0.3, False)
att_case("HT3", 1, 6, 5, 4, 0.55, True)
att_case("HEQ", 1, 4, 4, 3, 0.45, False)                # H == T
att_case("HEQc", 2, 3, 3, 2, 1.3, True)
att_case("O1n", 1, 2, 5, 1, -0.4, False)                # D = 1 without the mask
att_case("O1t", 2, 2, 1, 1, 0.3, True)                  # D = 1 and T = 1


# a typical small float32 causal example (informational only, not part of the battery)
att_case("TYP1", 1, 2, 6, 4, 0.5, True)
att_case("TYP2", 2, 2, 5, 4, 0.3, True)


K2K1 = (("k2", "k1"),)                       # k2 is the tensor passed as k1
Q2Q1 = (("q2", "q1"),)
K1Q1 = (("k1", "q1"),)                       # one tensor as the queries and keys of the first branch
K2Q2 = (("k2", "q2"),)
PAIRS = (("q2", "q1"), ("k2", "k1"))         # both branches get the same two tensors


def R(case, **kw):
    v = dict(case=case, dtype="f64", layout="contig", frozen=(), coef_kind="tensor", mode=None, grads=True,
             api="backward", pre=(), param=False, init_pos=False, ties=(), repeat=False, qexpand=False,
             pregrad=False, edit=False)
    v.update(kw)
    return v


def _att_runs():
    runs = []
    small = ["A", "B", "C", "E", "EQ", "EQn", "O1", "D8", "D16n", "D32", "D64", "N64", "W40", "W5", "R1", "S1",
             "Z", "BH40", "BH1", "BH1n", "M10", "M10n"]
    runs += [R(c) for c in small]
    runs += [R("A", coef_kind="python"), R("B", coef_kind="python"), R("D8", coef_kind="python"),
             R("E", coef_kind="python"), R("E", coef_kind="int"), R("E", coef_kind="const"),
             R("MX", coef_kind="f32"), R("MX", coef_kind="f32", frozen=("coefficient",)),
             R("A", coef_kind="const"), R("D64", coef_kind="int"), R("B", coef_kind="int"),
             R("A", coef_kind="param", frozen=("coefficient",)), R("A", coef_kind="param", mode="no_grad")]
    runs += [R(c, dtype="f32") for c in ("A", "B", "O1", "D8", "BH40", "M10", "M10n", "C300", "N300")]
    runs += [R("MX", dtype="f32", coef_kind="f32"), R("A", dtype="f32", coef_kind="python")]
    runs += [R("A", layout="perm"), R("B", layout="perm"), R("D8", layout="perm"), R("N300", layout="perm"),
             R("A", layout="tokmajor"), R("D16n", layout="tokmajor"), R("K130n", layout="tokmajor"),
             R("H", layout="expand"), R("Hn", layout="expand"), R("H8", layout="expand"),
             R("A", layout="perm", dtype="f32"), R("H", layout="expand", frozen=("q1", "k1", "q2", "k2", "value"))]
    for case in ("A", "C"):
        for n in range(7):
            for keep in itertools.combinations(ATT_NAMES, n):
                runs.append(R(case, frozen=tuple(x for x in ATT_NAMES if x not in keep)))
    runs += [R("C300", frozen=("q1", "k1")), R("C600", frozen=("value", "coefficient"))]
    runs += [R("A", mode="no_grad"), R("B", mode="inference"), R("C", mode="no_grad"), R("D8", mode="no_grad"),
             R("D64", mode="inference"), R("A", mode="no_grad", dtype="f32"), R("BH40", mode="inference"),
             R("N300", mode="inference"), R("C300", mode="no_grad", coef_kind="python"),
             R("C600", mode="no_grad"), R("E", mode="no_grad", coef_kind="int"),
             R("MX", mode="no_grad", coef_kind="f32"), R("A", mode="inference", coef_kind="python"),
             R("H", layout="expand", mode="no_grad"), R("A", layout="tokmajor", mode="inference")]
    runs += [R("A", api="grad", frozen=("k1",)), R("B", api="grad", frozen=("value", "q2")),
             R("H", layout="expand", api="grad", frozen=("coefficient",)), R("A", api="sum"),
             R("B", api="sum", frozen=("q1", "k1")), R("H", layout="expand", api="sum"),
             R("C300", api="sum", coef_kind="python"), R("D8", api="sum", dtype="f32"),
             R("C", api="grad"), R("BH1", api="grad", coef_kind="python")]
    runs += [R(c) for c in ("K130", "K130n", "S200", "C256", "C300", "N300", "C600", "N600", "Z600")]
    runs += [R("C600", coef_kind="python"), R("N600", dtype="f32"), R("C1030"), R("C1030", dtype="f32", grads=False),
             R("C2100", grads=False), R("C2100", dtype="f32", grads=False), R("N2100", grads=False)]
    runs += [R(c, dtype="f32", grads=False) for c in ("L1", "L2", "L3", "L3n")]
    runs += [R("L3", grads=False), R("L3n"), R("G2"), R("G1", grads=False), R("G3", grads=False)]
    runs += [
        R("A", mode="no_grad", pre=(R("A2s", mode="no_grad"),)),
        R("B", mode="inference", pre=(R("B2s", mode="inference"),)),
        R("A", pre=(R("A", mode="inference"),)),
        R("A", mode="no_grad", pre=(R("A2s"),)),
        R("A", pre=(R("A2s", mode="no_grad"), R("A2s"))),
        R("B", pre=(R("B2s", mode="inference"), R("B2s", mode="no_grad"))),
        R("C300", mode="no_grad", pre=(R("C300", mode="no_grad", coef_kind="python"),)),
    ]
    # from gale: fused-kernel shapes, wide heads, bucket and cache shapes, long rows with a dominant key
    runs += [R("F20n"), R("F20n", dtype="f32", grads=False), R("F20"), R("F24n", mode="no_grad"), R("F18n"),
             R("F20nb"), R("F16n"), R("W128n", grads=False), R("W127"), R("P17"), R("P32n"), R("P16"),
             R("P17", dtype="f32"), R("W127", dtype="f32", grads=False)]
    runs += [R("SP32", grads=False), R("SP32s", grads=False), R("SP32s", dtype="f32", grads=False),
             R("SP64", dtype="f32", grads=False, coef_kind="python")]
    # identical key objects, repeated calls, second backward passes
    runs += [R("B", ties=K2K1), R("B", ties=K2K1, frozen=("value",)), R("O1", ties=K2K1, mode="no_grad"),
             R("S1", ties=K2K1), R("R1", ties=K2K1, dtype="f32"), R("F20n", ties=K2K1, grads=False)]
    runs += [R("A", repeat=True, frozen=("q1", "k1", "q2", "k2", "coefficient")), R("B", repeat=True, mode="no_grad"),
             R("C", repeat=True, mode="inference"), R("B", repeat=True, coef_kind="python", frozen=("q1", "k1")),
             R("R1", repeat=True, frozen=("value",))]
    runs += [R("B", api="twice", frozen=("q1", "k1")), R("C", api="twice", frozen=("q1", "k1", "q2", "k2")),
             R("H", layout="expand", api="twice", frozen=("q1", "k1", "coefficient")),
             R("S1", api="twice", frozen=("value",))]
    # sequences of calls with other lengths and with the same map shape
    runs += [R("A", pre=(R("C"),)), R("B", pre=(R("B", mode="no_grad"),)),
             R("D8", pre=(R("A", mode="no_grad"), R("BH1n", grads=False))),
             R("F20", pre=(R("P17"),)), R("P17", pre=(R("P32n", grads=False),), mode="no_grad"),
             R("A", pre=(R("A2s", frozen=("q1", "k1", "q2", "k2", "coefficient")),)),
             R("B", pre=(R("B2s", dtype="f32"),)), R("A", pre=(R("W5"),))]
    # coefficient kinds and values around [0, 1]
    runs += [R("C", coef_kind="python"), R("C", coef_kind="int"), R("E", coef_kind="param"),
             R("Z", coef_kind="const"), R("B", coef_kind="python", mode="inference"), R("MX", coef_kind="param"),
             R("A", dtype="f32", coef_kind="f64"), R("C", dtype="f32", coef_kind="f64", frozen=("q1",)),
             R("B", coef_kind="half"), R("MX", dtype="f32", coef_kind="half", mode="no_grad"),
             R("E", coef_kind="half", frozen=("q2", "k2"))]
    # hail additions: one tensor for several arguments
    runs += [R("A", ties=K1Q1), R("B", ties=K2Q2, frozen=("value",)), R("C", ties=K1Q1 + K2Q2), R("S1", ties=K1Q1),
             R("A", ties=K1Q1, mode="no_grad"), R("D8", ties=K2Q2, dtype="f32"), R("A", ties=PAIRS),
             R("B", ties=PAIRS, coef_kind="half"), R("E", ties=PAIRS, coef_kind="python"),
             R("C", ties=PAIRS, coef_kind="int"), R("H", layout="expand", ties=K2K1), R("A", ties=K2K1, coef_kind="param"),
             R("B", ties=PAIRS, mode="inference")]
    # one head with token-major memory; rows of equal logits; blank query or key tensors
    runs += [R("TK1", layout="tokmajor"), R("TK1n", layout="tokmajor", frozen=("value",)), R("TK1"),
             R("TK1", layout="tokmajor", mode="no_grad", dtype="f32"), R("TK1n", layout="perm"),
             R("ZR"), R("ZRn"), R("KC"), R("ZR", dtype="f32"), R("KC", mode="no_grad"), R("ZRn", api="grad"),
             R("BQ"), R("BQ", frozen=("q1",)), R("BK"), R("BK", frozen=("k2",)), R("BQ1"), R("BQ", mode="inference"),
             R("BK", dtype="f32", frozen=("value", "coefficient"))]
    # queries expanded along the sequence (stride 0), and the same values stored densely
    runs += [R("QB"), R("QBn"), R("QB", qexpand=True, frozen=("value",)), R("QBn", qexpand=True),
             R("QB1", qexpand=True), R("QBn", qexpand=True, api="sum"), R("QBn", qexpand=True, mode="no_grad", dtype="f32")]
    # the same map shape after calls with logits of another scale
    runs += [R("Abig", grads=False), R("Abig", dtype="f32", grads=False), R("Abig"), R("Bbig", mode="no_grad"),
             R("Abig", pre=(R("Abig", grads=False),)), R("A", pre=(R("A2s", grads=False),), mode="no_grad"),
             R("Bbig", pre=(R("Bbig", mode="no_grad"),)), R("Abig", pre=(R("A", dtype="f32"),), grads=False)]
    # coefficients with many decimals or tiny; gradients already present before backward
    runs += [R("PX", coef_kind="python"), R("PY", coef_kind="python", frozen=("q1",)), R("PZ", coef_kind="python"),
             R("PX", coef_kind="python", dtype="f32"), R("PX"), R("PY", coef_kind="f32"), R("PZ"),
             R("PY", coef_kind="python", mode="no_grad", dtype="f32"), R("PZ", coef_kind="int")]
    runs += [R("A", pregrad=True), R("B", pregrad=True, api="grad"), R("C", pregrad=True, api="twice", frozen=("value",)),
             R("H", layout="expand", pregrad=True, api="grad"), R("A", pregrad=True, api="grad", coef_kind="param")]
    # ice additions: magnitudes, masks and block statistics of this corpus's corners
    runs += [R("VB"), R("VB", dtype="f32", grads=False), R("VBn"), R("VBn", dtype="f32"), R("CB", coef_kind="python"),
             R("CB", grads=False), R("MF", grads=False), R("MF", dtype="f32", mode="inference"), R("MFn"),
             R("MFn", dtype="f32", grads=False), R("LZ"), R("LZ9", dtype="f32", mode="no_grad"), R("LZ2"),
             R("LZ2", dtype="f32"), R("VZ"), R("VZn", dtype="f32", mode="no_grad"), R("SH"),
             R("SH", dtype="f32", grads=False), R("NG"), R("NG", dtype="f32", grads=False),
             R("SH64", grads=False), R("SH64", mode="no_grad", coef_kind="python")]
    # thaw additions: the same query object for both branches, channels-last storage, many heads, negative numbers
    runs += [R("A", ties=Q2Q1), R("B", ties=Q2Q1, dtype="f32"), R("D8", ties=Q2Q1, mode="no_grad"),
             R("C300", ties=Q2Q1, grads=False), R("S1", ties=Q2Q1), R("H", layout="expand", ties=Q2Q1),
             R("R1", ties=Q2Q1, coef_kind="python"), R("C", ties=Q2Q1, api="grad", frozen=("value",))]
    runs += [R("A", layout="chlast"), R("B", layout="chlast", dtype="f32"), R("C", layout="chlast"),
             R("D8", layout="chlast", mode="no_grad"), R("BH80", layout="chlast", grads=False),
             R("TK1", layout="chlast", frozen=("q1", "k1"))]
    runs += [R("BH80"), R("BH64n"), R("BH80", dtype="f32", coef_kind="python"), R("BH64n", mode="no_grad"),
             R("BH64n", coef_kind="python", frozen=("value",)), R("BH80", coef_kind="int", grads=False)]
    runs += [R("A2s", coef_kind="python"), R("D64", coef_kind="python"), R("A2s", coef_kind="python", mode="no_grad"),
             R("PY", coef_kind="python", dtype="f32"), R("C", coef_kind="python", frozen=("q1",))]
    runs += [R("C", frozen=("q1", "k1", "q2", "k2")), R("BH1", dtype="f32", frozen=("q1", "k1", "q2", "k2")),
             R("TK1", coef_kind="param", frozen=("q1", "k1", "q2", "k2", "value")), R("C", mode="inference"),
             R("B", frozen=("q1", "k1", "q2", "k2", "coefficient")), R("H", layout="expand", api="grad"),
             R("BH1n", dtype="f32"), R("N64", mode="inference"), R("P16", mode="no_grad"), R("B", dtype="f32")]
    # mist additions: more heads than tokens, float64 tensor coefficients with float32 inputs, floating tensor
    # coefficients that do not require grad, integer tensor coefficients, one (batch, head) pair
    runs += [R("HT1"), R("HT1n"), R("HT2"), R("HT3"), R("HEQ"), R("HEQc"), R("HT2", dtype="f32"),
             R("HT3", mode="no_grad"), R("HT1", coef_kind="python"), R("HT2", layout="perm"),
             R("HT3", coef_kind="int"), R("HEQ", layout="tokmajor"), R("HEQc", dtype="f32", coef_kind="python")]
    runs += [R("B", dtype="f32", coef_kind="f64"), R("A", dtype="f32", coef_kind="f64", mode="no_grad"),
             R("C", dtype="f32", coef_kind="f64", frozen=("coefficient",)), R("BH1", dtype="f32", coef_kind="f64"),
             R("B", coef_kind="f64"), R("A", coef_kind="f32"), R("C", coef_kind="half", dtype="f32")]
    runs += [R("B", coef_kind="const"), R("A", coef_kind="const", mode="no_grad"), R("C", coef_kind="const", dtype="f32"),
             R("B", coef_kind="half", frozen=("coefficient",)), R("MX", coef_kind="f32", frozen=("coefficient",)),
             R("A", coef_kind="param", frozen=("coefficient",), dtype="f32"), R("A2s", grads=False),
             R("A", coef_kind="const", mode="inference")]
    runs += [R("A", coef_kind="int"), R("A2s", coef_kind="int", dtype="f32"), R("C", coef_kind="int", mode="no_grad"),
             R("CB", coef_kind="int"), R("HT1n", coef_kind="int")]
    runs += [R("S1", dtype="f32"), R("BH1", mode="no_grad"), R("C300", dtype="f32", coef_kind="python"),
             R("TK1n"), R("R1", dtype="f32", coef_kind="python")]
    runs += [R("O1n"), R("O1n", dtype="f32", coef_kind="python"), R("O1n", layout="perm"), R("O1t"),
             R("O1t", mode="no_grad", dtype="f32"), R("O1", coef_kind="param", api="grad")]
    return runs


def _lam_runs():
    runs = []
    for c in LAM_CASES:
        runs.append(R(c))
        if c not in ("gap64", "big100", "big400"):
            runs.append(R(c, dtype="f32"))
    runs += [R("a", layout="perm"), R("e", layout="perm"), R("b", layout="perm", dtype="f32"),
             R("p12", layout="perm"), R("k", layout="perm")]
    for case in ("b", "big35"):
        for n in range(5):
            for keep in itertools.combinations(LAM_NAMES, n):
                runs.append(R(case, frozen=tuple(x for x in LAM_NAMES if x not in keep)))
    runs += [R("a", mode="no_grad"), R("b", mode="inference"), R("gap64", mode="no_grad"),
             R("big35", mode="inference"), R("k", mode="no_grad"), R("a", dtype="f32", mode="no_grad"),
             R("b", dtype="f32", mode="inference")]
    runs += [R("a", api="grad"), R("g", api="grad", frozen=("q2",)), R("b", api="sum"),
             R("big35", api="sum", dtype="f32"), R("k", api="sum")]
    runs += [R("a", init_pos=True), R("w", init_pos=True, mode="no_grad"), R("b", param=True, frozen=LAM_NAMES),
             R("b", param=True, mode="no_grad")]
    runs += [R("a", pre=(R("b", mode="inference"),)), R("b", mode="no_grad", pre=(R("a"), R("b3")))]
    # from gale: tied query objects, repeated calls, second backward passes, more lambda_init values
    runs += [R("zero", ties=Q2Q1), R("sqz", ties=Q2Q1), R("sqz", ties=Q2Q1, dtype="f32", mode="no_grad"),
             R("a"), R("sq"), R("sq", dtype="f32"), R("c1"), R("c1", api="twice"),
             R("b", api="twice", dtype="f32"), R("a", repeat=True, mode="no_grad"),
             R("b", repeat=True, frozen=LAM_NAMES), R("k", repeat=True, mode="inference"),
             R("b", repeat=True, dtype="f32", grads=False), R("a", api="sum", frozen=("q1", "k1")),
             R("b", frozen=LAM_NAMES, dtype="f32"), R("a", grads=False, dtype="f32"),
             R("b", mode="inference", param=True)]
    # hail additions: zero vectors, tied arguments, gradients already present, edited results
    runs += [R("z1"), R("z1", frozen=("k1",)), R("z2"), R("zz"), R("z1d"), R("z1", dtype="f32"), R("z2", api="grad"),
             R("z1", mode="no_grad"), R("zero"), R("z2", frozen=("k2",)),
             R("a", ties=PAIRS), R("b", ties=PAIRS, mode="no_grad"), R("a", ties=K1Q1), R("b", ties=K1Q1 + K2Q2, dtype="f32"),
             R("g", ties=PAIRS, grads=False), R("k", ties=PAIRS, mode="inference"),
             R("a", pregrad=True), R("b", pregrad=True, api="twice"), R("p12", pregrad=True, api="sum"),
             R("b", pregrad=True, api="grad", layout="perm"), R("c1", pregrad=True, api="grad", frozen=LAM_NAMES),
             R("b", repeat=True, edit=True), R("e", repeat=True, edit=True, frozen=("q1",), dtype="f32")]
    # ice additions: near-tied, very negative and large exponents
    runs += [R("nt", api="grad"), R("nt2", frozen=("q1",)), R("vn", mode="no_grad"), R("vn64", api="sum"),
             R("vn64", dtype="f32", mode="no_grad"), R("big50", dtype="f32", frozen=("q2", "k2")),
             R("big400", api="grad", frozen=("q2", "k2")), R("big100", mode="no_grad"), R("big50", api="twice")]
    # thaw additions: the same key object for both pairs, lambda_init = 0 with gradients, strided vectors
    runs += [R("a", ties=K2K1), R("b", ties=K2K1, dtype="f32"), R("g", ties=K2K1, api="grad"),
             R("k", ties=K2K1, mode="no_grad"), R("big35", ties=K2K1, frozen=("q2",)), R("zero", ties=K2K1)]
    runs += [R("sqz", api="grad"), R("zero", frozen=("q2", "k2")), R("sqz", frozen=("q1", "k1")),
             R("sqz", mode="no_grad"), R("zero", dtype="f32", api="sum")]
    runs += [R("e", layout="perm", dtype="f32"), R("p12", layout="perm", mode="no_grad"),
             R("big35", layout="perm", frozen=("q1",)), R("b", layout="perm", api="twice"), R("k", frozen=LAM_NAMES),
             R("b", frozen=LAM_NAMES), R("k", mode="inference"), R("a", mode="no_grad")]
    # mist additions: lambda_init outside [0, 1] and on its ends, zero vectors in other modes and layouts
    runs += [R("ihi", api="grad"), R("ihi", mode="no_grad", dtype="f32"), R("ione"), R("ione", dtype="f32"),
             R("ineg", frozen=("q2", "k2")), R("ineg", layout="perm"), R("nx", mode="inference"),
             R("z1", layout="perm"), R("zz", mode="no_grad"), R("z2", frozen=LAM_NAMES), R("z1d", dtype="f32"),
             R("sqz", api="sum"), R("g", frozen=("q1", "k1")), R("a", frozen=("q1",)), R("b", frozen=("k1",))]
    return runs


lam_case("typ", _vectors("typ", 8, 0.3), 0.2)
for _case in list(ATT_CASES.values()) + list(LAM_CASES.values()):   # no submission can write into a case
    for _x in _case["arrays"] + [np.asarray(_case["cot"])]:
        _x.setflags(write=False)

RUNS_ATT = _att_runs()
RUNS_LAM = _lam_runs()
PRE_GRAD = 0.25
# ====================================================================== calling a file
CODE: dict = {}


def compile_file(path: Path):
    try:
        CODE[path] = compile(path.read_text(), str(path), "exec")
        fresh_module(path)
        return None
    except BaseException as exc:  # noqa: BLE001
        return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


def fresh_module(path: Path):
    mod = types.ModuleType(f"mist_corpus_{path.parent.name}_{path.stem}")
    mod.__file__ = str(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(CODE[path], mod.__dict__)   # noqa: S102
    return mod


def _rounded(arrays, dtype):
    if dtype == "f32":
        return [np.asarray(a, dtype=np.float32).astype(np.float64) for a in arrays]
    return [np.asarray(a, dtype=np.float64) for a in arrays]


def effective_arrays(which, run):
    """The values the function receives (rounded to the run's dtype), tied arguments replaced by their source."""
    c = (ATT_CASES if which == ATT else LAM_CASES)[run["case"]]
    names = ATT_NAMES if which == ATT else LAM_NAMES
    arrays = _rounded(c["arrays"], run["dtype"])
    for dst, src in run["ties"]:
        arrays[names.index(dst)] = arrays[names.index(src)]
    return arrays


def _dense(x, tdt):
    """A tensor with torch's own dense strides (also on size-1 axes, which numpy may give other strides)."""
    x = np.ascontiguousarray(x)
    return torch.empty(x.shape, dtype=tdt).copy_(torch.from_numpy(x))


def _make(x, dtype, layout, rg, seq_expand=False):
    """Return (leaf, view handed to the function, getter of a gradient of the leaf in the oracle's shape)."""
    tdt = TDT[dtype]
    if seq_expand:                                # [B, H, 1, w] leaf expanded along the sequence (stride 0)
        base = _dense(x[:, :, :1], tdt).requires_grad_(rg)
        return base, base.expand(x.shape), (lambda g: g)
    if layout == "contig" or (layout in ("expand", "tokmajor", "chlast") and x.ndim != 4):
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
    if layout == "chlast":                        # channels-last leaf: [B, H, T, w] stored as [B, T, w, H]
        base = _dense(x, tdt).contiguous(memory_format=torch.channels_last).requires_grad_(rg)
        return base, base, (lambda g: g)
    if layout == "expand":                        # [B, 1, T, w] leaf expanded over the heads (stride 0)
        base = _dense(x[:, :1], tdt).requires_grad_(rg)
        return base, base.expand(x.shape), (lambda g: g)
    raise ValueError(layout)


def _snapshot(ts):
    return [(t.detach().clone(), t._version, t.dtype, t.requires_grad, tuple(t.shape), t.stride()) for t in ts]


def _changed(ts, snap):
    return any(t._version != ver or t.dtype != dt or t.requires_grad != rg or tuple(t.shape) != sh
               or t.stride() != st or not torch.equal(t.detach(), old)
               for t, (old, ver, dt, rg, sh, st) in zip(ts, snap))


ORACLE_CACHE: dict = {}


def cotangent(which, run):
    """Gradient sent back into the output: the case's own, or ones for out.sum().backward()."""
    c = (ATT_CASES if which == ATT else LAM_CASES)[run["case"]]
    if run["api"] == "sum":
        return np.ones_like(np.asarray(c["cot"], dtype=np.float64))
    return c["cot"]


def oracle_for(which, run):
    key = (which, run["case"], run["dtype"], run["coef_kind"], run["api"] == "sum", tuple(run["ties"]))
    if key not in ORACLE_CACHE:
        arrays = effective_arrays(which, run)
        names = ATT_NAMES if which == ATT else LAM_NAMES
        if which == ATT:
            c = ATT_CASES[run["case"]]
            coef = COEF_VALUE.get(run["coef_kind"], float)(c["coef"])
            out, grads = np_att(arrays, coef, c["causal"], cotangent(which, run))
        else:
            c = LAM_CASES[run["case"]]
            out, grads = np_lam(arrays, 0.2 if c["init"] is None else c["init"], cotangent(which, run))
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
    if which == ATT and run["qexpand"]:
        for i in (0, 2):
            grads[i] = grads[i].sum(axis=2, keepdims=True)
    if run["api"] == "twice":                         # two backward passes accumulate
        grads = [2.0 * np.asarray(g) for g in grads]
    return out, grads


def build_inputs(which, run):
    """Fresh inputs of one run: (args, kwargs, watched tensors, leaves, getters, trainable flags)."""
    c = (ATT_CASES if which == ATT else LAM_CASES)[run["case"]]
    names = ATT_NAMES if which == ATT else LAM_NAMES
    arrays = _rounded(c["arrays"], run["dtype"])
    trainable = [run["grads"] and names[i] not in run["frozen"] for i in range(len(names))]
    made = [_make(a, run["dtype"], run["layout"], trainable[i],
                  seq_expand=which == ATT and run["qexpand"] and names[i] in ("q1", "q2"))
            for i, a in enumerate(arrays)]
    leaves = [m[0] for m in made]
    args = [m[1] for m in made]
    getters = [m[2] for m in made]
    watched = list(args)
    kwargs = {}
    if which == ATT:
        kind = run["coef_kind"]
        if kind == "python":
            coef = c["coef"]
            leaves.append(None)
        elif kind == "int":
            coef = torch.tensor(int(c["coef"]))
            watched.append(coef)
            leaves.append(None)
        elif kind == "param":
            coef = torch.nn.Parameter(torch.tensor(float(c["coef"]), dtype=TDT[run["dtype"]]),
                                      requires_grad=trainable[5])
            watched.append(coef)
            leaves.append(coef if coef.requires_grad else None)
        else:
            dt = {"f32": torch.float32, "f64": torch.float64, "half": torch.float16}.get(kind, TDT[run["dtype"]])
            coef = torch.tensor(float(c["coef"]), dtype=dt).requires_grad_(kind != "const" and trainable[5])
            watched.append(coef)
            leaves.append(coef if coef.requires_grad else None)
        getters.append(lambda g: g)
        trainable[5] = leaves[5] is not None
        args.append(coef)
        kwargs["causal"] = c["causal"]
    else:
        if run["param"]:
            for i in range(4):
                p = torch.nn.Parameter(leaves[i].detach().clone(), requires_grad=trainable[i])
                leaves[i] = args[i] = watched[i] = p
                getters[i] = (lambda g: g)
        if c["init"] is not None and run["init_pos"]:
            args.append(c["init"])
        elif c["init"] is not None:
            kwargs["lambda_init"] = c["init"]
    for dst, src in run["ties"]:
        d, s = names.index(dst), names.index(src)
        args[d] = watched[d] = args[s]
        trainable[d] = trainable[s]
        leaves[d] = None
    for i in range(len(names) if which == LAM else 5):
        if not trainable[i]:
            leaves[i] = None
    return args, kwargs, watched, leaves, getters, trainable


MODES = {"no_grad": torch.no_grad, "inference": torch.inference_mode}


def call(path, which, run):
    """Call the function on a fresh module as `run` says (after its pre calls) and record what happened."""
    res = dict(exc=None, bexc=None, pre_exc=None, out=None, tensor=False, shape=None, dtype=None, inference=False,
               requires_grad=False, mutated=False, default_dtype_ok=True, grads=None, trainable_any=False,
               side=set())
    mod = fresh_module(path)
    fn = getattr(mod, which)
    for pre in run["pre"]:
        pargs, pkw, _, _, _, _ = build_inputs(which, pre)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with MODES.get(pre["mode"], contextlib.nullcontext)():
                    pout = fn(*pargs, **pkw)
                if pre["grads"] and pre["mode"] is None and isinstance(pout, torch.Tensor) and pout.requires_grad:
                    pout.sum().backward()
        except Exception as exc:  # noqa: BLE001
            res["pre_exc"] = f"{type(exc).__name__}: {str(exc)[:60]}"
    args, kwargs, watched, leaves, getters, trainable = build_inputs(which, run)
    res["trainable_any"] = any(trainable) and run["mode"] is None
    c = (ATT_CASES if which == ATT else LAM_CASES)[run["case"]]
    mode = MODES.get(run["mode"], contextlib.nullcontext)
    snap = _snapshot(watched)
    default_dtype = torch.get_default_dtype()
    if run["repeat"]:      # a first call on the same input objects, back-propagated, then the judged call
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with mode():
                    first = fn(*args, **kwargs)
                if res["trainable_any"] and isinstance(first, torch.Tensor) and first.requires_grad:
                    first.backward(torch.tensor(np.asarray(c["cot"]), dtype=first.dtype))
                if run["edit"] and isinstance(first, torch.Tensor):     # the caller edits the result in place
                    with mode(), torch.no_grad():
                        first.add_(0.5)
        except Exception as exc:  # noqa: BLE001
            res["pre_exc"] = f"{type(exc).__name__}: {str(exc)[:60]}"
        for x in leaves:
            if x is not None:
                x.grad = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with mode():
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
    if res["trainable_any"] and out.requires_grad:
        cot = torch.tensor(np.asarray(c["cot"]), dtype=out.dtype)   # a copy: a backward may write into it
        if run["pregrad"]:
            for x in leaves:
                if x is not None:
                    x.grad = torch.full_like(x.detach(), PRE_GRAD)
        names = ATT_NAMES if which == ATT else LAM_NAMES
        try:
            returned = {}
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if run["api"] == "sum":
                    out.sum().backward()
                elif run["api"] == "grad":
                    want = [(i, x) for i, x in enumerate(leaves) if x is not None]
                    got = torch.autograd.grad(out, [x for _, x in want], cot, allow_unused=True)
                    returned = {i: g for (i, _), g in zip(want, got)}
                elif run["api"] == "twice":
                    out.backward(cot, retain_graph=True)
                    out.backward(cot.clone())
                else:
                    out.backward(cot)
            res["grads"] = {}
            for i, name in enumerate(names):
                x = leaves[i]
                if x is None:
                    continue
                if run["api"] == "grad":
                    g = returned[i]
                    untouched = (x.grad is None if not run["pregrad"] else
                                 x.grad is not None and bool(torch.all(x.grad == PRE_GRAD)))
                    if not untouched:
                        res["side"].add(name)
                else:
                    g = x.grad
                    if g is not None and run["pregrad"]:
                        g = g - PRE_GRAD
                res["grads"][name] = None if g is None else getters[i](g).double().numpy()
        except Exception as exc:  # noqa: BLE001
            res["bexc"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:90]}"
        res["mutated"] = res["mutated"] or _changed(watched, snap)
    return res


def close(got, want, tol):
    if got is None:
        return False
    got = np.asarray(got, dtype=np.float64)
    if got.shape != np.shape(want) or not np.all(np.isfinite(got)):
        return False
    return bool(np.all(np.abs(got - want) <= tol * (1.0 + np.abs(want))))


def judge(path, which, run):
    """-> dict(fwd_ok, contract (failed checks), wrong / none / nonfinite (gradient names), exc, res)."""
    res = call(path, which, run)
    c = (ATT_CASES if which == ATT else LAM_CASES)[run["case"]]
    want, wgrads = oracle_for(which, run)
    want_shape = tuple(c["arrays"][4].shape) if which == ATT else ()
    ftol = TOL["f64"] if run["dtype"] == "f64" else (TOL["f32large"] if c["large"] else TOL["f32"])
    contract = set()
    if res["exc"]:
        contract.add("exc")
    else:
        if not res["tensor"]:
            contract.add("type")
        if res["shape"] != want_shape:
            contract.add("shape")
        if res["dtype"] != TDT[run["dtype"]]:
            contract.add("dtype")
        if res["trainable_any"] and not res["requires_grad"]:
            contract.add("graph")
        if run["mode"] != "inference" and res["inference"]:
            contract.add("graph")
        if not res["default_dtype_ok"]:
            contract.add("dtype")
    if res["mutated"]:
        contract.add("mutation")
    out = dict(res=res, exc=res["exc"] or res["bexc"], contract=contract,
               fwd_ok=res["exc"] is None and close(res["out"], want, ftol),
               wrong=set(res["side"]), none=set(), nonfinite=set())
    if res["grads"] is not None:
        names = ATT_NAMES if which == ATT else LAM_NAMES
        for name, g in res["grads"].items():
            w = wgrads[names.index(name)]
            gtol = TOL_GRAD[run["dtype"]]
            if name == "coefficient":   # a float32 / float16 coefficient's gradient is rounded to its own dtype
                gtol = max(gtol, {"f32": 1e-6, "half": 2e-3}.get(run["coef_kind"], gtol))
            if g is None:
                if np.any(np.asarray(w) != 0):
                    out["none"].add(name)
                    out["wrong"].add(name)
            elif not close(g, w, gtol):
                out["wrong"].add(name)
                if not np.all(np.isfinite(g)):
                    out["nonfinite"].add(name)
    return out


def run_ok(j):
    return j["fwd_ok"] and not j["wrong"] and not j["exc"] and not j["contract"]


def describe(run):
    bits = [run["case"], run["dtype"]]
    if run["layout"] != "contig":
        bits.append(run["layout"])
    if run["frozen"]:
        bits.append("frozen=" + ",".join(run["frozen"]))
    if run["coef_kind"] != "tensor":
        bits.append("coef=" + run["coef_kind"])
    if run["mode"]:
        bits.append(run["mode"])
    if not run["grads"]:
        bits.append("fwd")
    if run["api"] != "backward":
        bits.append({"grad": "autograd.grad", "sum": "sum().backward", "twice": "backward-twice"}[run["api"]])
    if run["param"]:
        bits.append("parameters")
    if run["init_pos"]:
        bits.append("init-positional")
    for dst, src in run["ties"]:
        bits.append(f"{dst}-is-{src}")
    if run["qexpand"]:
        bits.append("q-expanded-over-T")
    if run["pregrad"]:
        bits.append("grad-preset")
    if run["repeat"]:
        bits.append("repeat" + ("-edited" if run["edit"] else ""))
    if run["pre"]:
        bits.append("after[" + ",".join(describe(p) for p in run["pre"]) + "]")
    return "/".join(bits)


def summary(j):
    bits = []
    if j["contract"]:
        bits.append("contract:" + ",".join(sorted(j["contract"])))
    if not j["fwd_ok"]:
        bits.append("fwd")
    if j["wrong"]:
        bits.append("grads:" + ",".join(sorted(j["wrong"])))
    if j["exc"]:
        bits.append(j["exc"][:50])
    return " ".join(bits)


# ====================================================================== where of each wrong file
def _a(run):
    return ATT_CASES[run["case"]]


def _l(run):
    return LAM_CASES[run["case"]]


def _trainable(run, name):
    for dst, src in run["ties"]:
        if name == dst:
            name = src
    return run["grads"] and run["mode"] is None and name not in run["frozen"]


def _coef_trainable(run):
    return _trainable(run, "coefficient") and run["coef_kind"] in ("tensor", "f32", "f64", "half", "param")


def _any_trainable(run, names):
    return any(_trainable(run, n) for n in names if n != "coefficient") or (
        "coefficient" in names and _coef_trainable(run))


def _coef(run):
    """The coefficient's value as the function receives it."""
    return COEF_VALUE.get(run["coef_kind"], float)(_a(run)["coef"])


FLOAT_TENSOR_KINDS = ("tensor", "f32", "f64", "half", "param", "const")


def _coef_requires_grad(run):
    """Whether the coefficient tensor handed to the function requires grad (whatever the grad mode)."""
    kind = run["coef_kind"]
    return kind in ("tensor", "f32", "f64", "half", "param") and run["grads"] and "coefficient" not in run["frozen"]


def _where_not_causal(run):
    return not _a(run)["causal"]


def _where_batch_above_one(run):
    return _a(run)["b"] > 1


def _where_float64_coefficient_float32_inputs(run):
    return run["dtype"] == "f32" and run["coef_kind"] == "f64"


def _where_qk_trainable(run):
    return _any_trainable(run, ("q1", "k1")) or (_any_trainable(run, ("q2", "k2")) and _coef(run) != 0)


def _where_floating_coefficient_without_grad(run):
    return run["coef_kind"] in FLOAT_TENSOR_KINDS and not _coef_requires_grad(run)


def _where_noncontiguous_input(run):
    args = build_inputs(ATT, run)[0]
    return any(not t.is_contiguous() for t in args[:5])


def _where_more_heads_than_tokens(run):
    a = _a(run)
    return a["h"] > a["t"]


def _where_integer_coefficient(run):
    return run["coef_kind"] == "int"


def _where_float64_tensor_coefficient(run):
    """float64 inputs, a float64 tensor coefficient whose value is not exact in float32 or whose gradient is taken."""
    c = _coef(run)
    return (run["dtype"] == "f64" and run["coef_kind"] in ("tensor", "param", "const", "f64")
            and (float(np.float32(c)) != c or _coef_trainable(run)))


def _where_several_pairs_several_tokens(run):
    a = _a(run)
    return a["b"] * a["h"] > 1 and a["t"] > 1


def _init(run):
    init = _l(run)["init"]
    return 0.2 if init is None else init


def _where_init_outside_unit(run):
    return not 0.0 <= _init(run) <= 1.0


def _where_init_nonzero(run):
    return _init(run) != 0.0


def _where_first_pair_trainable(run):
    return _any_trainable(run, ("q1", "k1"))


def _where_zero_vector(run):
    return any(not np.any(x) for x in effective_arrays(LAM, run))


WHERE = {
    # ---------------------------------------------------------------- attention
    "wrong/att_sdpa_full_attention_empty_mask": (
        _where_not_causal,
        [R("B"), R("D16n", dtype="f32"), R("HT1n", mode="no_grad")]),
    "wrong/att_sdpa_batch_packed_repeat_interleave": (
        _where_batch_above_one,
        [R("A"), R("TK1", dtype="f32"), R("HT2", mode="inference")]),
    "wrong/att_coefficient_view_for_broadcast": (
        _where_float64_coefficient_float32_inputs,
        [R("A", dtype="f32", coef_kind="f64"), R("B", dtype="f32", coef_kind="f64"),
         R("A", dtype="f32", coef_kind="f64", mode="no_grad")]),
    "wrong/att_logsumexp_row_max_attached": (
        _where_qk_trainable,
        [R("A"), R("B", dtype="f32"), R("S1", api="grad")]),
    "wrong/att_coefficient_marked_trainable": (
        _where_floating_coefficient_without_grad,
        [R("A", coef_kind="const"), R("B", coef_kind="half", frozen=("coefficient",)),
         R("A", coef_kind="const", mode="no_grad")]),
    "wrong/att_strided_fallback_transpose_axes": (
        _where_noncontiguous_input,
        [R("A", layout="perm"), R("K130n", layout="tokmajor"), R("H", layout="expand", mode="no_grad")]),
    "wrong/att_token_major_layout_detected": (
        _where_more_heads_than_tokens,
        [R("BH40"), R("HT1", dtype="f32"), R("HT2", mode="no_grad")]),
    "wrong/att_integer_coefficient_rejected": (
        _where_integer_coefficient,
        [R("E", coef_kind="int"), R("B", coef_kind="int"), R("C", coef_kind="int", mode="no_grad")]),
    "wrong/att_tensor_coefficient_cast_float": (
        _where_float64_tensor_coefficient,
        [R("A"), R("B", coef_kind="f64"), R("A", coef_kind="const", mode="no_grad")]),
    "wrong/att_baddbmm_into_expanded_bias": (
        _where_several_pairs_several_tokens,
        [R("A"), R("B", dtype="f32"), R("C", mode="no_grad")]),
    # ---------------------------------------------------------------- lambda
    "wrong/lam_init_range_validated": (
        _where_init_outside_unit,
        [R("ihi"), R("nx", dtype="f32"), R("k2", mode="no_grad")]),
    "wrong/lam_paper_init_scale_applied": (
        _where_init_nonzero,
        [R("a"), R("b", dtype="f32"), R("ione", mode="no_grad")]),
    "wrong/lam_function_result_in_saved_exp": (
        _where_first_pair_trainable,
        [R("a"), R("b", dtype="f32"), R("g", api="grad", frozen=("q2", "k2"))]),
    "wrong/lam_zero_vectors_initialised": (
        _where_zero_vector,
        [R("zero"), R("z1", dtype="f32"), R("zz", mode="no_grad")]),
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
        shown = [r for r, j in wit if any(c in j["contract"] for c in checks)]
        if len(shown) != len(wit):
            return False, f"witness without the '{'/'.join(checks)}' contract failure: " + "; ".join(
                f"{describe(r)}: {summary(j)}" for r, j in wit if not any(c in j["contract"] for c in checks))
        seen = sorted(set().union(*(j["contract"] for _, j in wit)))
        return True, f"witnesses break the contract ({','.join(seen)}); {note}"
    if tier == "T2":
        bad = [(r, j) for r, j in wit if j["contract"] or j["fwd_ok"]]
        if bad:
            return False, "witness keeps the contract and values right, or breaks the contract: " + "; ".join(
                f"{describe(r)}: {summary(j)}" for r, j in bad)
        return True, f"witness values differ with the contract kept; {note}"
    # T3
    fwd_bad = [f"{describe(r)}: {summary(j)}" for r, j in results if not j["fwd_ok"] or j["contract"]]
    if fwd_bad:
        return False, f"T3 label but forward or contract fails: {fwd_bad[:3]} ({len(fwd_bad)})"
    shown = [(r, j) for r, j in wit if j["wrong"] or j["exc"]]
    if len(shown) != len(wit):
        return False, "witness shows no gradient failure: " + ", ".join(
            describe(r) for r, j in wit if not (j["wrong"] or j["exc"]))
    wrong = sorted(set().union(*(j["wrong"] for _, j in shown)))
    excs = [j["exc"] for _, j in shown if j["exc"]]
    note = f"forward and contract right everywhere; witness gradients wrong for {wrong}" + (
        f", backward raises ({excs[0][:45]})" if excs else "") + f"; {note}"
    if comp == "graph":
        return not excs, note
    if comp == "backward":   # a hand-written backward: wrong values, a raise, or a gradient written into .grad
        none = sorted(set().union(*(j["none"] for _, j in shown)))
        side = sorted(set().union(*(j["res"]["side"] for _, j in shown)))
        return bool(excs) or not none or bool(side), note + (f"; .grad written during autograd.grad for {side}"
                                                              if side else "")
    if comp == "strided":
        return all(r["layout"] != "contig" for r, _ in shown), note
    return True, note


def battery_spread() -> str:
    """What the two batteries cover (the domain a correct file is confirmed on)."""
    ra, rl = battery(ATT), battery(LAM)
    a = [ATT_CASES[r["case"]] for r in ra]
    count = lambda pred: sum(1 for r, c in zip(ra, a) if pred(r, c))  # noqa: E731
    shapes = {(c["b"], c["h"], c["t"], c["d"]) for c in a}
    return (f"attention: {len(ra)} runs over {len(shapes)} (B, H, T, D) shapes, "
            f"T = 1: {count(lambda r, c: c['t'] == 1)}, D = 1: {count(lambda r, c: c['d'] == 1)}, "
            f"T >= 256: {count(lambda r, c: c['t'] >= 256)}, H > T: {count(lambda r, c: c['h'] > c['t'])}, "
            f"float32: {count(lambda r, c: r['dtype'] == 'f32')}, causal=False: {count(lambda r, c: not c['causal'])}, "
            f"Python coefficient: {count(lambda r, c: r['coef_kind'] == 'python')}, "
            f"trainable tensor coefficient: {count(lambda r, c: _coef_trainable(r))}, "
            f"integer coefficient: {count(lambda r, c: r['coef_kind'] == 'int')}, "
            f"non-contiguous layouts: {count(lambda r, c: r['layout'] != 'contig' or r['qexpand'])}, "
            f"all six inputs trainable: {count(lambda r, c: all(_trainable(r, n) for n in ATT_NAMES))}, "
            f"no_grad / inference_mode: {count(lambda r, c: r['mode'] is not None)}\n"
            f"lambda: {len(rl)} runs, D_lambda from {min(LAM_CASES[r['case']]['n'] for r in rl)} to "
            f"{max(LAM_CASES[r['case']]['n'] for r in rl)}, float32: {sum(r['dtype'] == 'f32' for r in rl)}, "
            f"strided: {sum(r['layout'] != 'contig' for r in rl)}, "
            f"lambda_init values: {sorted({0.2 if LAM_CASES[r['case']]['init'] is None else LAM_CASES[r['case']]['init'] for r in rl})}")


TYPICAL = ([R("TYP1", dtype="f32", coef_kind="python"), R("TYP1", dtype="f32")],
           [R("typ", dtype="f32")])


def typical_ok(key: str) -> bool:
    """Whether a file is right (values, contract, gradients) on a typical small float32 causal example:
    B = 1, H = 2, T = 6, D = 4, coefficient 0.5 as a Python float and as a trainable tensor, every input
    trainable; lambda with D_lambda = 8, lambda_init = 0.2, every vector trainable."""
    path = HERE / (key + ".py")
    return (all(run_ok(judge(path, ATT, r)) for r in TYPICAL[0])
            and all(run_ok(judge(path, LAM, r)) for r in TYPICAL[1]))


def main() -> int:
    start = time.time()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    self_test_oracle()
    labels = json.loads((HERE / "labels.json").read_text())
    only = set(sys.argv[1:])
    files = {f"{p.parent.name}/{p.stem}" for d in ("correct", "wrong") for p in (HERE / d).glob("*.py")}
    problems = [f"{k}: file without a label" for k in sorted(files - labels.keys())]
    problems += [f"{k}: label without a file" for k in sorted(labels.keys() - files)]
    problems += [f"{k}: wrong label without a WHERE entry" for k in sorted(labels)
                 if not labels[k].get("correct") and k not in WHERE]
    for p in sorted(q for d in ("correct", "wrong") for q in (HERE / d).glob("*.py")):
        for line in p.read_text().splitlines():
            s = line.strip()
            if s.startswith(("import ", "from ")) and s not in (
                    "import math", "import torch", "from __future__ import annotations",
                    "import torch.nn.functional as F"):
                problems.append(f"{p.parent.name}/{p.stem}: imports something else: {s}")
    stub = (HERE.parents[2] / "exercise" / "diff_attention.py").read_text().splitlines(keepends=True)
    banner = next(i for i, line in enumerate(stub) if "Your work starts here" in line)
    header = "".join(stub[: banner + 2])
    for p in sorted(q for d in ("correct", "wrong") for q in (HERE / d).glob("*.py")):
        text = p.read_text()
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
    print(f"{n_ok}/{len(rows)} labels verified")
    return 0 if n_ok == len(rows) and not problems else 1


if __name__ == "__main__":
    sys.exit(main())
