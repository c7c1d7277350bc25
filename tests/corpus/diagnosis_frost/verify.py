"""Confirm every label of the frost corpus against an independent float64 numpy oracle.

Usage (from the project root):  python tests/corpus/diagnosis_frost/verify.py [stem ...]

Adapted from the verify.py of the harvest corpus (itself adapted from the
solstice, autumn and summer ones). The oracle is plain numpy in float64: a
row-max-shifted softmax and an explicit -inf causal mask. Reference gradients
are the closed-form backward of that oracle, checked against central finite
differences of the oracle at start-up. torch is only used to call the corpus
files and to read the gradients their autograd produces. Paths are relative
to this file.

Compared with the harvest script this one keeps every case and per-tier rule
and adds only cases and contract checks:

* another random seed;
* CG300: T = 300 with the causal mask and gradients (past tiles of 128 / 256);
* BH40: B * H = 40 (past a group of 32 batch-heads);
* W40: head width D = 40 (not a multiple of 32; value width 80);
* TINY: coefficient 2e-4 (also called under torch.no_grad());
* EV / expand_v: only the value is expanded over the heads (stride 0), the
  queries and keys differ per head;
* MX / tensor_f32: a trainable float32 0-dim coefficient with float64 inputs
  (0.375, exact in float32), gradients checked;
* python-coefficient gradient runs (cases A and B with a Python float);
* T1 mutation also: compares dtypes, runs one call with preset .grad on every
  trainable input (the .grad must be left alone), checks the inputs again
  after backward, and runs a float32 tensor coefficient with float64 inputs;
* T1 type also: an output produced under torch.no_grad() must not be an
  inference tensor;
* T1 dtype also: strided (perm) inputs keep their dtype, lambda case n in
  float32 keeps float32, and the process-wide default dtype is unchanged;
* T3 rule for `coefficient` also accepts a forward/backward that raises, as
  long as every failing run has a trainable coefficient.

The per-tier rules are those of the summer script:

* correct/*: both functions pass the contract, the forward values, the
  gradients and the extras.
* wrong/*: the function the label does not blame passes all of the above;
  the blamed function passes every tier before the labelled one and fails the
  labelled tier in the labelled way:
    T1  the contract check named by the component fails (for `load` the
        file does not import);
    T2  some forward value differs; for `mask` the failures are confined to
        one causal mode (or the flag is exactly inverted), for `stability`
        only large-logit cases fail, for `randomness` two identical calls
        differ, for `dtype` only float64 values fail and they still match to
        float32 accuracy;
    T3  forward values all match, some gradient differs; for `coefficient`
        only the coefficient's gradient (or runs with a trainable
        coefficient raise), for `graph` some input that requires grad gets
        no gradient at all, for `backward` every input gets a gradient (or
        the backward pass raises) but one is wrong, for `stability` only the
        large-logit gradient cases are wrong.

Prints one row per file, a one-line summary, and exits 1 if any label is not
confirmed.
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
LAM, ATT = "differential_lambda", "differential_attention"
COMPONENTS = {
    "load", "type", "shape", "dtype", "mutation", "graph", "mask", "scale", "softmax",
    "branch", "sign", "coefficient", "value", "lambda", "backward", "randomness",
    "stability", "strided",
}
T1_COMPONENTS = {"load", "type", "shape", "dtype", "mutation", "graph", "strided"}

TOL64, TOL32, TOL_LARGE, TOL_GRAD = 1e-9, 1e-4, 2e-3, 1e-6


# ====================================================================== oracle
def np_softmax(s):
    shifted = s - s.max(axis=-1, keepdims=True)
    e = np.exp(shifted)
    return e / e.sum(axis=-1, keepdims=True)


def _bias(t, causal):
    bias = np.zeros((t, t))
    if causal:
        bias[np.triu_indices(t, 1)] = -np.inf          # key j > query i hidden
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
    if a is None or b is None:
        return False
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=TOL64, atol=TOL64, equal_nan=True))


# ====================================================================== cases
RNG = np.random.default_rng(2027_0117)
ATT_NAMES = ("q1", "k1", "q2", "k2", "value", "coefficient")
LAM_NAMES = ("q1", "k1", "q2", "k2")


def att_case(b, h, t, d, coef, causal, scale=1.0, grads=True, head_constant=False):
    hh = 1 if head_constant else h
    qk = [np.repeat(RNG.standard_normal((b, hh, t, d)) * scale, h // hh, axis=1) for _ in range(4)]
    v = np.repeat(RNG.standard_normal((b, hh, t, 2 * d)), h // hh, axis=1)
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


# Names must not start with "L" or "G" (reserved for the large-logit cases).
ATT_CASES = {
    "A": att_case(2, 2, 5, 3, 0.37, True),
    "B": att_case(1, 3, 6, 4, -0.55, False),
    "C": att_case(2, 1, 7, 2, 1.4, True),
    "D": att_case(1, 2, 4, 5, 0.8, False),
    "E": att_case(1, 2, 5, 3, 1, True),                       # an int coefficient
    "O1": att_case(2, 3, 7, 1, 0.45, True),                   # D = 1
    "N64": att_case(1, 1, 9, 64, 0.3, False),                 # D = 64, no mask
    "C64": att_case(2, 2, 6, 64, -0.2, True),                 # D = 64, causal
    "P": att_case(1, 1, 6, 3, 0.3, True),                     # B = H = 1, six tokens ...
    "S": att_case(1, 1, 1, 3, 0.6, True),                     # ... then one token of the same B, H, D
    "R": att_case(2, 1, 1, 2, -0.2, False),                   # T = 1, no mask
    "Q": att_case(1, 2, 6, 3, 0.5, True),                     # zero rows (logits exactly 0)
    "Z": att_case(1, 2, 6, 3, 0.0, True),                     # coefficient exactly 0
    "I": att_case(1, 2, 9, 3, 0.6, True),                     # inference_mode first, then with gradients
    "T": att_case(1, 2, 96, 3, 0.45, True),
    "U": att_case(1, 1, 80, 4, -0.3, False),
    "V": att_case(1, 2, 37, 3, 0.5, False),
    "W": att_case(2, 1, 33, 2, -0.4, True),
    "K": att_case(1, 1, 130, 8, 0.5, True),                   # just over 128 tokens
    "M": att_case(1, 2, 200, 4, -0.35, False),
    "X": att_case(1, 1, 300, 2, 0.7, True),                   # 300 tokens (past 256), causal
    "Y": att_case(1, 2, 300, 3, -0.25, False),
    "H": att_case(1, 2, 129, 4, 0.4, False),                  # one past 128, no mask
    "J": att_case(1, 1, 257, 3, -0.6, True),                  # one past 256, causal
}
for _i in (0, 2):
    ATT_CASES["Q"]["args"][0][..., _i, :] = 0.0
for _j in (0, 3):
    ATT_CASES["Q"]["args"][3][..., _j, :] = 0.0
ATT_LARGE = {  # float32
    "L1": att_case(1, 2, 6, 4, 0.5, True, scale=20.0, grads=False),
    "L2": att_case(1, 2, 6, 4, 0.5, False, scale=20.0, grads=False),
    "L3": att_case(2, 1, 20, 4, 0.7, True, scale=25.0, grads=False),
    "L4": att_case(1, 2, 40, 4, 0.6, False, scale=20.0, grads=False),
    "L5": negative_case(1, 2, 7, 4, 0.4, False),
    "L6": negative_case(2, 1, 9, 4, -0.3, True),
    "L7": att_case(1, 1, 300, 4, 0.5, True, scale=20.0, grads=False),
    "L8": att_case(1, 2, 128, 8, 0.3, False, scale=10.0, grads=False),   # logits about +-100
    "L9": att_case(2, 2, 64, 16, -0.5, True, scale=10.0, grads=False),   # logits about +-100
}
ATT_LARGE_GRAD = {  # float64 gradients with logits of a few thousand
    "G1": att_case(1, 2, 12, 4, 0.5, True, scale=30.0),
    "G2": att_case(1, 1, 10, 4, -0.6, False, scale=30.0),
}
ATT_EXPAND = {  # forward only; every input is constant along the head axis and passed expanded
    "EH": att_case(2, 2, 6, 3, 0.4, True, head_constant=True, grads=False),
    "EH3": att_case(2, 3, 5, 4, -0.3, False, head_constant=True, grads=False),
}
# float32, ordinary logits from queries 200 times larger and keys 200 times smaller than usual (norm ratio 40 000): a dot
# product stays exact to float32's rounding, an identity through |q|^2 + |k|^2 cancels (added after the first measurement)
ATT_LARGE["L10"] = att_case(3, 2, 16, 16, 0.3, True, grads=False)
for _i in (0, 2):
    ATT_LARGE["L10"]["args"][_i] = ATT_LARGE["L10"]["args"][_i] * 200.0
for _j in (1, 3):
    ATT_LARGE["L10"]["args"][_j] = ATT_LARGE["L10"]["args"][_j] / 200.0
# float32, one key block of 128 and more: the keys of the tail are 40 times larger than the others, so the row
# maxima of the last block lie far above those of the first (added for this corpus)
ATT_LARGE["L11"] = att_case(1, 2, 200, 4, 0.4, False, scale=3.0, grads=False)
ATT_LARGE["L12"] = att_case(1, 1, 260, 4, -0.3, True, scale=3.0, grads=False)
for _key, _start in (("L11", 150), ("L12", 256)):
    for _j in (1, 3):
        ATT_LARGE[_key]["args"][_j][..., _start:, :] *= 40.0
ATT_CASES["T192"] = att_case(1, 2, 192, 3, 0.55, True)
# added for this corpus: one past a key block of 64, with and without the mask
ATT_CASES["T65"] = att_case(1, 2, 65, 3, -0.45, False)
ATT_CASES["C65"] = att_case(2, 1, 65, 2, 0.65, True)
# added for this corpus: the widest head and sequences past 1024 tokens (forward only)
ATT_CASES["N128"] = att_case(1, 1, 5, 128, 0.3, False)
ATT_LONG = {
    "T1100": att_case(1, 1, 1100, 2, 0.45, True, grads=False),
    "T1030": att_case(1, 2, 1030, 3, -0.3, False, grads=False),
    # added for this corpus: one token past a key tile of 512 / 1024
    "C1025": att_case(1, 1, 1025, 2, 0.35, True, grads=False),
    "N513": att_case(1, 1, 513, 2, -0.4, False, grads=False),
}
# added for this corpus: gradients past a query chunk of 512 without a mask, and equal branches
ATT_CASES["U600"] = att_case(1, 1, 600, 2, 0.55, False)
ATT_CASES["EQ"] = att_case(2, 2, 7, 3, 0.6, True)
ATT_CASES["EQ"]["args"][2] = ATT_CASES["EQ"]["args"][0].copy()
ATT_CASES["EQ"]["args"][3] = ATT_CASES["EQ"]["args"][1].copy()
# added for this corpus
ATT_CASES["CG300"] = att_case(1, 1, 300, 2, 0.45, True)
ATT_CASES["BH40"] = att_case(2, 20, 5, 3, 0.35, True)
ATT_CASES["W40"] = att_case(1, 2, 6, 40, 0.3, False)
ATT_CASES["TINY"] = att_case(1, 2, 6, 3, 2e-4, True)
ATT_CASES["MX"] = att_case(2, 2, 5, 3, 0.375, True)
ATT_CASES["MXN"] = att_case(1, 2, 6, 2, -0.625, False)
ATT_EXPAND["EV"] = att_case(2, 3, 5, 3, 0.4, True, grads=False)
ATT_EXPAND["EV"]["args"][4] = np.repeat(ATT_EXPAND["EV"]["args"][4][:, :1], 3, axis=1)
ATT_EXPAND["EVN"] = att_case(1, 2, 6, 2, -0.3, False, grads=False)
ATT_EXPAND["EVN"]["args"][4] = np.repeat(ATT_EXPAND["EVN"]["args"][4][:, :1], 2, axis=1)
ALL_ATT = {**ATT_CASES, **ATT_LARGE, **ATT_LARGE_GRAD, **ATT_EXPAND, **ATT_LONG}
for _c in ALL_ATT.values():
    _c["want"] = oracle_attention(*_c["args"], _c["coef"], _c["causal"])


def lam_case(vectors, init):
    return {"args": [np.asarray(x, dtype=np.float64) for x in vectors], "init": init, "cot": 0.7}


LAM_CASES = {
    "a": lam_case([RNG.standard_normal(6) * 0.35 for _ in range(4)], None),   # default init
    "b": lam_case([RNG.standard_normal(3) * 0.5 for _ in range(4)], 0.65),
    "c": lam_case([[0.5, 0.7, 0.6], [0.8, 0.6, 0.7], [-0.2, 0.1, 0.3], [0.4, -0.5, 0.2]], 0.1),
    "d": lam_case([[-0.3, 0.2], [0.6, -0.4], [0.9, 0.5], [0.8, 0.7]], 0.35),   # negative lambda
    "e": lam_case([RNG.standard_normal(64) * 0.15 for _ in range(4)], 0.8),     # D_lambda = 64
    "f": lam_case([RNG.standard_normal(5) * 0.4 for _ in range(4)], 0.0),
    "g": lam_case([[2.5, 2.0, 1.5], [2.0, 2.5, 1.0], [1.0, 0.5, 1.0], [1.0, 2.0, 1.0]], 0.5),
    "h": lam_case([[-5.0, -5.0], [5.0, 5.0], [4.5, 4.5], [5.0, 5.0]], 0.3),
    "i": lam_case([[5.0, 5.0, 5.0, 0.0], [5.0, 5.0, 5.0, 5.0], [-5.5, -5.5, -5.5, -5.5], [5.0, 5.0, 5.0, 5.0]], 0.2),
    "j": lam_case([[10.0, 9.5, 0.5], [10.0, -10.0, 1.0], [10.0, -9.0, 1.0], [9.0, 10.0, 1.0]], 0.25),
    "k": lam_case([[1.0], [-0.7], [0.4], [0.9]], 0.2),                       # D_lambda = 1
    # exponents 88.5 and 88.0: exp of each is finite in float32 (<= 2.7e38), their sum is not
    "n": lam_case([[9.5, 2.0], [9.0, 1.5], [8.0, 4.0], [10.0, 2.0]], 0.2),
    # first elements equal pairwise, so that q1 / k1 (and q2 / k2) can be the first row / column of one matrix
    "t": lam_case([[0.3, 0.5, -0.2, 0.4], [0.3, -0.4, 0.6, 0.1], [-0.6, 0.2, 0.7, -0.1], [-0.6, 0.3, -0.5, 0.8]], 0.4),
}
LAM_CASES["h"]["forward_only"] = True
# added for this corpus: D_lambda = 40, dot products of about +-1
LAM_CASES["w"] = lam_case([RNG.standard_normal(40) * 0.2 for _ in range(4)], 0.45)
LAM_CASES["i"]["forward_only"] = True
# added for this corpus: a long vector and lambda_init outside [0, 1]
LAM_CASES["z"] = lam_case([RNG.standard_normal(96) * 0.12 for _ in range(4)], 0.3)
LAM_CASES["x"] = lam_case([RNG.standard_normal(4) * 0.4 for _ in range(4)], -0.3)
LAM_CASES["y"] = lam_case([RNG.standard_normal(5) * 0.4 for _ in range(4)], 1.4)
for _c in LAM_CASES.values():
    _c["want"] = oracle_lambda(*_c["args"], 0.2 if _c["init"] is None else _c["init"])


def _new_like(arrays, scale=0.4, only=None):
    return [None if (only is not None and i not in only) else RNG.standard_normal(np.shape(x)) * scale
            for i, x in enumerate(arrays)]


def _filled(old, new):
    return [o if n is None else n for o, n in zip(old, new)]


# call sequences with in-place updates between calls
RECALLS = {}
_D, _Y, _d = ATT_CASES["D"], ATT_CASES["Y"], LAM_CASES["d"]
RECALLS["att_all"] = _new_like(_D["args"])
RECALLS["att_keys"] = _new_like(_D["args"], only=(1, 3))
RECALLS["att_kflip"] = [None, _Y["args"][1][..., ::-1, :].copy(), None, _Y["args"][3][..., ::-1, :].copy(), None]
RECALLS["lam_all"] = _new_like(_d["args"])
RECALLS["lam_keys"] = _new_like(_d["args"], only=(1, 3))
RECALL_WANT = {
    "att_all": oracle_attention(*_filled(_D["args"], RECALLS["att_all"]), _D["coef"], _D["causal"]),
    "att_keys": oracle_attention(*_filled(_D["args"], RECALLS["att_keys"]), _D["coef"], _D["causal"]),
    "att_kflip": oracle_attention(*_filled(_Y["args"], RECALLS["att_kflip"]), _Y["coef"], _Y["causal"]),
    "lam_all": oracle_lambda(*_filled(_d["args"], RECALLS["lam_all"]), _d["init"]),
    "lam_keys": oracle_lambda(*_filled(_d["args"], RECALLS["lam_keys"]), _d["init"]),
}
INTERLEAVE = {"att": [RNG.standard_normal(np.shape(x)) for x in ATT_CASES["A"]["args"]],
              "lam": [RNG.standard_normal(np.shape(x)) * 0.4 for x in LAM_CASES["b"]["args"]]}

# every subset of trainable inputs: the frozen indices are the complement
SUBSETS = {
    "att": [("A", tuple(i for i in range(6) if i not in keep)) for n in range(7)
            for keep in itertools.combinations(range(6), n)]
    + [("B", tuple(i for i in range(6) if i not in keep)) for n in range(7)
       for keep in itertools.combinations(range(6), n)],
    "lam": [(key, tuple(i for i in range(4) if i not in keep)) for key in ("b", "d") for n in range(5)
            for keep in itertools.combinations(range(4), n)],
}


def precompute_gradients() -> None:
    for c in ALL_ATT.values():
        c["grads"] = oracle_attention_grads(*c["args"], c["coef"], c["causal"], c["cot"])
    for c in LAM_CASES.values():
        c["grads"] = oracle_lambda_grads(*c["args"], c["cot"])
    for key in ("A", "B", "Q", "O1"):
        c = ATT_CASES[key]
        f = lambda q1, k1, q2, k2, v, coef, c=c: oracle_attention(q1, k1, q2, k2, v, coef, c["causal"])
        fd = central_differences(f, c["args"] + [np.asarray(float(c["coef"]))], c["cot"])
        for g, w in zip(c["grads"], fd):
            assert np.allclose(g, w, rtol=1e-6, atol=1e-7), key
    for key in ("b", "d", "t"):
        c = LAM_CASES[key]
        f = lambda q1, k1, q2, k2, c=c: oracle_lambda(q1, k1, q2, k2, c["init"])
        fd = central_differences(f, c["args"], c["cot"])
        for g, w in zip(c["grads"], fd):
            assert np.allclose(g, w, rtol=1e-6, atol=1e-7), key


# ====================================================================== calling a file
def load(path: Path):
    try:
        spec = importlib.util.spec_from_file_location(f"frost_corpus_{path.parent.name}_{path.stem}", path)
        mod = importlib.util.module_from_spec(spec)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            spec.loader.exec_module(mod)
        return mod, None
    except BaseException as exc:  # noqa: BLE001
        return None, f"{type(exc).__name__}: {' '.join(str(exc).split())}"


def _leaf(x, dtype, rg):
    leaf = torch.tensor(np.ascontiguousarray(x), dtype=dtype).requires_grad_(rg)
    return leaf, lambda: None if leaf.grad is None else leaf.grad.double().numpy()


FUSED_ORDER = (2, 4, 1, 0, 3)   # storage order of the fused projection: q2 | value | k1 | q1 | k2


def make_inputs(arrays, dtype, layout, rgs):
    """Tensors handed to the function and getters of their gradients as numpy."""
    n = len(arrays)
    if layout == "contig":
        pairs = [_leaf(x, dtype, rg) for x, rg in zip(arrays, rgs)]
        return [p[0] for p in pairs], [p[1] for p in pairs]
    if layout == "fused":      # five 4-D arrays as slices of one [B, H, T, 6D] tensor
        b, h, t, _ = arrays[0].shape
        widths = [a.shape[-1] for a in arrays]
        offsets, off = {}, 0
        for i in FUSED_ORDER:
            offsets[i] = off
            off += widths[i]
        full = np.zeros((b, h, t, off))
        for i, a in enumerate(arrays):
            full[..., offsets[i]:offsets[i] + widths[i]] = a
        base = torch.tensor(full, dtype=dtype).requires_grad_(any(rgs))
        views = [base[..., offsets[i]:offsets[i] + widths[i]] for i in range(n)]
        getters = [(lambda i=i: None if base.grad is None else
                    base.grad[..., offsets[i]:offsets[i] + widths[i]].double().numpy()) for i in range(n)]
        return views, getters
    if layout == "rowcol":     # lambda: q1 / k1 first row / column of one matrix, q2 / k2 of another
        views, getters = [], []
        for qi, ki in ((0, 1), (2, 3)):
            q, k = arrays[qi], arrays[ki]
            assert q[0] == k[0]
            m = np.zeros((len(q), len(q)))
            m[0, :] = q
            m[:, 0] = k
            base = torch.tensor(m, dtype=dtype)
            views += [base[0, :], base[:, 0]]
            getters += [lambda: None, lambda: None]
        return views, getters
    views, getters = [], []
    for x, rg in zip(arrays, rgs):
        if layout == "perm" and x.ndim == 4:      # storage [B, T, H, 2*last], permuted, every second column
            b, h, t, d = x.shape
            full = np.zeros((b, t, h, 2 * d))
            full[..., 1::2] = x.transpose(0, 2, 1, 3)
            base = torch.tensor(full, dtype=dtype).requires_grad_(rg)
            view = base.permute(0, 2, 1, 3)[..., 1::2]
            get = lambda base=base: None if base.grad is None else base.grad.permute(0, 2, 1, 3)[..., 1::2].double().numpy()
        elif layout == "perm":                      # every third element of a longer vector
            full = np.zeros(3 * x.size)
            full[::3] = x
            base = torch.tensor(full, dtype=dtype).requires_grad_(rg)
            view = base[::3]
            get = lambda base=base: None if base.grad is None else base.grad[::3].double().numpy()
        elif layout == "tokmajor":                  # contiguous [B, T, H, last] seen permuted (dense)
            base = torch.tensor(np.ascontiguousarray(x.transpose(0, 2, 1, 3)), dtype=dtype).requires_grad_(rg)
            view = base.permute(0, 2, 1, 3)
            get = lambda base=base: None if base.grad is None else base.grad.permute(0, 2, 1, 3).double().numpy()
        elif layout == "keymajor":                  # contiguous [B, H, last, T] seen transposed
            base = torch.tensor(np.ascontiguousarray(np.swapaxes(x, -1, -2)), dtype=dtype).requires_grad_(rg)
            view = base.transpose(-1, -2)
            get = lambda base=base: None if base.grad is None else base.grad.transpose(-1, -2).double().numpy()
        elif layout == "expand_v" and x.ndim == 4 and x.shape[-1] != arrays[0].shape[-1]:  # value only
            base = torch.tensor(np.ascontiguousarray(x[:, :1]), dtype=dtype)
            view = base.expand(x.shape)
            get = lambda: None
        elif layout == "expand_v":
            base = torch.tensor(np.ascontiguousarray(x), dtype=dtype).requires_grad_(rg)
            view = base
            get = lambda base=base: None if base.grad is None else base.grad.double().numpy()
        elif layout == "expand":                    # constant along the head axis, stride 0
            assert np.array_equal(x, np.repeat(x[:, :1], x.shape[1], axis=1))
            base = torch.tensor(np.ascontiguousarray(x[:, :1]), dtype=dtype)
            view = base.expand(x.shape)
            get = lambda: None
        else:
            raise ValueError(layout)
        views.append(view)
        getters.append(get)
    return views, getters


def run(fn, arrays, kwargs, *, dtype, rg, layout="contig", coef=None, coef_kind="python",
        cot=None, seed=0, no_grad=False, inference=False, flip_causal=False, mutate_then_recall=None,
        recall_same_mode=False, frozen=(), omit_causal=False, interleave=None, positional=False,
        preset_grad=False):
    """Call fn once (or twice) and record what happened. Inputs whose index is in `frozen` do not require grad."""
    res = {"exc": None, "out": None, "tensor": False, "shape": None, "dtype": None, "inference": False,
           "requires_grad": False, "mutated": False, "grads": None, "bexc": None, "default_dtype": True}
    try:
        inputs, raw_getters = make_inputs(arrays, dtype, layout, [rg and i not in frozen for i in range(len(arrays))])
    except Exception as exc:  # noqa: BLE001
        res["exc"] = f"setup {type(exc).__name__}: {exc}"
        return res
    getters = [(lambda: "frozen") if i in frozen else g for i, g in enumerate(raw_getters)]
    args = list(inputs)
    if coef is not None:
        if coef_kind == "tensor":
            c = torch.tensor(float(coef), dtype=dtype).requires_grad_(rg and len(arrays) not in frozen)
            args.append(c)
            inputs.append(c)
            if len(arrays) in frozen:
                getters.append(lambda: "frozen")
            else:
                getters.append(lambda c=c: None if c.grad is None else c.grad.double().numpy())
        elif coef_kind == "tensor_f32":
            c = torch.tensor(float(coef), dtype=torch.float32).requires_grad_(rg and len(arrays) not in frozen)
            args.append(c)
            inputs.append(c)
            getters.append((lambda: "frozen") if len(arrays) in frozen else
                           (lambda c=c: None if c.grad is None else c.grad.double().numpy()))
        elif coef_kind == "int64":
            args.append(torch.tensor(int(coef)))
            inputs.append(args[-1])
        elif coef_kind == "float32":
            args.append(torch.tensor(float(coef), dtype=torch.float32))
            inputs.append(args[-1])
        elif coef_kind == "uint8":
            args.append(torch.tensor(int(coef), dtype=torch.uint8))
        else:
            args.append(coef)
    if flip_causal:
        kwargs = {**kwargs, "causal": not kwargs["causal"]}
    if omit_causal:
        kwargs = {k: v for k, v in kwargs.items() if k != "causal"}
    if positional:
        args += list(kwargs.values())
        kwargs = {}

    def mode():
        if inference:
            return torch.inference_mode()
        if no_grad:
            return torch.no_grad()
        return contextlib.nullcontext()

    snapshot = lambda: [(t.detach().clone(), t._version, tuple(t.shape), t.stride(), t.data_ptr(), t.requires_grad,
                         t.dtype) for t in inputs]
    default_before = torch.get_default_dtype()
    preset = []
    if preset_grad:
        for t in inputs:
            if t.is_leaf and t.requires_grad:
                t.grad = torch.full_like(t, 0.5)
                preset.append((t, t.grad))
    before = snapshot()
    if seed is not None:
        torch.manual_seed(seed)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with mode():
                out = fn(*args, **kwargs)
            if mutate_then_recall is not None:
                with torch.no_grad():
                    for t, new in zip(inputs, mutate_then_recall):
                        if new is not None:
                            t.copy_(torch.as_tensor(np.ascontiguousarray(new), dtype=t.dtype))
                before = snapshot()
                with mode() if recall_same_mode else contextlib.nullcontext():
                    out = fn(*args, **kwargs)
            if interleave is not None:
                other = [torch.tensor(x, dtype=dtype).requires_grad_(rg) for x in interleave]
                if coef is not None:
                    other.append(torch.tensor(0.9 * float(coef) - 0.3, dtype=dtype).requires_grad_(rg)
                                 if coef_kind == "tensor" else coef)
                fn(*other, **kwargs)
    except Exception as exc:  # noqa: BLE001
        res["exc"] = f"{type(exc).__name__}: {str(exc)[:70]}"
        return res
    def changed():
        return any(
            t.dtype != dt or tuple(t.shape) != s or t._version != ver or not torch.equal(t.detach(), old)
            or t.stride() != st or t.data_ptr() != ptr or t.requires_grad != rgf
            for t, (old, ver, s, st, ptr, rgf, dt) in zip(inputs, before)
        )
    res["mutated"] = changed() or any(
        t.grad is not g or not torch.all(g == 0.5) for t, g in preset)
    res["default_dtype"] = torch.get_default_dtype() == default_before
    if isinstance(out, torch.Tensor):
        res.update(tensor=True, shape=tuple(out.shape), dtype=out.dtype, inference=out.is_inference(),
                   requires_grad=bool(out.requires_grad), out=out.detach().double().numpy().copy())
        if rg and cot is not None and out.requires_grad and tuple(out.shape) == np.shape(cot) and not preset:
            try:
                out.backward(torch.tensor(np.asarray(cot), dtype=out.dtype))
                res["grads"] = [g() for g in getters]
            except Exception as exc:  # noqa: BLE001
                res["bexc"] = f"{type(exc).__name__}: {str(exc)[:70]}"
            res["mutated"] = res["mutated"] or changed()
    return res


def att_run(mod, case, **kw):
    return run(mod.differential_attention, case["args"], {"causal": case["causal"]},
               coef=case["coef"], cot=case["cot"], **kw)


def lam_run(mod, case, **kw):
    kwargs = {} if case["init"] is None else {"lambda_init": case["init"]}
    return run(mod.differential_lambda, case["args"], kwargs, cot=case["cot"], **kw)


# ====================================================================== tiers
def _layout_ok(go, mod, case, layout):
    r = go(mod, case, dtype=torch.float64, rg=False, layout=layout)
    ref = go(mod, case, dtype=torch.float64, rg=False)
    return (r["exc"] is None and r["shape"] == np.shape(case["want"])
            and (ref["out"] is None or self_consistent(r["out"], ref["out"])))


T1_DETAIL: dict = {}


def tier1(mod, which):
    """Contract checks -> {check: passed}."""
    if which == ATT:
        case, go = ATT_CASES["A"], att_run
        more = [ATT_CASES[k] for k in ("P", "S", "R", "O1", "N64")]
        layouts = [(case, "perm"), (case, "tokmajor"), (case, "keymajor"), (case, "fused"),
                   (ATT_EXPAND["EH"], "expand"), (ATT_EXPAND["EH3"], "expand"),
                   (ATT_EXPAND["EV"], "expand_v"), (ATT_EXPAND["EVN"], "expand_v")]
    else:
        case, go = LAM_CASES["a"], lam_run
        more = [LAM_CASES["k"], LAM_CASES["e"]]
        layouts = [(case, "perm"), (LAM_CASES["t"], "rowcol")]
    shape = np.shape(case["want"])
    r64 = go(mod, case, dtype=torch.float64, rg=False)
    r64b = go(mod, case, dtype=torch.float64, rg=False)
    r32 = go(mod, case, dtype=torch.float32, rg=False)
    rlong = go(mod, ATT_LONG["T1100"], dtype=torch.float64, rg=False) if which == ATT else r64
    rng = go(mod, case, dtype=torch.float64, rg=True, no_grad=True)
    rinf = go(mod, case, dtype=torch.float64, rg=False, inference=True)
    rperm = go(mod, case, dtype=torch.float64, rg=False, layout="perm")
    rgr = go(mod, case, dtype=torch.float64, rg=True, coef_kind="tensor")
    rmore = [(c, go(mod, c, dtype=torch.float64, rg=False)) for c in more]
    fresh = ATT_CASES["I"] if which == ATT else LAM_CASES["a"]
    go(mod, fresh, dtype=torch.float64, rg=False, inference=True)
    after = go(mod, fresh, dtype=torch.float64, rg=True, coef_kind="tensor")
    rpre = go(mod, case, dtype=torch.float64, rg=True, coef_kind="tensor", preset_grad=True)
    extra_mut = [rpre]
    if which == ATT:
        extra_mut.append(go(mod, case, dtype=torch.float64, rg=False, coef_kind="float32"))
        r32n = r32
    else:
        r32n = go(mod, LAM_CASES["n"], dtype=torch.float32, rg=False)
    rperm32 = go(mod, case, dtype=torch.float32, rg=False, layout="perm")
    runs = [r64, r64b, r32, rlong, rng, rinf, rperm, rgr, after, rpre, r32n, rperm32] + [r for _, r in rmore] + extra_mut
    called = r64["exc"] is None
    named = {"f64": r64, "f64-again": r64b, "f32": r32, "T1100-f64": rlong, "no_grad": rng, "inference_mode": rinf,
             "perm-f64": rperm, "perm-f32": rperm32, "grad+backward": rgr, "after-inference": after,
             "preset-grad": rpre, "f32-case-n": r32n}
    if which == ATT:
        named["coef-float32"] = extra_mut[1]
    mut_names = ["f64", "f32", "no_grad", "inference_mode", "perm-f64", "grad+backward", "preset-grad"]
    if which == ATT:
        mut_names.append("coef-float32")
    want_dtype = {"f64": torch.float64, "f32": torch.float32, "perm-f64": torch.float64, "perm-f32": torch.float32,
                  "f32-case-n": torch.float32}
    if which == ATT:
        want_dtype["T1100-f64"] = torch.float64
    bad_layouts = [f"{lay}" for c, lay in layouts if not _layout_ok(go, mod, c, lay)]
    detail = {
        "type": [k for k, r in (("f64", r64),) if not r["tensor"]]
        + (["no_grad output is an inference tensor"] if rng["exc"] is None and rng["inference"] else []),
        "dtype": [f"{k} gives {named[k]['dtype'] or 'no output (' + str(named[k]['exc'])[:40] + ')'}"
                  for k, dt in want_dtype.items() if named[k]["dtype"] != dt]
        + [f"{k} changes the default dtype" for k, r in named.items() if not r["default_dtype"]],
        "mutation": [f"{k} mutates an input" for k in mut_names if named[k]["mutated"]],
        "strided": [f"layout {lay} disagrees" for lay in bad_layouts],
    }
    T1_DETAIL[which] = detail
    return {
        "type": called and r64["tensor"] and (rng["exc"] is not None or not rng["inference"]),
        "shape": called and r64["shape"] == shape and r64b["shape"] == shape
        and all(r["exc"] is not None or r["shape"] == np.shape(c["want"]) for c, r in rmore)
        and (which != ATT or rlong["shape"] == np.shape(ATT_LONG["T1100"]["want"])),
        "dtype": r64["dtype"] == torch.float64 and r32["dtype"] == torch.float32
        and rlong["dtype"] == torch.float64
        and rperm["dtype"] == torch.float64 and rperm32["dtype"] == torch.float32
        and r32n["dtype"] == torch.float32 and all(r["default_dtype"] for r in runs),
        "mutation": called and not any(r["mutated"] for r in (r64, r32, rng, rinf, rperm, rgr, *extra_mut)),
        "graph": rgr["exc"] is None and rgr["requires_grad"] and after["exc"] is None and after["requires_grad"],
        "strided": not bad_layouts,
    }


def tier2(mod, which, tol64=TOL64):
    """Forward values -> {case/variant: passed}."""
    res = {}
    if which == ATT:
        for key, c in ATT_CASES.items():
            res[key + "/f64"] = close(att_run(mod, c, dtype=torch.float64, rg=False)["out"], c["want"], tol64)
            res[key + "/f64t"] = close(att_run(mod, c, dtype=torch.float64, rg=False, coef_kind="tensor")["out"],
                                       c["want"], tol64)
        for key in ("A", "B", "O1", "C64", "T", "W", "K", "M", "X"):
            c = ATT_CASES[key]
            res[key + "/f32"] = close(att_run(mod, c, dtype=torch.float32, rg=False)["out"], c["want"], TOL32)
        for key, layout in (("A", "perm"), ("V", "perm"), ("Y", "perm"), ("A", "tokmajor"), ("H", "tokmajor"),
                            ("B", "keymajor"), ("K", "keymajor"),
                            ("D", "fused"), ("X", "fused")):
            c = ATT_CASES[key]
            res[f"{key}/f64-{layout}"] = close(att_run(mod, c, dtype=torch.float64, rg=False, layout=layout)["out"],
                                               c["want"], tol64)
        for key, c in ATT_EXPAND.items():
            lay = "expand_v" if key.startswith("EV") else "expand"
            res[key + "/f64-" + lay] = close(att_run(mod, c, dtype=torch.float64, rg=False, layout=lay)["out"],
                                             c["want"], tol64)
        c = ATT_CASES["TINY"]
        res["TINY/f64-no_grad"] = close(att_run(mod, c, dtype=torch.float64, rg=True, no_grad=True)["out"],
                                        c["want"], tol64)
        res["TINY/f64-inference"] = close(att_run(mod, c, dtype=torch.float64, rg=False, inference=True)["out"],
                                          c["want"], tol64)
        for key, c in ATT_LARGE.items():
            res[key + "/f32"] = close(att_run(mod, c, dtype=torch.float32, rg=False)["out"], c["want"], TOL_LARGE)
        for key, c in ATT_LONG.items():
            res[key + "/f64"] = close(att_run(mod, c, dtype=torch.float64, rg=False)["out"], c["want"], tol64)
            res[key + "/f32"] = close(att_run(mod, c, dtype=torch.float32, rg=False)["out"], c["want"], TOL32)
        c = ATT_CASES["A"]
        res["A/f64-default-causal"] = close(att_run(mod, c, dtype=torch.float64, rg=False, omit_causal=True)["out"],
                                            c["want"], tol64)
        res["A/f64-positional"] = close(att_run(mod, c, dtype=torch.float64, rg=False, positional=True)["out"],
                                        c["want"], tol64)
        res["A/f64-no_grad"] = close(att_run(mod, c, dtype=torch.float64, rg=True, no_grad=True)["out"], c["want"], tol64)
        res["A/f64t-no_grad"] = close(att_run(mod, c, dtype=torch.float64, rg=True, no_grad=True,
                                              coef_kind="tensor")["out"], c["want"], tol64)
        c = ATT_CASES["E"]
        for kind in ("int64", "float32"):
            res["E/f64-coef_" + kind] = close(att_run(mod, c, dtype=torch.float64, rg=False, coef_kind=kind)["out"],
                                              c["want"], tol64)
        c = ATT_CASES["B"]
        res["B/f64-positional"] = close(att_run(mod, c, dtype=torch.float64, rg=False, positional=True)["out"],
                                        c["want"], tol64)
        res["B/f64-inference"] = close(att_run(mod, c, dtype=torch.float64, rg=False, inference=True)["out"],
                                       c["want"], tol64)
        c = ATT_CASES["D"]
        res["D/f64-recall"] = close(att_run(mod, c, dtype=torch.float64, rg=False,
                                            mutate_then_recall=RECALLS["att_all"])["out"], RECALL_WANT["att_all"], tol64)
        res["D/f64-no_grad-recall"] = close(att_run(mod, c, dtype=torch.float64, rg=False, no_grad=True,
                                                    recall_same_mode=True, mutate_then_recall=RECALLS["att_all"])["out"],
                                            RECALL_WANT["att_all"], tol64)
        res["D/f64-no_grad-recall-keys"] = close(att_run(mod, c, dtype=torch.float64, rg=False, no_grad=True,
                                                         recall_same_mode=True,
                                                         mutate_then_recall=RECALLS["att_keys"])["out"],
                                                 RECALL_WANT["att_keys"], tol64)
        c = ATT_CASES["Y"]
        res["Y/f64-no_grad-recall-kflip"] = close(att_run(mod, c, dtype=torch.float64, rg=False, no_grad=True,
                                                          recall_same_mode=True,
                                                          mutate_then_recall=RECALLS["att_kflip"])["out"],
                                                  RECALL_WANT["att_kflip"], tol64)
    else:
        for key, c in LAM_CASES.items():
            res[key + "/f64"] = close(lam_run(mod, c, dtype=torch.float64, rg=False)["out"], c["want"], tol64)
            res[key + "/f32"] = close(lam_run(mod, c, dtype=torch.float32, rg=False)["out"], c["want"], TOL32)
        for key in ("b", "d", "e", "n"):
            c = LAM_CASES[key]
            res[key + "/f64-positional"] = close(lam_run(mod, c, dtype=torch.float64, rg=False, positional=True)["out"],
                                                 c["want"], tol64)
        c = LAM_CASES["e"]
        res["e/f64-perm"] = close(lam_run(mod, c, dtype=torch.float64, rg=False, layout="perm")["out"], c["want"], tol64)
        c = LAM_CASES["t"]
        res["t/f64-rowcol"] = close(lam_run(mod, c, dtype=torch.float64, rg=False, layout="rowcol")["out"],
                                    c["want"], tol64)
        c = LAM_CASES["b"]
        res["b/f64-no_grad"] = close(lam_run(mod, c, dtype=torch.float64, rg=True, no_grad=True)["out"], c["want"], tol64)
        c = LAM_CASES["c"]
        res["c/f64-inference"] = close(lam_run(mod, c, dtype=torch.float64, rg=False, inference=True)["out"],
                                       c["want"], tol64)
        c = LAM_CASES["d"]
        res["d/f64-recall"] = close(lam_run(mod, c, dtype=torch.float64, rg=False,
                                            mutate_then_recall=RECALLS["lam_all"])["out"], RECALL_WANT["lam_all"], tol64)
        res["d/f64-no_grad-recall"] = close(lam_run(mod, c, dtype=torch.float64, rg=False, no_grad=True,
                                                    recall_same_mode=True, mutate_then_recall=RECALLS["lam_all"])["out"],
                                            RECALL_WANT["lam_all"], tol64)
        res["d/f64-no_grad-recall-keys"] = close(lam_run(mod, c, dtype=torch.float64, rg=False, no_grad=True,
                                                         recall_same_mode=True,
                                                         mutate_then_recall=RECALLS["lam_keys"])["out"],
                                                 RECALL_WANT["lam_keys"], tol64)
        c = LAM_CASES["a"]
        res["a/f64-default-again"] = close(lam_run(mod, c, dtype=torch.float64, rg=False)["out"], c["want"], tol64)
        res["a/f32-again"] = close(lam_run(mod, c, dtype=torch.float32, rg=False)["out"], c["want"], TOL32)
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


def tier3(mod, which, layout="contig"):
    """Gradients -> {case: {"wrong": names, "none": names, "exc": text or None}}."""
    res = {}
    if which == ATT:
        cases, go, names, extra = {**ATT_CASES, **ATT_LARGE_GRAD}, att_run, ATT_NAMES, {"coef_kind": "tensor"}
        subsets, ikey = SUBSETS["att"], "A"
        if layout in ("keymajor", "fused", "tokmajor"):
            cases = {k: cases[k] for k in ("A", "B", "K")}
    else:
        cases, go, names, extra = LAM_CASES, lam_run, LAM_NAMES, {}
        subsets, ikey = SUBSETS["lam"], "b"
        if layout != "contig":
            cases = {k: cases[k] for k in ("a", "e")}
    runs = [(key, c, (), None, extra) for key, c in cases.items() if not c.get("forward_only")]
    if layout == "contig":
        runs += [(f"{fk}-frozen{list(idx)}", cases[fk], idx, None, extra) for fk, idx in subsets if idx]
        runs += [(f"{ikey}-interleaved", cases[ikey], (), INTERLEAVE["att" if which == ATT else "lam"], extra)]
        if which == ATT:
            for fk in ("MX", "MXN"):
                runs.append((f"{fk}-coef_f32", cases[fk], (), None, {"coef_kind": "tensor_f32"}))
                runs.append((f"{fk}-coef_f32-frozen[4]", cases[fk], (4,), None, {"coef_kind": "tensor_f32"}))
            for fk in ("A", "B"):
                runs.append((f"{fk}-coef_python", cases[fk], (5,), None, {"coef_kind": "python"}))
    for key, c, frozen, inter, kw in runs:
        r = go(mod, c, dtype=torch.float64, rg=True, layout=layout, frozen=frozen, interleave=inter, **kw)
        trainable = {n for i, n in enumerate(names) if i not in frozen}
        if r["grads"] is None:
            if r["exc"] is None and r["bexc"] is None and r["tensor"] and not r["requires_grad"]:
                res[key] = {"wrong": set(trainable), "none": set(trainable), "exc": None}
                continue
            why = r["exc"] or r["bexc"] or "no gradients"
            res[key] = {"wrong": set(names), "none": set(), "exc": why, "coef_trainable": "coefficient" in trainable
                        and kw.get("coef_kind") in ("tensor", "tensor_f32")}
            continue
        wrong, none = _grad_row(names, trainable, r["grads"], c["grads"])
        res[key] = {"wrong": wrong, "none": none, "exc": None}
    return res


def all_tier3(mod, which):
    out = {}
    layouts = ("contig", "perm", "tokmajor", "keymajor", "fused") if which == ATT else ("contig", "perm")
    for layout in layouts:
        for k, r in tier3(mod, which, layout).items():
            out[k if layout == "contig" else f"{k}-{layout}"] = r
    return out


def extras(mod, which):
    """Determinism, no_grad, coefficient kinds, in-place change of the inputs between calls."""
    out = {}
    if which == ATT:
        c, go = ATT_CASES["A"], att_run
    else:
        c, go = LAM_CASES["a"], lam_run
    r1 = go(mod, c, dtype=torch.float64, rg=False, seed=None)
    r2 = go(mod, c, dtype=torch.float64, rg=False, seed=None)
    out["deterministic"] = (r1["out"] is not None and r2["out"] is not None
                            and np.array_equal(r1["out"], r2["out"]))
    out["no_grad"] = close(go(mod, c, dtype=torch.float64, rg=True, no_grad=True)["out"], c["want"], TOL64)
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
    for key, r in all_tier3(mod, which).items():
        if r["wrong"] or r["exc"]:
            fails.append(f"grad:{key}:{sorted(r['wrong'])}{' ' + r['exc'] if r['exc'] else ''}")
    fails += [k for k, ok in extras(mod, which).items() if not ok]
    return fails


# ====================================================================== confirming a label
def schema_errors(lab):
    errs = []
    if not isinstance(lab.get("correct"), bool):
        return ["'correct' must be a bool"]
    if lab["correct"]:
        ok = set(lab) == {"correct", "style"} and isinstance(lab["style"], str) and lab["style"].strip()
        return [] if ok else ["a correct label has exactly 'correct' and a 'style' sentence"]
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
            errs.append(f"missing {field} sentence")
    names = lab.get("names")
    if not (isinstance(names, list) and 3 <= len(names) <= 5
            and all(isinstance(n, str) and n and n == n.lower() for n in names)):
        errs.append("names must be 3-5 lowercase strings")
    return errs


def confirm_mask(mod, failed):
    """A mask bug is wrong in one causal mode only, or has the flag exactly inverted."""
    modes = set()
    for k in failed:
        key, variant = k.split("/")
        causal = ALL_ATT[key]["causal"]
        modes.add(causal)
    if len(modes) == 1:
        return True, "only causal=%s wrong" % modes.pop()
    inverted = all(
        close(att_run(mod, c, dtype=torch.float64, rg=False, flip_causal=True)["out"], c["want"], TOL64)
        for c in ATT_CASES.values()
    )
    return inverted, "both modes wrong; " + ("flag exactly inverted" if inverted else "not a pure inversion")


def confirm(key, lab):
    """Return (confirmed, observation)."""
    mod, err = load(HERE / (key + ".py"))
    if lab["correct"]:
        if mod is None:
            return False, "does not load: " + err
        fails = failures_of_correct_function(mod, LAM) + failures_of_correct_function(mod, ATT)
        return not fails, "all tiers and extras pass" if not fails else "fails: " + ", ".join(fails[:4])

    fn, tier, comp = lab["function"], lab["tier"], lab["component"]
    if comp == "load":
        return mod is None, ("import fails: " + err[:60]) if mod is None else "imports fine"
    if mod is None:
        return False, "does not load: " + err
    other = ATT if fn == LAM else LAM
    other_fails = failures_of_correct_function(mod, other)
    if other_fails:
        return False, f"{other} should be correct but fails: " + ", ".join(other_fails[:3])

    t1 = tier1(mod, fn)
    t1_failed = sorted(k for k, ok in t1.items() if not ok)
    if tier == "T1":
        why = T1_DETAIL.get(fn, {}).get(comp) or []
        return not t1[comp], f"T1 fails {t1_failed}" + (f": {'; '.join(why[:3])}" if why else "")
    if t1_failed:
        return False, f"T1 should pass but fails {t1_failed}"

    t2 = tier2(mod, fn)
    t2_failed = sorted(k for k, ok in t2.items() if not ok)
    if tier == "T2":
        if not t2_failed:
            return False, "forward values all match the oracle"
        note = f"T2 differs on {t2_failed[:3]}{'...' if len(t2_failed) > 3 else ''} ({len(t2_failed)}/{len(t2)})"
        if comp == "randomness":
            det = extras(mod, fn)["deterministic"]
            return not det, note + ("; two calls differ" if not det else "; deterministic!")
        if comp == "stability":
            ordinary = [k for k in t2_failed if not k.startswith("L")]
            ok = not ordinary
            return ok, note + ("; only large-logit cases fail" if ok else "; ordinary inputs fail too")
        if comp == "dtype":
            not_f64 = [k for k in t2_failed if "f64" not in k.split("/")[1]]
            loose = tier2(mod, fn, tol64=TOL32)
            still = sorted(k for k, ok in loose.items() if not ok)
            ok = not not_f64 and not still
            return ok, note + ("; only float64 fails, within float32 accuracy" if ok
                               else f"; non-float64 {not_f64[:2]} or beyond float32 accuracy {still[:2]}")
        if comp == "mask" and fn == ATT:
            ok, why = confirm_mask(mod, t2_failed)
            return ok, note + "; " + why
        return True, note
    if t2_failed:
        return False, f"T3 label but forward differs on {t2_failed[:3]}"

    t3 = all_tier3(mod, fn)
    bad = sorted(k for k, r in t3.items() if r["wrong"] or r["exc"])
    wrong = sorted(set().union(*(r["wrong"] for r in t3.values())))
    none = sorted(set().union(*(r["none"] for r in t3.values())))
    excs = sorted({r["exc"] for r in t3.values() if r["exc"]})
    if not wrong:
        return False, "gradients all match the oracle"
    note = f"forward ok; wrong grads of {wrong} in {bad[:3]}{'...' if len(bad) > 3 else ''} ({len(bad)}/{len(t3)})"
    if comp == "coefficient":
        plain = [r for r in t3.values() if not r["exc"] and r["wrong"]]
        raised = [r for r in t3.values() if r["exc"]]
        ok = all(r["wrong"] == {"coefficient"} for r in plain) and all(r.get("coef_trainable") for r in raised)
        return ok, note + (f"; {len(raised)} runs with a trainable coefficient raise: {excs[0][:50]}" if raised else "")
    if comp == "graph":
        return bool(none) and not excs, note + f"; no gradient reaches {none}"
    if comp == "stability":
        ok = all(k.startswith("G") for k in bad) and not excs
        return ok, note + ("; only the large-logit gradient cases" if ok else "; ordinary gradients wrong too")
    if comp == "backward":
        if excs:
            return True, f"forward ok; backward raises in {bad[:2]}: " + excs[0][:50]
        return not none, note + ("; every input gets a gradient" if not none else f"; missing {none}")
    return True, note


def main() -> int:
    start = time.time()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    labels = json.loads((HERE / "labels.json").read_text())
    only = set(sys.argv[1:])
    files = {f"{p.parent.name}/{p.stem}" for d in ("correct", "wrong") for p in (HERE / d).glob("*.py")}
    problems = [f"{k}: file without a label" for k in sorted(files - labels.keys())]
    problems += [f"{k}: label without a file" for k in sorted(labels.keys() - files)]
    for p in sorted((HERE / d / f) for d in ("correct", "wrong") for f in
                    [q.name for q in (HERE / d).glob("*.py")]):
        text = p.read_text()
        for line in text.splitlines():
            s = line.strip()
            if s.startswith(("import ", "from ")) and not s.startswith(
                    ("import math", "import torch", "from __future__", "from torch", "from math")):
                problems.append(f"{p.parent.name}/{p.stem}: imports something else: {s}")
    precompute_gradients()

    rows = []
    for key in sorted(labels):
        if only and key not in only and key.split("/")[-1] not in only:
            continue
        lab = labels[key]
        errs = schema_errors(lab)
        if errs:
            rows.append((key, "-", False, "schema: " + "; ".join(errs)))
            continue
        if key not in files:
            continue
        tag = "correct" if lab["correct"] else f"{lab['tier']} {lab['component']}"
        t0 = time.time()
        torch.set_default_dtype(torch.float32)
        try:
            ok, obs = confirm(key, lab)
        finally:
            torch.set_default_dtype(torch.float32)
        rows.append((key, tag, ok, f"{obs} [{time.time() - t0:.1f}s]"))
        print(f"{key:<58}  {tag:<15}  {'yes' if ok else 'NO '}  {rows[-1][3]}", flush=True)

    for p in problems:
        print("PROBLEM", p)
    shown = [k for k, *_ in rows]
    wrong = [labels[k] for k in shown if not labels[k].get("correct")]
    n_ok = sum(1 for r in rows if r[2])
    print()
    print(f"SUMMARY: {len(rows)} labelled files ({len(rows) - len(wrong)} correct, {len(wrong)} wrong); "
          f"{n_ok} confirmed, {len(rows) - n_ok} not confirmed; {time.time() - start:.1f} s")
    for field in ("tier", "component", "function"):
        counts: dict[str, int] = {}
        for lab in wrong:
            counts[lab[field]] = counts.get(lab[field], 0) + 1
        print(f"  by {field}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    print(f"{n_ok}/{len(rows)} labels verified")
    return 0 if n_ok == len(rows) and not problems else 1


if __name__ == "__main__":
    sys.exit(main())
