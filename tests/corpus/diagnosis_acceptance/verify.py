"""Confirm every label of this corpus against an independent float64 numpy oracle.

Usage:  python verify.py                 # every file
        python verify.py <stem> ...      # some files

Adapted from tests/corpus/diagnosis_practice/verify.py (read for its approach
only). The oracle is plain numpy in float64: a row-max-shifted softmax and an
explicit -inf causal mask; reference gradients are the oracle's closed-form
backward, checked against central finite differences at start-up. Torch only
calls the corpus files and reads the gradients their autograd produces.

Every file runs in a fresh subprocess (``python verify.py --worker <key>``).
Before every single call the global grad mode is reset to enabled, so a file
that leaks a disabled grad mode is judged call by call.

The battery adds to the practice corpus's one:

* more sequence lengths (T = 96, 160, 320 next to 1..300 around the block
  sizes 16..256), a head width D = 40, batch/heads (3, 2) and (2, 4);
* a fifth input layout "bthd": dense token-major storage [B, T, H, X] seen as
  [B, H, T, X] through permute (no slicing), the layout of a real projection;
* coefficient tensors of another dtype than the inputs (int64 / float32 with
  float64 inputs in T2, float64 with float32 inputs in the T1 dtype check);
* the T1 shape check also calls causal cases with B != H, the T1 graph check
  also a causal=False call, the T1 mutation check also compares the inputs'
  requires_grad flags;
* lambda: dot products far apart (85 / -95 in float32, 700 / -750 in float64),
  exact ties (identical pairs, all-zero vectors), q2 frozen alone;
* gradients: the output consumed through transpose(1, 2) (a non-contiguous
  incoming gradient), and a second call before the first backward.

For every labelled file:

* correct/*: both functions pass every check of every tier and the extras.
* wrong/*: the function the label does not blame passes everything; the
  blamed function passes every tier before the labelled one and fails the
  labelled one in the labelled way (T1: the named contract check; T2: some
  forward value, with `stability` confined to large-magnitude cases and
  `dtype` a precision loss only; T3: forward right, some gradient wrong or
  backward raising, with `stability` confined to the large/tie cases and
  `backward` giving every input a gradient or raising). In addition EXPECT
  below lists, per wrong file, checks inside its labelled `where` that must
  fail and checks outside it that must pass: this confirms the `where`.

Prints one row per file and exits 1 if any label is not confirmed.
"""

from __future__ import annotations

import concurrent.futures
import importlib.util
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
LAM, ATT = "differential_lambda", "differential_attention"
COMPONENTS = {
    "load", "type", "shape", "dtype", "mutation", "graph", "mask", "scale", "softmax",
    "branch", "sign", "coefficient", "value", "lambda", "backward", "randomness",
    "stability", "strided",
}
T1_COMPONENTS = {"load", "type", "shape", "dtype", "mutation", "graph", "strided"}
ALLOWED_IMPORTS = ("import math", "import torch", "import functools", "import itertools",
                   "import typing", "from __future__", "from torch", "from math",
                   "from functools", "from itertools", "from typing")

TOL64, TOL32, TOL_LARGE, TOL_GRAD, TOL_PRECISION = 1e-9, 1e-4, 2e-3, 1e-6, 5e-2


# ====================================================================== oracle (numpy only)
def np_softmax(s):
    shifted = s - s.max(axis=-1, keepdims=True)
    e = np.exp(shifted)
    return e / e.sum(axis=-1, keepdims=True)


def _bias(t, causal):
    bias = np.zeros((t, t))
    if causal:
        bias[np.triu_indices(t, 1)] = -np.inf
    return bias


def oracle_maps(q1, k1, q2, k2, causal):
    t, d = q1.shape[-2], q1.shape[-1]
    bias = _bias(t, causal)

    def amap(q, k):
        return np_softmax(np.einsum("...id,...jd->...ij", q, k) / np.sqrt(d) + bias)

    return amap(q1, k1), amap(q2, k2)


def oracle_attention(q1, k1, q2, k2, v, coef, causal):
    a1, a2 = oracle_maps(q1, k1, q2, k2, causal)
    return np.einsum("...ij,...je->...ie", a1 - float(coef) * a2, v)


def oracle_attention_grads(q1, k1, q2, k2, v, coef, causal, cot):
    d = q1.shape[-1]
    coef = float(coef)
    a1, a2 = oracle_maps(q1, k1, q2, k2, causal)
    p = a1 - coef * a2
    dv = np.einsum("...ij,...ie->...je", p, cot)
    dp = np.einsum("...ie,...je->...ij", cot, v)
    dcoef = -np.sum(dp * a2)
    grads = []
    for a, da, q, k in ((a1, dp, q1, k1), (a2, -coef * dp, q2, k2)):
        ds = a * (da - np.sum(da * a, axis=-1, keepdims=True))
        grads.append(np.einsum("...ij,...jd->...id", ds, k) / np.sqrt(d))
        grads.append(np.einsum("...ij,...id->...jd", ds, q) / np.sqrt(d))
    return grads + [dv, np.asarray(dcoef)]


def oracle_lambda(q1, k1, q2, k2, init):
    return np.asarray(np.exp(np.sum(q1 * k1)) - np.exp(np.sum(q2 * k2)) + init)


def oracle_lambda_grads(q1, k1, q2, k2, cot):
    e1, e2 = np.exp(np.sum(q1 * k1)), np.exp(np.sum(q2 * k2))
    return [cot * e1 * k1, cot * e1 * q1, -cot * e2 * k2, -cot * e2 * q2]


def central_differences(f, args, cot, h=1e-6):
    out = []
    for i, a in enumerate(args):
        g = np.zeros(a.shape)
        flat = g.reshape(-1)
        for j in range(a.size):
            up = [x.copy() for x in args]
            dn = [x.copy() for x in args]
            up[i].reshape(-1)[j] += h
            dn[i].reshape(-1)[j] -= h
            flat[j] = (np.sum(f(*up) * cot) - np.sum(f(*dn) * cot)) / (2 * h)
        out.append(g)
    return out


def close(got, want, tol) -> bool:
    if got is None:
        return False
    got = np.asarray(got, dtype=np.float64)
    if got.shape != np.shape(want) or not np.all(np.isfinite(got)):
        return False
    return bool(np.all(np.abs(got - want) <= tol * (1.0 + np.abs(want))))


def self_consistent(a, b) -> bool:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=TOL64, atol=TOL64, equal_nan=True))


# ====================================================================== cases
RNG = np.random.default_rng(7_2026_0611)
ATT_NAMES = ("q1", "k1", "q2", "k2", "value", "coefficient")
LAM_NAMES = ("q1", "k1", "q2", "k2")


def att_case(b, h, t, d, coef, causal, scale=1.0, grads=True):
    qk = [RNG.standard_normal((b, h, t, d)) * scale for _ in range(4)]
    v = RNG.standard_normal((b, h, t, 2 * d))
    cot = RNG.standard_normal((b, h, t, 2 * d))
    return {"args": qk + [v], "coef": coef, "causal": causal, "cot": cot, "grads_wanted": grads}


def negative_case(b, h, t, d, coef, causal, size=15.0):
    """Large logits that are all far below zero: queries along +u, keys along -u."""
    c = att_case(b, h, t, d, coef, causal, grads=False)
    u = np.ones(d) / np.sqrt(d)
    for i in (0, 2):
        c["args"][i] = size * u + 0.5 * RNG.standard_normal((b, h, t, d))
    for i in (1, 3):
        c["args"][i] = -size * u + 0.5 * RNG.standard_normal((b, h, t, d))
    return c


ATT_CASES = {
    "A": att_case(2, 2, 5, 3, 0.37, True),
    "B": att_case(1, 3, 6, 4, -0.55, False),
    "C": att_case(2, 1, 7, 2, 1.4, True),
    "D": att_case(1, 2, 4, 5, 0.8, False),
    "E": att_case(1, 2, 5, 3, 1, True),                       # an int coefficient
    "P": att_case(1, 1, 6, 3, 0.3, True),                     # B = H = 1
    "S": att_case(1, 1, 1, 3, 0.6, True),                     # T = 1, causal
    "R": att_case(2, 1, 1, 2, -0.2, False),                   # T = 1, no mask
    "Q": att_case(1, 2, 6, 3, 0.5, True),                     # zero rows (logits exactly 0)
    "Z": att_case(1, 2, 6, 3, 0.0, True),                     # coefficient exactly 0
    "O": att_case(1, 2, 6, 3, 1.0, False),                    # coefficient exactly 1 (float)
    "I": att_case(1, 2, 9, 3, 0.6, True),                     # first called under inference_mode
    "D1": att_case(2, 2, 12, 1, 0.45, True),                  # D = 1
    "D1n": att_case(1, 2, 10, 1, -0.3, False),
    "T15": att_case(1, 1, 15, 4, 0.4, True),
    "T16": att_case(1, 2, 16, 3, -0.2, False),
    "T17": att_case(2, 1, 17, 2, 0.6, True),
    "T31": att_case(1, 1, 31, 3, 0.5, False),
    "T32": att_case(1, 2, 32, 2, 0.35, True),
    "T33": att_case(2, 1, 33, 2, -0.4, True),
    "T37": att_case(1, 2, 37, 3, 0.5, False),
    "T63": att_case(1, 1, 63, 3, 0.7, False),
    "T64": att_case(1, 1, 64, 2, 0.5, True),
    "T65": att_case(1, 2, 65, 3, 0.3, True),
    "T100": att_case(1, 1, 100, 8, 0.5, False),
    "T127": att_case(1, 1, 127, 2, 0.25, True),
    "T128": att_case(1, 1, 128, 3, -0.5, False),
    "T129": att_case(1, 2, 129, 2, 0.6, True),
    "T200": att_case(1, 1, 200, 16, 0.4, False),
    "T255": att_case(1, 1, 255, 2, 0.3, True),
    "T256": att_case(1, 1, 256, 2, 0.55, False),
    "T257": att_case(1, 1, 257, 3, -0.35, True),
    "X": att_case(1, 1, 300, 2, 0.7, True),
    "Y": att_case(1, 2, 300, 3, -0.25, False),
    "D64": att_case(2, 2, 20, 64, 0.5, True),
    "T96": att_case(1, 1, 96, 2, 0.45, True),
    "T160": att_case(1, 1, 160, 2, -0.3, True),
    "T320": att_case(1, 1, 320, 2, 0.6, False),
    "D40": att_case(1, 2, 24, 40, 0.6, True),
    "BH": att_case(3, 2, 9, 2, 0.7, True),
    "HB": att_case(2, 4, 8, 3, -0.4, False),
    "D64n": att_case(1, 1, 70, 64, 0.3, False),
}
for _i in (0, 2):
    ATT_CASES["Q"]["args"][0][..., _i, :] = 0.0
for _j in (0, 3):
    ATT_CASES["Q"]["args"][3][..., _j, :] = 0.0
ATT_LARGE = {  # float32, logits of several hundred (forward)
    "L1": att_case(1, 2, 6, 4, 0.5, True, scale=20.0, grads=False),
    "L2": att_case(1, 2, 6, 4, 0.5, False, scale=20.0, grads=False),
    "L3": att_case(2, 1, 20, 4, 0.7, True, scale=25.0, grads=False),
    "L4": att_case(1, 2, 40, 4, 0.6, False, scale=20.0, grads=False),
    "L5": negative_case(1, 2, 7, 4, 0.4, False),
    "L6": negative_case(2, 1, 9, 4, -0.3, True),
    "L7": att_case(1, 1, 300, 4, 0.5, True, scale=20.0, grads=False),
    "L8": att_case(1, 1, 150, 4, -0.4, False, scale=20.0, grads=False),
    "L9": att_case(1, 2, 40, 1, 0.3, True, scale=25.0, grads=False),
}
ATT_LARGE64 = {  # float64, logits of a few thousand (forward)
    "H1": att_case(1, 2, 12, 4, 0.5, True, scale=30.0, grads=False),
    "H2": att_case(1, 1, 40, 4, -0.6, False, scale=30.0, grads=False),
}
ATT_LARGE_GRAD = {  # float64 gradients with logits of a few thousand
    "G1": att_case(1, 2, 12, 4, 0.5, True, scale=30.0),
    "G2": att_case(1, 1, 10, 4, -0.6, False, scale=30.0),
}
ALL_ATT = {**ATT_CASES, **ATT_LARGE, **ATT_LARGE64, **ATT_LARGE_GRAD}
for _c in ALL_ATT.values():
    _c["want"] = oracle_attention(*_c["args"], _c["coef"], _c["causal"])
LARGE_KEYS = set(ATT_LARGE) | set(ATT_LARGE64)


def lam_case(vectors, init):
    return {"args": [np.asarray(x, dtype=np.float64) for x in vectors], "init": init, "cot": 0.7}


LAM_CASES = {
    "a": lam_case([RNG.standard_normal(6) * 0.35 for _ in range(4)], None),
    "b": lam_case([RNG.standard_normal(3) * 0.5 for _ in range(4)], 0.65),
    "c": lam_case([[0.5, 0.7, 0.6], [0.8, 0.6, 0.7], [-0.2, 0.1, 0.3], [0.4, -0.5, 0.2]], 0.1),
    "d": lam_case([[-0.3, 0.2], [0.6, -0.4], [0.9, 0.5], [0.8, 0.7]], 0.35),
    "e": lam_case([RNG.standard_normal(64) * 0.15 for _ in range(4)], 0.8),
    "f": lam_case([RNG.standard_normal(5) * 0.4 for _ in range(4)], 0.0),
    "g": lam_case([[2.5, 2.0, 1.5], [2.0, 2.5, 1.0], [1.0, 0.5, 1.0], [1.0, 2.0, 1.0]], 0.5),
    "h": lam_case([[-5.0, -5.0], [5.0, 5.0], [4.5, 4.5], [5.0, 5.0]], 0.3),
    "j": lam_case([[10.0, 9.5, 0.5], [10.0, -10.0, 1.0], [10.0, -9.0, 1.0], [9.0, 10.0, 1.0]], 0.25),
    "k": lam_case([[1.0], [-0.7], [0.4], [0.9]], 0.2),
    "m": lam_case([RNG.standard_normal(7) * 0.3 for _ in range(4)], -1.5),
}
LAM_CASES["LL1"] = lam_case([[8.5], [10.0], [-9.5], [10.0]], 0.3)        # float32: 85 vs -95
LAM_CASES["LL2"] = lam_case([[70.0], [10.0], [-75.0], [10.0]], 0.1)       # float64: 700 vs -750
_tq, _tk = RNG.standard_normal(4) * 0.5, RNG.standard_normal(4) * 0.5
LAM_CASES["tie"] = lam_case([_tq, _tk, _tq.copy(), _tk.copy()], 0.3)       # q1 . k1 == q2 . k2
LAM_CASES["zero"] = lam_case([np.zeros(3)] * 4, 0.2)
LAM_CASES["h"]["forward_only"] = True
LAM_CASES["LL1"]["dtypes"] = ("f32",)
LAM_CASES["LL2"]["dtypes"] = ("f64",)
LAM_LARGE = {"LL1", "LL2"}
LAM_EDGE = {"LL1", "LL2", "tie", "zero"}
for _c in LAM_CASES.values():
    _c["want"] = oracle_lambda(*_c["args"], 0.2 if _c["init"] is None else _c["init"])

_D = ATT_CASES["D"]
RECALL = {"att": [RNG.standard_normal(np.shape(x)) * 0.4 for x in _D["args"]],
          "lam": [RNG.standard_normal(np.shape(x)) * 0.4 for x in LAM_CASES["d"]["args"]]}
RECALL["att_want"] = oracle_attention(*RECALL["att"], _D["coef"], _D["causal"])
RECALL["lam_want"] = oracle_lambda(*RECALL["lam"], LAM_CASES["d"]["init"])
INTERLEAVE = {"att": [RNG.standard_normal(np.shape(x)) for x in ATT_CASES["A"]["args"]],
              "lam": [RNG.standard_normal(np.shape(x)) * 0.4 for x in LAM_CASES["b"]["args"]]}
# index 5 is the coefficient; (0, 1, 2, 3, 4) leaves only the coefficient trainable
FROZEN = {"att": [("C", (0, 4)), ("B", (5,)), ("T17", (0, 1, 2, 3, 4)), ("A", (2, 3)), ("P", (1,)), ("S", (1, 2, 3, 4, 5))],
          "lam": [("b", (0,)), ("c", (2, 3)), ("m", (1, 2, 3)), ("c", (2,))]}
GRAD_ATT = [k for k in ATT_CASES] + list(ATT_LARGE_GRAD)
TRANSPOSED_CONSUMER = ["A", "B", "T65", "HB"]
GRAD_ATT_STRIDED = ["A", "B", "C", "D1", "T33", "T65", "Z", "G1"]


def precompute_gradients(check=False) -> None:
    for c in {**ATT_CASES, **ATT_LARGE_GRAD}.values():
        c["grads"] = oracle_attention_grads(*c["args"], c["coef"], c["causal"], c["cot"])
    for c in LAM_CASES.values():
        c["grads"] = oracle_lambda_grads(*c["args"], c["cot"])
    if not check:
        return
    for key in ("A", "B", "Q", "D1"):
        c = ATT_CASES[key]
        f = lambda q1, k1, q2, k2, v, coef, c=c: oracle_attention(q1, k1, q2, k2, v, coef, c["causal"])
        fd = central_differences(f, c["args"] + [np.asarray(float(c["coef"]))], c["cot"])
        for g, w in zip(c["grads"], fd):
            assert np.allclose(g, w, rtol=1e-6, atol=1e-7), key
    for key in ("b", "d", "m"):
        c = LAM_CASES[key]
        f = lambda q1, k1, q2, k2, c=c: oracle_lambda(q1, k1, q2, k2, c["init"])
        fd = central_differences(f, c["args"], c["cot"])
        for g, w in zip(c["grads"], fd):
            assert np.allclose(g, w, rtol=1e-6, atol=1e-7), key


# ====================================================================== calling a file (worker side)
torch = None  # imported in the worker only


def load(path: Path):
    try:
        spec = importlib.util.spec_from_file_location(f"acccorp_{path.parent.name}_{path.stem}", path)
        mod = importlib.util.module_from_spec(spec)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            spec.loader.exec_module(mod)
        return mod, None
    except BaseException as exc:  # noqa: BLE001
        return None, f"{type(exc).__name__}: {' '.join(str(exc).split())}"


def _leaf(x, dtype, rg):
    t = torch.tensor(x, dtype=dtype).requires_grad_(rg)
    return t, (lambda: None if t.grad is None else t.grad.double().numpy())


def make_inputs(arrays, dtype, layout, rg, frozen):
    """Return (tensors, gradient getters) in the requested memory layout."""
    n = len(arrays)
    if layout == "plain":
        out = [_leaf(x, dtype, rg and i not in frozen) for i, x in enumerate(arrays)]
        return [t for t, _ in out], [g for _, g in out]
    if arrays[0].ndim == 1:
        if layout == "every3":
            ts, gs = [], []
            for i, x in enumerate(arrays):
                full = np.zeros(3 * x.size)
                full[::3] = x
                base = torch.tensor(full, dtype=dtype).requires_grad_(rg and i not in frozen)
                ts.append(base[::3])
                gs.append(lambda base=base: None if base.grad is None else base.grad[::3].double().numpy())
            return ts, gs
        # fused: one vector holding all four, each an offset slice
        d = arrays[0].size
        full = np.concatenate([[0.0]] + [x for x in arrays])
        base = torch.tensor(full, dtype=dtype).requires_grad_(rg)
        ts = [base[1 + i * d:1 + (i + 1) * d] for i in range(n)]
        gs = [(lambda i=i: None if base.grad is None else base.grad[1 + i * d:1 + (i + 1) * d].double().numpy())
              for i in range(n)]
        return ts, gs
    if layout in ("fused", "fusedh"):
        # one projection sliced along its feature axis: storage [B, T, H, 1 + 6D] seen as
        # [B, H, T, 1 + 6D] ("fused"), or heads-first storage [B, H, T, 1 + 6D] ("fusedh")
        b, h, t, d = arrays[0].shape
        widths = [x.shape[-1] for x in arrays]
        perm = (0, 2, 1, 3) if layout == "fused" else (0, 1, 2, 3)
        full = np.zeros((b, t, h, 1 + sum(widths)) if layout == "fused" else (b, h, t, 1 + sum(widths)))
        offs, o = [], 1
        for x, w in zip(arrays, widths):
            full[..., o:o + w] = x.transpose(*perm)
            offs.append((o, o + w))
            o += w
        base = torch.tensor(full, dtype=dtype).requires_grad_(rg)
        view = base.permute(*perm)
        ts = [view[..., a:z] for a, z in offs]
        gs = [(lambda a=a, z=z: None if base.grad is None else base.grad.permute(*perm)[..., a:z].double().numpy())
              for a, z in offs]
        return ts, gs
    ts, gs = [], []
    for i, x in enumerate(arrays):
        r = rg and i not in frozen
        if layout == "bthd":  # dense storage [B, T, H, last] permuted to [B, H, T, last]
            base = torch.tensor(np.ascontiguousarray(x.transpose(0, 2, 1, 3)), dtype=dtype).requires_grad_(r)
            ts.append(base.permute(0, 2, 1, 3))
            gs.append(lambda base=base: None if base.grad is None else base.grad.permute(0, 2, 1, 3).double().numpy())
            continue
        if layout == "perm":  # storage [B, T, H, 2*last], permuted, every second column
            b, h, t, d = x.shape
            full = np.zeros((b, t, h, 2 * d))
            full[..., 1::2] = x.transpose(0, 2, 1, 3)
            base = torch.tensor(full, dtype=dtype).requires_grad_(r)
            ts.append(base.permute(0, 2, 1, 3)[..., 1::2])
            gs.append(lambda base=base: None if base.grad is None
                      else base.grad.permute(0, 2, 1, 3)[..., 1::2].double().numpy())
        else:  # "trans": storage [B, H, last, T]
            base = torch.tensor(np.ascontiguousarray(np.swapaxes(x, -1, -2)), dtype=dtype).requires_grad_(r)
            ts.append(base.transpose(-1, -2))
            gs.append(lambda base=base: None if base.grad is None else base.grad.transpose(-1, -2).double().numpy())
    return ts, gs


def churn(shape, dtype):
    junk = [torch.full(shape, float("nan"), dtype=dtype) for _ in range(8)]
    junk += [torch.full((s,), float("inf"), dtype=dtype) for s in (64, 256, 1024)]
    del junk


def run(fn, arrays, *, causal=None, init=None, dtype, rg, layout="plain", coef=None, coef_kind="python",
        cot=None, no_grad=False, inference=False, binding="kw", mutate_then_recall=None, frozen=(),
        interleave=None, flip_causal=False, recycled=False, consume="plain"):
    """Call fn once (or twice) and record what happened. Inputs whose index is in `frozen` do not require grad."""
    res = {"exc": None, "out": None, "tensor": False, "shape": None, "dtype": None,
           "requires_grad": False, "mutated": False, "grads": None, "bexc": None}
    torch.set_grad_enabled(True)
    if layout in ("fused", "fusedh") and frozen:
        layout = "perm"
    try:
        inputs, getters = make_inputs(arrays, dtype, layout, rg, frozen)
    except Exception as exc:  # noqa: BLE001
        res["exc"] = "input construction: " + str(exc)[:60]
        return res
    getters = [(lambda: "frozen") if i in frozen else g for i, g in enumerate(getters)]
    args = list(inputs)
    is_att = coef is not None
    if is_att:
        if coef_kind == "tensor":
            trainable = rg and len(arrays) not in frozen
            c = torch.tensor(float(coef), dtype=dtype).requires_grad_(trainable)
            args.append(c)
            inputs.append(c)
            getters.append((lambda c=c: None if c.grad is None else c.grad.double().numpy()) if trainable
                           else (lambda: "frozen"))
        elif coef_kind == "int64":
            args.append(torch.tensor(int(coef)))
        elif coef_kind == "float32":
            args.append(torch.tensor(float(coef), dtype=torch.float32))
        elif coef_kind == "float64":
            args.append(torch.tensor(float(coef), dtype=torch.float64))
        else:
            args.append(coef)
        if flip_causal:
            causal = not causal
        names = ("q1", "k1", "q2", "k2", "value", "coefficient", "causal")
        if binding == "pos":
            call_args, call_kwargs = args + [causal], {}
        elif binding == "default":
            call_args, call_kwargs = args, {}
        elif binding == "allkw":
            call_args, call_kwargs = [], dict(zip(names, args + [causal]))
        else:
            call_args, call_kwargs = args, {"causal": causal}
    else:
        names = ("q1", "k1", "q2", "k2", "lambda_init")
        if init is None:
            call_args, call_kwargs = args, {}
        elif binding == "pos":
            call_args, call_kwargs = args + [init], {}
        elif binding == "allkw":
            call_args, call_kwargs = [], dict(zip(names, args + [init]))
        else:
            call_args, call_kwargs = args, {"lambda_init": init}
    before = [(t.detach().clone(), t._version, tuple(t.shape), t.requires_grad) for t in inputs]
    torch.manual_seed(0)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if recycled and is_att:
                churn(np.shape(arrays[4]), dtype)
            if no_grad or inference:
                with torch.inference_mode() if inference else torch.no_grad():
                    out = fn(*call_args, **call_kwargs)
            else:
                out = fn(*call_args, **call_kwargs)
            if mutate_then_recall is not None:
                with torch.no_grad():
                    for t, new in zip(inputs, mutate_then_recall):
                        t.copy_(torch.as_tensor(new, dtype=t.dtype))
                before = [(t.detach().clone(), t._version, tuple(t.shape), t.requires_grad) for t in inputs]
                out = fn(*call_args, **call_kwargs)
            if interleave is not None:
                other = [torch.tensor(x, dtype=dtype).requires_grad_(rg) for x in interleave]
                if is_att:
                    other.append(torch.tensor(0.9 * float(coef) - 0.3, dtype=dtype).requires_grad_(rg)
                                 if coef_kind == "tensor" else coef)
                    fn(*other, causal=causal)
                else:
                    fn(*other, lambda_init=0.45)
    except Exception as exc:  # noqa: BLE001
        res["exc"] = f"{type(exc).__name__}: {str(exc)[:70]}"
        return res
    res["mutated"] = any(
        tuple(t.shape) != s or t._version != ver or not torch.equal(t.detach(), old) or t.requires_grad != flag
        for t, (old, ver, s, flag) in zip(inputs, before)
    )
    if isinstance(out, torch.Tensor):
        res.update(tensor=True, shape=tuple(out.shape), dtype=out.dtype,
                   requires_grad=bool(out.requires_grad))
        try:
            res["out"] = out.detach().double().numpy().copy()
        except Exception:  # noqa: BLE001
            res["out"] = None
        if rg and cot is not None and out.requires_grad and tuple(out.shape) == np.shape(cot):
            try:
                c = torch.tensor(np.asarray(cot), dtype=out.dtype)
                if consume == "transpose":
                    (out.transpose(1, 2) * c.transpose(1, 2).contiguous()).sum().backward()
                else:
                    out.backward(c)
                res["grads"] = [g() for g in getters]
            except Exception as exc:  # noqa: BLE001
                res["bexc"] = f"{type(exc).__name__}: {str(exc)[:70]}"
    return res


def att_run(mod, case, **kw):
    return run(mod.differential_attention, case["args"], causal=case["causal"], coef=case["coef"],
               cot=case["cot"], **kw)


def lam_run(mod, case, **kw):
    return run(mod.differential_lambda, case["args"], init=case["init"], cot=case["cot"], **kw)


# ====================================================================== tiers
def tier1(mod, which):
    if which == ATT:
        case, go = ATT_CASES["A"], att_run
        more = [ATT_CASES[k] for k in ("P", "S", "R", "D1", "C", "B", "BH", "HB")]
        layouts = ("perm", "trans", "fused", "fusedh", "bthd")
    else:
        case, go = LAM_CASES["a"], lam_run
        more = [LAM_CASES["k"]]
        layouts = ("every3", "fused")
    shape = np.shape(case["want"])
    r64 = go(mod, case, dtype=torch.float64, rg=False)
    r32 = go(mod, case, dtype=torch.float32, rg=False)
    rng = go(mod, case, dtype=torch.float64, rg=True, no_grad=True)
    rinf = go(mod, case, dtype=torch.float64, rg=False, inference=True)
    rgr = go(mod, case, dtype=torch.float64, rg=True, coef_kind="tensor")
    rst = [go(mod, case, dtype=torch.float64, rg=False, layout=lay) for lay in layouts]
    rst32 = go(mod, case, dtype=torch.float32, rg=False, layout=layouts[0])
    r32c = go(mod, case, dtype=torch.float32, rg=False, coef_kind="float64") if which == ATT else r32
    rnc = go(mod, ATT_CASES["B"], dtype=torch.float64, rg=True, coef_kind="tensor") if which == ATT else r64
    rmore = [(c, go(mod, c, dtype=torch.float64, rg=False)) for c in more]
    fresh = ATT_CASES["I"] if which == ATT else LAM_CASES["a"]
    go(mod, fresh, dtype=torch.float64, rg=False, inference=True)
    after = go(mod, fresh, dtype=torch.float64, rg=True, coef_kind="tensor")
    # one token, only the first query trainable: its gradient is exactly 0, but the output must stay attached
    alone = go(mod, ATT_CASES["S"], dtype=torch.float64, rg=True, coef_kind="tensor", frozen=(1, 2, 3, 4, 5)) if which == ATT else after
    called = r64["exc"] is None
    return {
        "type": called and r64["tensor"],
        "shape": called and r64["shape"] == shape
        and all(r["exc"] is not None or r["shape"] == np.shape(c["want"]) for c, r in rmore),
        "dtype": r64["dtype"] == torch.float64 and r32["dtype"] == torch.float32
        and (rst32["exc"] is not None or rst32["dtype"] == torch.float32)
        and (r32c["exc"] is not None or r32c["dtype"] == torch.float32),
        "mutation": called and not any(r["mutated"] for r in (r64, r32, rng, rinf, *rst)),
        "graph": all(r["exc"] is None and r["requires_grad"] for r in (rgr, after, alone))
        and (which == LAM or rnc["exc"] is not None or rnc["requires_grad"]),
        "strided": all(r["exc"] is None and r["shape"] == shape
                       and (r64["out"] is None or r["out"] is None or self_consistent(r["out"], r64["out"]))
                       for r in rst),
    }


def tier2(mod, which):
    res = {}
    if which == ATT:
        for key, c in ATT_CASES.items():
            res[key + "/f64"] = close(att_run(mod, c, dtype=torch.float64, rg=False)["out"], c["want"], TOL64)
            res[key + "/f64t"] = close(att_run(mod, c, dtype=torch.float64, rg=False, coef_kind="tensor")["out"],
                                       c["want"], TOL64)
        for key in ("A", "B", "C", "D1n", "T33", "T65", "T129", "T257", "X", "D64", "D40", "BH", "T320"):
            c = ATT_CASES[key]
            res[key + "/f32"] = close(att_run(mod, c, dtype=torch.float32, rg=False)["out"], c["want"], TOL32)
        for key in ("A", "T37", "T65", "D1n", "T129", "BH"):
            c = ATT_CASES[key]
            for lay in ("perm", "trans", "fused", "fusedh", "bthd"):
                res[f"{key}/f64-{lay}"] = close(att_run(mod, c, dtype=torch.float64, rg=False, layout=lay)["out"],
                                                c["want"], TOL64)
        for key in ("A", "B", "T33", "T100"):
            c = ATT_CASES[key]
            for bnd in ("pos", "allkw"):
                res[f"{key}/f64-{bnd}"] = close(att_run(mod, c, dtype=torch.float64, rg=False, binding=bnd)["out"],
                                                c["want"], TOL64)
        for key in ("A", "T65"):
            c = ATT_CASES[key]
            res[key + "/f64-default"] = close(att_run(mod, c, dtype=torch.float64, rg=False, binding="default")["out"],
                                              c["want"], TOL64)
        for key, c in ATT_LARGE.items():
            res[key + "/f32"] = close(att_run(mod, c, dtype=torch.float32, rg=False)["out"], c["want"], TOL_LARGE)
        for key, c in ATT_LARGE64.items():
            res[key + "/f64"] = close(att_run(mod, c, dtype=torch.float64, rg=False)["out"], c["want"], TOL64)
        for key in ("A", "T65"):
            c = ATT_CASES[key]
            res[key + "/f64-no_grad"] = close(att_run(mod, c, dtype=torch.float64, rg=True, no_grad=True)["out"],
                                              c["want"], TOL64)
        for key in ("B", "T33"):
            c = ATT_CASES[key]
            res[key + "/f64-inference"] = close(att_run(mod, c, dtype=torch.float64, rg=False, inference=True)["out"],
                                                c["want"], TOL64)
        for key, kind in (("A", "float32"), ("T33", "float32"), ("E", "int64"), ("E", "float32")):
            c = ATT_CASES[key]
            want = c["want"] if kind == "int64" else oracle_attention(*c["args"], float(np.float32(c["coef"])), c["causal"])
            res[f"{key}/f64-coef_{kind}"] = close(att_run(mod, c, dtype=torch.float64, rg=False, coef_kind=kind)["out"],
                                                  want, TOL64)
        c = ATT_CASES["D"]
        res["D/f64-recall"] = close(att_run(mod, c, dtype=torch.float64, rg=False,
                                            mutate_then_recall=RECALL["att"])["out"], RECALL["att_want"], TOL64)
        for key in ("A", "T33"):
            c = ATT_CASES[key]
            res[key + "/f64-recycled"] = all(
                close(att_run(mod, c, dtype=torch.float64, rg=False, recycled=True)["out"], c["want"], TOL64)
                for _ in range(3))
    else:
        for key, c in LAM_CASES.items():
            if "f64" in c.get("dtypes", ("f64", "f32")):
                res[key + "/f64"] = close(lam_run(mod, c, dtype=torch.float64, rg=False)["out"], c["want"], TOL64)
            if "f32" in c.get("dtypes", ("f64", "f32")):
                res[key + "/f32"] = close(lam_run(mod, c, dtype=torch.float32, rg=False)["out"], c["want"], TOL32)
        for key in ("e", "k", "b"):
            c = LAM_CASES[key]
            for lay in ("every3", "fused"):
                res[f"{key}/f64-{lay}"] = close(lam_run(mod, c, dtype=torch.float64, rg=False, layout=lay)["out"],
                                                c["want"], TOL64)
        for key in ("b", "f", "m"):
            c = LAM_CASES[key]
            for bnd in ("pos", "allkw"):
                res[f"{key}/f64-{bnd}"] = close(lam_run(mod, c, dtype=torch.float64, rg=False, binding=bnd)["out"],
                                                c["want"], TOL64)
        c = LAM_CASES["b"]
        res["b/f64-no_grad"] = close(lam_run(mod, c, dtype=torch.float64, rg=True, no_grad=True)["out"], c["want"], TOL64)
        c = LAM_CASES["c"]
        res["c/f64-inference"] = close(lam_run(mod, c, dtype=torch.float64, rg=False, inference=True)["out"],
                                       c["want"], TOL64)
        c = LAM_CASES["d"]
        res["d/f64-recall"] = close(lam_run(mod, c, dtype=torch.float64, rg=False,
                                            mutate_then_recall=RECALL["lam"])["out"], RECALL["lam_want"], TOL64)
        c = LAM_CASES["a"]
        res["a/f64-default-again"] = close(lam_run(mod, c, dtype=torch.float64, rg=False)["out"], c["want"], TOL64)
    return res


def _grad_row(names, trainable, grads, wanted):
    wrong, none = set(), set()
    for n, g, w in zip(names, grads, wanted):
        if n not in trainable:
            continue
        if g is None:
            if np.all(np.asarray(w) == 0):
                continue
            none.add(n)
            wrong.add(n)
        elif not close(g, w, TOL_GRAD):
            wrong.add(n)
    return wrong, none


def tier3(mod, which, layout="plain"):
    res = {}
    if which == ATT:
        keys = GRAD_ATT if layout == "plain" else GRAD_ATT_STRIDED
        cases = {k: {**ATT_CASES, **ATT_LARGE_GRAD}[k] for k in keys}
        go, names, extra, frozen_runs, ikey = att_run, ATT_NAMES, {"coef_kind": "tensor"}, FROZEN["att"], "A"
    else:
        cases, go, names, extra = LAM_CASES, lam_run, LAM_NAMES, {}
        frozen_runs, ikey = FROZEN["lam"], "b"
    runs = [(key, c, (), None) for key, c in cases.items() if not c.get("forward_only")]
    consume = {}
    if layout == "plain" and which == ATT:
        for k in TRANSPOSED_CONSUMER:
            runs.append((k + "-transpose", ATT_CASES[k], (), None))
            consume[k + "-transpose"] = "transpose"
    if layout == "plain":
        runs += [(f"{fk}-frozen{list(idx)}", ({**ATT_CASES} if which == ATT else LAM_CASES)[fk], idx, None)
                 for fk, idx in frozen_runs]
        runs += [(f"{ikey}-interleaved", (ATT_CASES if which == ATT else LAM_CASES)[ikey], (),
                  INTERLEAVE["att" if which == ATT else "lam"])]
    for key, c, frozen, inter in runs:
        r = go(mod, c, dtype=torch.float64, rg=True, layout=layout, frozen=frozen, interleave=inter,
               consume=consume.get(key, "plain"), **extra)
        trainable = {n for i, n in enumerate(names) if i not in frozen}
        if r["grads"] is None:
            if r["exc"] is None and r["bexc"] is None and r["tensor"] and not r["requires_grad"]:
                res[key] = {"wrong": set(trainable), "none": set(trainable), "exc": None}
                continue
            why = r["exc"] or r["bexc"] or "no gradients"
            res[key] = {"wrong": set(names), "none": set(), "exc": why}
            continue
        wrong, none = _grad_row(names, trainable, r["grads"], c["grads"])
        res[key] = {"wrong": wrong, "none": none, "exc": None}
    return res


def extras(mod, which):
    out = {}
    if which == ATT:
        c, go = ATT_CASES["A"], att_run
    else:
        c, go = LAM_CASES["a"], lam_run
    runs = [go(mod, c, dtype=torch.float64, rg=False, recycled=True) for _ in range(4)]
    out["deterministic"] = all(r["out"] is not None for r in runs) and all(
        np.array_equal(runs[0]["out"], r["out"], equal_nan=True) for r in runs[1:])
    new = [RNG.standard_normal(np.shape(x)) * 0.3 for x in c["args"]]
    if which == ATT:
        want_new = oracle_attention(*new, c["coef"], c["causal"])
        e = ATT_CASES["E"]
        for kind in ("int64", "float32"):
            r = att_run(mod, e, dtype=torch.float64, rg=False, coef_kind=kind)
            out["coef_" + kind] = r["dtype"] == torch.float64 and close(r["out"], e["want"], TOL64)
    else:
        want_new = oracle_lambda(*new, 0.2)
    r = go(mod, c, dtype=torch.float64, rg=False, mutate_then_recall=new)
    out["recall_after_inplace_change"] = close(r["out"], want_new, TOL64)
    return out


def failures_of_correct_function(mod, which):
    fails = [k for k, ok in tier1(mod, which).items() if not ok]
    fails += [k for k, ok in tier2(mod, which).items() if not ok]
    for tag, lay in (("grad", "plain"), ("grad-perm", "perm"), ("grad-fused", "fused"), ("grad-fusedh", "fusedh")):
        if which == LAM and lay in ("perm", "fusedh"):
            lay = "every3" if lay == "perm" else "fused"
        for key, r in tier3(mod, which, layout=lay).items():
            if r["wrong"] or r["exc"]:
                fails.append(f"{tag}:{key}:{sorted(r['wrong'])}{' ' + r['exc'] if r['exc'] else ''}")
    fails += [k for k, ok in extras(mod, which).items() if not ok]
    return fails


# ====================================================================== confirming a label
def schema_errors(lab):
    errs = []
    if not isinstance(lab.get("correct"), bool):
        return ["'correct' must be a bool"]
    if lab["correct"]:
        ok = set(lab) == {"correct", "style"} and isinstance(lab["style"], str) and lab["style"].strip()
        return [] if ok else ["a correct label has exactly 'correct' and 'style'"]
    if set(lab) != {"correct", "function", "tier", "component", "bug", "where", "names"}:
        errs.append("wrong keys")
    if lab.get("function") not in (LAM, ATT):
        errs.append("bad function")
    if lab.get("tier") not in ("T1", "T2", "T3"):
        errs.append("bad tier")
    if lab.get("component") not in COMPONENTS:
        errs.append("bad component")
    if lab.get("tier") == "T1" and lab.get("component") not in T1_COMPONENTS:
        errs.append("T1 label needs a contract component")
    if lab.get("tier") != "T1" and lab.get("component") in T1_COMPONENTS - {"graph"} and not (
            lab.get("tier") == "T2" and lab.get("component") == "dtype"):
        errs.append("contract component on a T2/T3 label")
    for field in ("bug", "where"):
        if not isinstance(lab.get(field), str) or not lab[field].strip():
            errs.append(f"missing {field}")
    names = lab.get("names")
    if not (isinstance(names, list) and 3 <= len(names) <= 6
            and all(isinstance(n, str) and n and n == n.lower() for n in names)):
        errs.append("names must be 3-6 lowercase strings")
    return errs


def precision_only(mod, which, failed):
    """Every failing ordinary case must still match the oracle to TOL_PRECISION (dtype kept)."""
    for k in failed:
        key, variant = k.split("/")
        if which == ATT and key in LARGE_KEYS:
            continue
        c = ALL_ATT[key] if which == ATT else LAM_CASES[key]
        go = att_run if which == ATT else lam_run
        kw = {"dtype": torch.float32 if variant.startswith("f32") else torch.float64, "rg": False}
        for lay in ("perm", "trans", "fusedh", "fused", "every3"):
            if variant.endswith(lay):
                kw["layout"] = lay
        for bnd in ("pos", "allkw", "default"):
            if variant.endswith(bnd):
                kw["binding"] = bnd
        if variant == "f64t":
            kw["coef_kind"] = "tensor"
        if variant.endswith("no_grad"):
            kw.update(no_grad=True, rg=True)
        if variant.endswith("inference"):
            kw["inference"] = True
        want = c["want"]
        if variant.endswith("recall"):
            kw["mutate_then_recall"] = RECALL["att" if which == ATT else "lam"]
            want = RECALL["att_want" if which == ATT else "lam_want"]
        r = go(mod, c, **kw)
        if r["dtype"] != kw["dtype"] or not close(r["out"], want, TOL_PRECISION):
            return False
    return True


def confirm_mask(mod, failed):
    modes = {ALL_ATT[k.split("/")[0]]["causal"] for k in failed}
    if len(modes) == 1:
        return True, "only causal=%s wrong" % modes.pop()
    inverted = all(
        close(att_run(mod, c, dtype=torch.float64, rg=False, flip_causal=True)["out"], c["want"], TOL64)
        for c in ATT_CASES.values()
    )
    return inverted, "both modes wrong; " + ("flag exactly inverted" if inverted else "not a pure inversion")


# Per wrong file: checks inside its labelled `where` that must fail, and checks outside it that must
# pass. Keys: "T1:<component>", T2 "<case>/<variant>", T3 "<case>[-frozen[...]|-transpose|-interleaved]".
EXPECT = {
    "lam_init_folded_into_logaddexp": (["m/f64", "m/f32"], ["f/f64", "b/f64", "a/f64"]),
    "lam_backward_out_buffer_aliased": (["a", "b-frozen[0]"], []),
    "lam_sinh_midpoint_overflow": (["LL1/f32", "LL2/f64"], ["a/f32", "j/f64", "g/f64"]),
    "lam_log_abs_difference_tie_nan_grad": (["tie", "zero"], ["a", "b", "tie/f64", "zero/f64"]),
    "lam_backward_weight_bound_in_other_guard": (["c-frozen[2]"], ["c-frozen[2, 3]", "b", "b-frozen[0]"]),
    "lam_pairwise_sum_drops_odd": (["b/f64", "a/f64", "m/f64"], ["d/f64", "e/f64", "k/f64"]),
    "lam_frozen_vectors_flagged_trainable": (["T1:mutation"], ["T1:graph"]),
    "lam_vectors_positional_only": (["b/f64-allkw"], ["b/f64-pos", "b/f64"]),
    "att_empty_like_reshape_copy_dropped": (["T1:strided", "A/f64-bthd", "BH/f64-bthd", "A/f64-perm", "A/f64-fused"],
                                            ["T37/f64-bthd", "T37/f64-perm", "A/f64-trans", "A/f64-fusedh", "A/f64"]),
    "att_kblock_count_extra_empty_block": (["T32/f64", "T64/f64", "T128/f64", "T256/f64", "T96/f64", "T320/f64"],
                                           ["T33/f64", "T65/f64", "T255/f64", "T31/f64"]),
    "att_shift_by_diagonal_logit": (["L3/f32", "H1/f64"], ["X/f64", "T320/f32", "A/f64"]),
    "att_scale_from_padded_width": (["A/f64", "D1n/f64", "D/f64"], ["T200/f64", "D64/f64", "D40/f64", "T100/f64"]),
    "att_branch_weights_repeat_not_interleave": (["A/f64", "BH/f64"], ["B/f64", "T16/f64", "X/f64"]),
    "att_coef_decorator_positional_slot": (["A/f64-allkw", "B/f64-allkw"], ["A/f64-pos", "A/f64", "A/f64t"]),
    "att_backward_grad_output_view": (["A-transpose", "HB-transpose"], ["B-transpose", "T65-transpose", "A", "B"]),
    "att_backward_value_grad_in_branch2_guard": (["A-frozen[2, 3]"], ["A", "C-frozen[0, 4]", "B-frozen[5]"]),
    "att_backward_chunked_dk_assigned": (["T65", "T100", "X"], ["T64", "T33", "A"]),
    "att_backward_branch2_rowsum_reused": (["A", "B"], ["Z"]),
    "att_backward_autograd_grad_frozen_inputs": (["B-frozen[5]", "C-frozen[0, 4]", "A-frozen[2, 3]"], ["A", "B", "T65"]),
    "att_grad_mode_not_restored_early_return": (["T1:graph", "B", "D"], ["A", "C", "B/f64"]),
    "att_online_max_replaced_by_block_max": (["L7/f32"], ["X/f64", "T320/f32", "L1/f32", "L3/f32"]),
    "att_tile_mask_only_when_ks_equals_qs": (["T33/f64", "T65/f64", "X/f64"], ["T32/f64", "T31/f64", "T37/f64", "Y/f64"]),
    "att_key_blocks_chunk_not_split": (["T33/f64", "T65/f64", "T129/f64"],
                                       ["T64/f64", "T127/f64", "T96/f64", "T63/f64", "Y/f64"]),
    "att_qtile_mask_rows_unclamped": (["T129/f64", "T257/f64", "X/f64"], ["T128/f64", "T256/f64", "T200/f64", "T320/f64"]),
    "att_dedupe_keys_by_storage_pointer": (["T1:strided", "A/f64-fused", "A/f64-fusedh"], ["A/f64-perm", "A/f64-bthd", "A/f64"]),
    "att_branch_weights_coefficient_dtype": (["A/f64-coef_float32", "E/f64-coef_int64"], ["A/f64t", "A/f64", "B/f64-allkw"]),
    "att_partial_binds_causal_keyword": (["A/f64-pos", "B/f64-pos"], ["A/f64-allkw", "A/f64-default", "B/f64"]),
    "att_vmap_heads_out_dims_default": (["T1:shape", "C/f64", "A/f64"], ["P/f64", "S/f64", "T1:strided"]),
    "att_bias_per_batch_broadcasts_on_heads": (["T1:shape", "C/f64", "BH/f64"], ["A/f64", "R/f64", "P/f64", "HB/f64"]),
    "att_splitk_scale_per_chunk": (["D64/f64", "D64n/f64", "D40/f64"], ["A/f64", "T200/f64"]),
    "att_mask_scratch_rewritten_next_call": (["A-interleaved"], ["A", "B", "T65"]),
    "att_promote_types_with_coefficient": (["T1:dtype"], ["A/f64", "A/f64t", "T1:shape"]),
}
BINDING_VARIANTS = ("-pos", "-allkw", "-default")


def check_expect(name, lookup):
    if name not in EXPECT:
        return False, "no EXPECT entry"
    must_fail, must_pass = EXPECT[name]
    problems = []
    for k in must_fail:
        v = lookup(k)
        if v is None:
            problems.append(f"unknown check {k}")
        elif v:
            problems.append(f"{k} passes")
    for k in must_pass:
        v = lookup(k)
        if v is None:
            problems.append(f"unknown check {k}")
        elif not v:
            problems.append(f"{k} fails")
    return not problems, "where ok" if not problems else "where: " + ", ".join(problems[:3])


def confirm(key, lab):
    mod, err = load(HERE / (key + ".py"))
    if lab["correct"]:
        if mod is None:
            return False, "does not load: " + err
        fails = failures_of_correct_function(mod, LAM) + failures_of_correct_function(mod, ATT)
        return not fails, "all tiers and extras pass" if not fails else "fails: " + ", ".join(fails[:4])

    name = key.split("/")[-1]
    fn, tier, comp = lab["function"], lab["tier"], lab["component"]
    if comp == "load":
        return mod is None, ("import fails: " + err[:60]) if mod is None else "imports fine"
    if mod is None:
        return False, "does not load: " + err
    other = ATT if fn == LAM else LAM
    other_fails = failures_of_correct_function(mod, other)
    if other_fails:
        return False, f"{other} should be correct but fails: " + ", ".join(other_fails[:3])

    cache = {}

    def results(which_tier):
        if which_tier not in cache:
            if which_tier == "T1":
                cache["T1"] = tier1(mod, fn)
            elif which_tier == "T2":
                cache["T2"] = tier2(mod, fn)
            else:
                t3 = tier3(mod, fn)
                for lay in (("every3", "fused") if fn == LAM else ("perm", "fused", "fusedh")):
                    t3.update({f"{k}-{lay}": r for k, r in tier3(mod, fn, layout=lay).items()})
                cache["T3"] = t3
        return cache[which_tier]

    def lookup(k):
        if k.startswith("T1:"):
            return results("T1").get(k[3:])
        if "/" in k:
            return results("T2").get(k)
        r = results("T3").get(k)
        return None if r is None else not (r["wrong"] or r["exc"])

    verdict, note = _confirm_tier(mod, fn, tier, comp, results)
    where_ok, where_note = check_expect(name, lookup)
    return verdict and where_ok, note + "; " + where_note


def _confirm_tier(mod, fn, tier, comp, results):
    t1 = results("T1")
    t1_failed = sorted(k for k, ok in t1.items() if not ok)
    if tier == "T1":
        return not t1[comp], f"T1 fails {t1_failed}"
    if t1_failed:
        return False, f"T1 should pass but fails {t1_failed}"

    t2 = results("T2")
    t2_failed = sorted(k for k, ok in t2.items() if not ok)
    if tier == "T2":
        if not t2_failed:
            return False, "forward values all match the oracle"
        note = f"T2 differs on {t2_failed[:3]}{'...' if len(t2_failed) > 3 else ''} ({len(t2_failed)}/{len(t2)})"
        if comp == "randomness":
            det = extras(mod, fn)["deterministic"]
            return not det, note + ("; repeated calls differ" if not det else "; deterministic!")
        if comp == "stability":
            large = LARGE_KEYS if fn == ATT else LAM_LARGE
            ordinary = [k for k in t2_failed if k.split("/")[0] not in large]
            ok = not ordinary
            return ok, note + ("; only large-magnitude cases fail" if ok else f"; ordinary inputs fail too {ordinary[:3]}")
        if comp == "dtype":
            near = precision_only(mod, fn, t2_failed)
            return near, note + ("; dtype kept, a precision loss only" if near else "; not a pure precision loss")
        if comp == "mask" and fn == ATT:
            if all(k.endswith(BINDING_VARIANTS) for k in t2_failed):
                return True, note + "; only calls that bind causal differently"
            ok, why = confirm_mask(mod, t2_failed)
            return ok, note + "; " + why
        return True, note
    if t2_failed:
        return False, f"T3 label but forward differs on {t2_failed[:3]}"

    t3 = results("T3")
    bad = sorted(k for k, r in t3.items() if r["wrong"] or r["exc"])
    wrong = sorted(set().union(*(r["wrong"] for r in t3.values())))
    none = sorted(set().union(*(r["none"] for r in t3.values())))
    excs = sorted({r["exc"] for r in t3.values() if r["exc"]})
    if not wrong:
        return False, "gradients all match the oracle"
    note = f"forward ok; wrong grads of {wrong} in {bad[:3]}{'...' if len(bad) > 3 else ''} ({len(bad)}/{len(t3)})"
    if comp == "coefficient":
        return wrong == ["coefficient"] and not excs, note
    if comp == "graph":
        return bool(none) and not excs, note + f"; no gradient reaches {none}"
    if comp == "stability":
        edge = LAM_EDGE if fn == LAM else set(ATT_LARGE_GRAD)
        ok = all(k.split("-")[0] in edge for k in bad) and not excs
        return ok, note + ("; only the large/tie gradient cases" if ok else "; ordinary gradients wrong too")
    if comp == "backward":
        if excs:
            return True, "forward ok; backward raises " + excs[0][:50]
        return not none, note + ("; every input gets a gradient" if not none else f"; missing {none}")
    return True, note


# ====================================================================== driver
def worker(key: str) -> None:
    global torch
    import torch as _torch
    torch = _torch
    torch.set_num_threads(1)
    precompute_gradients()
    lab = json.loads((HERE / "labels.json").read_text())[key]
    try:
        ok, obs = confirm(key, lab)
    except Exception as exc:  # noqa: BLE001
        ok, obs = False, f"verifier error {type(exc).__name__}: {exc}"
    print("@@RESULT@@" + json.dumps({"ok": ok, "obs": obs}))


def run_worker(key: str):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--worker", key],
                          capture_output=True, text=True, env=env, timeout=900)
    for line in proc.stdout.splitlines():
        if line.startswith("@@RESULT@@"):
            r = json.loads(line[len("@@RESULT@@"):])
            return r["ok"], r["obs"]
    tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return False, f"worker crashed (rc {proc.returncode}): {tail[:80]}"


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        worker(sys.argv[2])
        return 0
    start = time.time()
    labels = json.loads((HERE / "labels.json").read_text())
    only = set(sys.argv[1:])
    files = {f"{p.parent.name}/{p.stem}" for d in ("correct", "wrong") for p in (HERE / d).glob("*.py")}
    problems = [f"{k}: file without a label" for k in sorted(files - labels.keys())]
    problems += [f"{k}: label without a file" for k in sorted(labels.keys() - files)]
    header = (HERE / "_header.txt").read_text() if (HERE / "_header.txt").exists() else None
    for key in sorted(files):
        text = (HERE / (key + ".py")).read_text()
        lines = text.splitlines()
        if header is not None and not text.startswith(header):
            problems.append(f"{key}: stub header not copied verbatim")
        for line in lines:
            s = line.strip()
            if s.startswith(("import ", "from ")) and not s.startswith(ALLOWED_IMPORTS):
                problems.append(f"{key}: imports something else: {s}")
    precompute_gradients(check=True)   # the closed form must agree with finite differences

    todo = [k for k in sorted(labels) if not only or k in only or k.split("/")[-1] in only]
    rows = {}
    for key in todo:
        errs = schema_errors(labels[key])
        if errs:
            rows[key] = ("-", False, "schema: " + "; ".join(errs))
    runnable = [k for k in todo if k not in rows and k in files]
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        for key, (ok, obs) in zip(runnable, pool.map(run_worker, runnable)):
            lab = labels[key]
            tag = "correct" if lab["correct"] else f"{lab['tier']} {lab['component']}"
            rows[key] = (tag, ok, obs)

    width = max(len(k) for k in rows)
    print(f"{'file':<{width}}  {'label':<15}  ok   observed")
    for key in sorted(rows):
        tag, ok, obs = rows[key]
        print(f"{key:<{width}}  {tag:<15}  {'yes' if ok else 'NO ':<3}  {obs}")
    for p in problems:
        print("PROBLEM", p)
    wrong = [labels[k] for k in rows if not labels[k].get("correct")]
    n_ok = sum(1 for r in rows.values() if r[1])
    print()
    print(f"{len(rows)} labelled files ({len(rows) - len(wrong)} correct, {len(wrong)} wrong); "
          f"{n_ok} confirmed, {len(rows) - n_ok} not confirmed; {time.time() - start:.1f} s")
    for field in ("tier", "component", "function"):
        counts: dict[str, int] = {}
        for lab in wrong:
            counts[lab[field]] = counts.get(lab[field], 0) + 1
        print(f"  by {field}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return 0 if n_ok == len(rows) and not problems else 1


if __name__ == "__main__":
    sys.exit(main())
