"""Confirm every label of the cold corpus against an independent float64 numpy oracle.

Usage (from anywhere):  python tests/corpus/diagnosis_cold/verify.py [stem ...]

Adapted from the verify.py of the diagnosis_sealed corpus. The oracle is plain
numpy in float64: a row-max-shifted softmax and an explicit -inf causal mask.
Reference gradients are the closed-form backward of that oracle, checked
against central finite differences of the oracle at start-up. torch is only
used to call the corpus files and to read the gradients their autograd
produces. Paths are relative to this file.

Changes and additions compared with the sealed corpus's script:

* another random seed;
* a 128-token causal case (a multiple of the usual tile sizes) in the
  contract's shape check and everywhere else;
* cases whose value tensor has all-zero rows (one causal, one not);
* a lambda case with a tie, q1 = q2 and k1 = k2, in forward and gradients;
* the contract's type check also looks at a call under torch.no_grad();
* the contract's strided check also uses a mixed layout: only some inputs
  are strided views, the others are ordinary contiguous tensors;
* forward values on the training path (inputs that require grad), with
  every argument passed by keyword, and with `causal` / `lambda_init`
  passed positionally;
* the `stability` rule for T2 is "every failing case is a large-logit case
  or a float32 case, and every float64 case with ordinary inputs passes";
* the `mask` rule for T2 also accepts failures confined to the cases with
  all-zero value rows (a mask derived from the values);
* a one-bug check: every wrong file has a recorded minimal fix (FIXES); with
  the fix applied in memory the file must pass everything a correct file
  passes, so the labelled bug is the only one.

For every labelled file:

* correct/*: both functions pass the contract, the forward values, the
  gradients (contiguous and strided, every case, some inputs frozen, two
  forward calls before one backward) and the extras (deterministic, 0-dim
  int64/float32 coefficients, a call after the inputs were changed in place).
* wrong/*: the function the label does not blame passes all of the above;
  the blamed function passes every tier before the labelled one and fails the
  labelled tier in the labelled way:
    T1  the contract check named by the component fails (for `load` the
        file does not import);
    T2  some forward value differs; for `mask` the failures are confined to
        one causal mode (or the flag is exactly inverted, or only the cases
        with all-zero value rows fail), for `stability` only large-logit or
        float32 cases fail, for `randomness` two identical calls differ, for
        `dtype` only float64 values fail and they still match to float32
        accuracy;
    T3  forward values all match, some gradient differs; for `coefficient`
        only the coefficient's gradient, for `graph` some input that
        requires grad gets no gradient at all, for `backward` every input
        gets a gradient (or the backward pass raises) but one is wrong, for
        `stability` only the large-logit gradient cases are wrong.

  With its recorded fix applied, a wrong file must then pass everything.

Prints one row per file and a summary, and exits 1 if any label is not
confirmed.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
import types
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

# float64 against the oracle, float32 on ordinary inputs, float32 with large
# logits (near one-hot maps), autograd against the analytic oracle gradient.
TOL64, TOL32, TOL_LARGE, TOL_GRAD = 1e-9, 1e-4, 2e-3, 1e-6


# ====================================================================== oracle
def np_softmax(s: np.ndarray) -> np.ndarray:
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
    """Closed-form gradient of sum(O * cot) w.r.t. q1, k1, q2, k2, v and the coefficient."""
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
    """Gradient of sum(f(*args) * cot) with respect to every argument."""
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
RNG = np.random.default_rng(2026_0612)
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


# T, D, H, 2D all different so that axis and scale slips show; B, H > 1 in some.
ATT_CASES = {
    "A": att_case(2, 2, 5, 3, 0.37, True),
    "B": att_case(1, 3, 6, 4, -0.55, False),
    "C": att_case(2, 1, 7, 2, 1.4, True),
    "D": att_case(1, 2, 4, 5, 0.8, False),
    "E": att_case(1, 2, 5, 3, 1, True),                       # an int coefficient
    "P": att_case(1, 1, 6, 3, 0.3, True),                     # B = H = 1
    "S": att_case(1, 1, 1, 3, 0.6, True),                     # T = 1, causal
    "R": att_case(2, 1, 1, 2, -0.2, False),                   # T = 1, no mask
    "Q": att_case(1, 2, 6, 3, 0.5, True),                     # zero rows in q1 and k2 (logits exactly 0)
    "Z": att_case(1, 2, 6, 3, 0.0, True),                     # coefficient exactly 0
    "I": att_case(1, 2, 9, 3, 0.6, True),                     # first called under inference_mode, then with gradients
    "T": att_case(1, 2, 96, 3, 0.45, True),                   # long sequence, causal (64 + 32)
    "U": att_case(1, 1, 80, 4, -0.3, False),                  # long sequence, no mask
    "V": att_case(1, 2, 37, 3, 0.5, False),                   # length not a multiple of 16 or 32, no mask
    "W": att_case(2, 1, 33, 2, -0.4, True),                   # length not a multiple of 16 or 32, causal
    "M": att_case(1, 2, 128, 2, 0.35, True),                  # a multiple of 64 and 128, causal
    "X": att_case(1, 1, 300, 2, 0.7, True),                   # 300 tokens, causal
    "Y": att_case(1, 2, 300, 3, -0.25, False),                # 300 tokens, no mask
    "Oc": att_case(1, 2, 7, 3, 0.45, True),                   # all-zero value rows, causal
    "On": att_case(2, 1, 6, 2, -0.35, False),                 # all-zero value rows, no mask
}
for _i in (0, 2):
    ATT_CASES["Q"]["args"][0][..., _i, :] = 0.0               # queries 0 and 2 of q1 are zero
for _j in (0, 3):
    ATT_CASES["Q"]["args"][3][..., _j, :] = 0.0               # keys 0 and 3 of k2 are zero
for _j in (2, 5):
    ATT_CASES["Oc"]["args"][4][..., _j, :] = 0.0              # value rows 2 and 5 are zero
for _j in (1, 4):
    ATT_CASES["On"]["args"][4][..., _j, :] = 0.0              # value rows 1 and 4 are zero
ZERO_VALUE_CASES = {"Oc", "On"}
ATT_LARGE = {  # float32 with logits of several hundred
    "L1": att_case(1, 2, 6, 4, 0.5, True, scale=20.0, grads=False),
    "L2": att_case(1, 2, 6, 4, 0.5, False, scale=20.0, grads=False),
    "L3": att_case(2, 1, 20, 4, 0.7, True, scale=25.0, grads=False),
    "L4": att_case(1, 2, 40, 4, 0.6, False, scale=20.0, grads=False),   # several key blocks, no mask
    "L5": negative_case(1, 2, 7, 4, 0.4, False),                        # every logit about -110, no mask
    "L6": negative_case(2, 1, 9, 4, -0.3, True),                        # every logit about -110, causal
    "L7": att_case(1, 1, 300, 4, 0.5, True, scale=20.0, grads=False),   # 300 tokens, large logits, causal
}
ATT_LARGE_GRAD = {  # float64 gradients with logits of a few thousand
    "G1": att_case(1, 2, 12, 4, 0.5, True, scale=30.0),
    "G2": att_case(1, 1, 10, 4, -0.6, False, scale=30.0),
}
ALL_ATT = {**ATT_CASES, **ATT_LARGE, **ATT_LARGE_GRAD}
for _c in ALL_ATT.values():
    _c["want"] = oracle_attention(*_c["args"], _c["coef"], _c["causal"])


def lam_case(vectors, init):
    return {"args": [np.asarray(x, dtype=np.float64) for x in vectors], "init": init, "cot": 0.7}


LAM_CASES = {
    "a": lam_case([RNG.standard_normal(6) * 0.35 for _ in range(4)], None),   # default init
    "b": lam_case([RNG.standard_normal(3) * 0.5 for _ in range(4)], 0.65),
    "c": lam_case([[0.5, 0.7, 0.6], [0.8, 0.6, 0.7], [-0.2, 0.1, 0.3], [0.4, -0.5, 0.2]], 0.1),
    "d": lam_case([[-0.3, 0.2], [0.6, -0.4], [0.9, 0.5], [0.8, 0.7]], 0.35),   # negative lambda
    "e": lam_case([RNG.standard_normal(64) * 0.15 for _ in range(4)], 0.8),
    "f": lam_case([RNG.standard_normal(5) * 0.4 for _ in range(4)], 0.0),     # lambda_init = 0 passed explicitly
    "g": lam_case([[2.5, 2.0, 1.5], [2.0, 2.5, 1.0], [1.0, 0.5, 1.0], [1.0, 2.0, 1.0]], 0.5),  # q1 . k1 = 11.5
    # exponents -50 and 45: opposite signs, 95 apart (past float32's exp range), exp of each is finite
    "h": lam_case([[-5.0, -5.0], [5.0, 5.0], [4.5, 4.5], [5.0, 5.0]], 0.3),
    # exponents 75 and -110
    "i": lam_case([[5.0, 5.0, 5.0, 0.0], [5.0, 5.0, 5.0, 5.0], [-5.5, -5.5, -5.5, -5.5], [5.0, 5.0, 5.0, 5.0]], 0.2),
    # elementwise products of 100 and -95 (exp of each product overflows float32) but dot products 5 and 1
    "j": lam_case([[10.0, 9.5, 0.5], [10.0, -10.0, 1.0], [10.0, -9.0, 1.0], [9.0, 10.0, 1.0]], 0.25),
    "k": lam_case([[1.0], [-0.7], [0.4], [0.9]], 0.2),                       # D_lambda = 1
    # a tie: q2 = q1 and k2 = k1, so both exponentials are equal (lambda = lambda_init) but the gradients are not 0
    "t": lam_case([[0.3, -0.2, 0.5], [0.4, 0.1, -0.3], [0.3, -0.2, 0.5], [0.4, 0.1, -0.3]], 0.15),
}
LAM_CASES["h"]["forward_only"] = True   # gradients of about 1e-21 next to a lambda of 3e19
LAM_CASES["i"]["forward_only"] = True
for _c in LAM_CASES.values():
    _c["want"] = oracle_lambda(*_c["args"], 0.2 if _c["init"] is None else _c["init"])


_D = ATT_CASES["D"]
RECALL = {"att": [RNG.standard_normal(np.shape(x)) * 0.4 for x in _D["args"]],
          "lam": [RNG.standard_normal(np.shape(x)) * 0.4 for x in LAM_CASES["d"]["args"]]}
RECALL["att_want"] = oracle_attention(*RECALL["att"], _D["coef"], _D["causal"])
RECALL["lam_want"] = oracle_lambda(*RECALL["lam"], LAM_CASES["d"]["init"])
# a second forward call with these inputs runs before the backward pass of case A / case b
INTERLEAVE = {"att": [RNG.standard_normal(np.shape(x)) for x in ATT_CASES["A"]["args"]],
              "lam": [RNG.standard_normal(np.shape(x)) * 0.4 for x in LAM_CASES["b"]["args"]]}

# gradient cases with some inputs frozen (requires_grad=False): index of the frozen arrays
FROZEN = {"att": [("C", (0, 4)), ("B", (5,)), ("W", (1, 2))], "lam": [("b", (0,)), ("c", (2, 3))]}
# the mixed layout of the contract's strided check: these inputs are strided views, the others contiguous
MIXED = {"att": frozenset({2, 4}), "lam": frozenset({1, 2})}


def precompute_gradients() -> None:
    for c in ALL_ATT.values():
        c["grads"] = oracle_attention_grads(*c["args"], c["coef"], c["causal"], c["cot"])
    for c in LAM_CASES.values():
        c["grads"] = oracle_lambda_grads(*c["args"], c["cot"])
    # the closed form must agree with central differences of the oracle
    for key in ("A", "B", "Q", "Oc"):
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
        spec = importlib.util.spec_from_file_location(f"cold_corpus_{path.parent.name}_{path.stem}", path)
        mod = importlib.util.module_from_spec(spec)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            spec.loader.exec_module(mod)
        return mod, None
    except BaseException as exc:  # noqa: BLE001 - any import failure is a load failure
        return None, f"{type(exc).__name__}: {' '.join(str(exc).split())}"


def as_input(x: np.ndarray, dtype, strided: bool, rg: bool):
    """Return (tensor handed to the function, getter of its gradient as numpy)."""
    if not strided:
        leaf = torch.tensor(x, dtype=dtype).requires_grad_(rg)
        return leaf, lambda: None if leaf.grad is None else leaf.grad.double().numpy()
    if x.ndim == 4:  # storage [B, T, H, 2*last], seen permuted and every second column
        b, h, t, d = x.shape
        full = np.zeros((b, t, h, 2 * d))
        full[..., 1::2] = x.transpose(0, 2, 1, 3)
        base = torch.tensor(full, dtype=dtype).requires_grad_(rg)
        view = base.permute(0, 2, 1, 3)[..., 1::2]
        get = lambda: None if base.grad is None else base.grad.permute(0, 2, 1, 3)[..., 1::2].double().numpy()
    else:  # every third element of a longer vector
        full = np.zeros(3 * x.size)
        full[::3] = x
        base = torch.tensor(full, dtype=dtype).requires_grad_(rg)
        view = base[::3]
        get = lambda: None if base.grad is None else base.grad[::3].double().numpy()
    assert view.numel() <= 1 or not view.is_contiguous()
    return view, get


def run(fn, arrays, kwargs, *, dtype, rg, strided=False, coef=None, coef_kind="python",
        cot=None, seed=0, no_grad=False, inference=False, flip_causal=False, mutate_then_recall=None,
        frozen=(), omit_causal=False, interleave=None, names=None, keywords=False, positional=False):
    """Call fn once and record what happened.

    Inputs whose index is in `frozen` do not require grad. `strided` is a bool
    or a set of input indices that are handed over as strided views.
    `keywords` passes every argument by name; `positional` passes the trailing
    option (causal / lambda_init) positionally.
    """
    res = {"exc": None, "out": None, "tensor": False, "shape": None, "dtype": None,
           "requires_grad": False, "mutated": False, "grads": None, "bexc": None}
    inputs, getters = [], []
    for i, x in enumerate(arrays):
        st = strided if isinstance(strided, bool) else (i in strided)
        t, g = as_input(x, dtype, st, rg and i not in frozen)
        inputs.append(t)
        getters.append((lambda: "frozen") if i in frozen else g)
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
        elif coef_kind == "int64":
            args.append(torch.tensor(int(coef)))
        elif coef_kind == "float32":
            args.append(torch.tensor(float(coef), dtype=torch.float32))
        else:
            args.append(coef)
    if flip_causal:
        kwargs = {**kwargs, "causal": not kwargs["causal"]}
    if omit_causal:
        kwargs = {k: v for k, v in kwargs.items() if k != "causal"}
    if keywords:
        kwargs = {**dict(zip(names, args)), **kwargs}
        args = []
    elif positional:
        args = args + list(kwargs.values())
        kwargs = {}
    before = [(t.detach().clone(), t._version, tuple(t.shape)) for t in inputs]
    if seed is not None:
        torch.manual_seed(seed)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if no_grad or inference:
                with torch.inference_mode() if inference else torch.no_grad():
                    out = fn(*args, **kwargs)
            else:
                out = fn(*args, **kwargs)
            if mutate_then_recall is not None:  # change the inputs in place, call again
                with torch.no_grad():
                    for t, new in zip(inputs, mutate_then_recall):
                        t.copy_(torch.as_tensor(new, dtype=t.dtype))
                before = [(t.detach().clone(), t._version, tuple(t.shape)) for t in inputs]
                out = fn(*args, **kwargs)
            if interleave is not None:  # a second forward call (another micro-batch) before this call's backward
                other = [torch.tensor(x, dtype=dtype).requires_grad_(rg) for x in interleave]
                if coef is not None:
                    other.append(torch.tensor(0.9 * float(coef) - 0.3, dtype=dtype).requires_grad_(rg)
                                 if coef_kind == "tensor" else coef)
                fn(*other, **kwargs)
    except Exception as exc:  # noqa: BLE001
        res["exc"] = f"{type(exc).__name__}: {str(exc)[:70]}"
        return res
    res["mutated"] = any(
        tuple(t.shape) != s or t._version != ver or not torch.equal(t.detach(), old)
        for t, (old, ver, s) in zip(inputs, before)
    )
    if isinstance(out, torch.Tensor):
        res.update(tensor=True, shape=tuple(out.shape), dtype=out.dtype,
                   requires_grad=bool(out.requires_grad), out=out.detach().double().numpy().copy())
        if rg and cot is not None and out.requires_grad and tuple(out.shape) == np.shape(cot):
            try:
                out.backward(torch.tensor(np.asarray(cot), dtype=out.dtype))
                res["grads"] = [g() for g in getters]
            except Exception as exc:  # noqa: BLE001
                res["bexc"] = f"{type(exc).__name__}: {str(exc)[:70]}"
    return res


def att_run(mod, case, **kw):
    return run(mod.differential_attention, case["args"], {"causal": case["causal"]},
               coef=case["coef"], cot=case["cot"], names=ATT_NAMES, **kw)


def lam_run(mod, case, **kw):
    kwargs = {} if case["init"] is None else {"lambda_init": case["init"]}
    return run(mod.differential_lambda, case["args"], kwargs, cot=case["cot"], names=LAM_NAMES, **kw)


# ====================================================================== tiers
def tier1(mod, which):
    """Contract checks -> {check: passed}."""
    if which == ATT:
        case, go, mixed = ATT_CASES["A"], att_run, MIXED["att"]
        more = [ATT_CASES[k] for k in ("P", "S", "R", "M")]
    else:
        case, go, mixed = LAM_CASES["a"], lam_run, MIXED["lam"]
        more = [LAM_CASES["k"]]
    shape = np.shape(case["want"])
    r64 = go(mod, case, dtype=torch.float64, rg=False)
    r32 = go(mod, case, dtype=torch.float32, rg=False)
    rng = go(mod, case, dtype=torch.float64, rg=False, no_grad=True)
    rgr = go(mod, case, dtype=torch.float64, rg=True, coef_kind="tensor")
    rst = go(mod, case, dtype=torch.float64, rg=False, strided=True)
    rmx = go(mod, case, dtype=torch.float64, rg=False, strided=mixed)
    rmore = [(c, go(mod, c, dtype=torch.float64, rg=False)) for c in more]
    # a caller may evaluate under torch.inference_mode() and train afterwards: nothing kept from the first call may break the second
    fresh = ATT_CASES["I"] if which == ATT else LAM_CASES["a"]
    go(mod, fresh, dtype=torch.float64, rg=False, inference=True)
    after = go(mod, fresh, dtype=torch.float64, rg=True, coef_kind="tensor")
    called = r64["exc"] is None

    def same_as_plain(r):
        return (r["exc"] is None and r["shape"] == shape
                and (r64["out"] is None or r["out"] is None or self_consistent(r["out"], r64["out"])))

    return {
        "type": called and r64["tensor"] and (rng["exc"] is not None or rng["tensor"]),
        "shape": called and r64["shape"] == shape
        and all(r["exc"] is not None or r["shape"] == np.shape(c["want"]) for c, r in rmore),
        "dtype": r64["dtype"] == torch.float64 and r32["dtype"] == torch.float32,
        "mutation": called and not r64["mutated"] and not r32["mutated"] and not rng["mutated"],
        "graph": rgr["exc"] is None and rgr["requires_grad"] and after["exc"] is None and after["requires_grad"],
        "strided": same_as_plain(rst) and same_as_plain(rmx),
    }


# variants of a forward call: name -> keyword arguments of att_run / lam_run (dtype float64 unless named f32)
VARIANTS = {
    "f64": {},
    "f64t": {"coef_kind": "tensor"},
    "f64s": {"strided": True},
    "f64-no_grad": {"rg": True, "no_grad": True},
    "f64-inference": {"inference": True},
    "f64-default-causal": {"omit_causal": True},
    "f64-train": {"rg": True},
    "f64-kw": {"keywords": True},
    "f64-pos": {"positional": True},
    "f64-recall": {"recall": True},
    "f64-default-again": {},
}


def forward_variant(mod, which, key, variant, dtype=torch.float64):
    """Run one named forward variant; return (output or None, wanted)."""
    if which == ATT:
        c, go, recall_in, recall_want = ALL_ATT[key], att_run, RECALL["att"], RECALL["att_want"]
    else:
        c, go, recall_in, recall_want = LAM_CASES[key], lam_run, RECALL["lam"], RECALL["lam_want"]
    kw = dict(VARIANTS[variant])
    rg = kw.pop("rg", False)
    want = c["want"]
    if kw.pop("recall", False):
        kw["mutate_then_recall"] = recall_in
        want = recall_want
    return go(mod, c, dtype=dtype, rg=rg, **kw)["out"], want


def tier2(mod, which):
    """Forward values -> {case/variant: passed}."""
    res = {}

    def check(key, variant, tol=TOL64, dtype=torch.float64, name=None):
        out, want = forward_variant(mod, which, key, variant, dtype)
        res[name or f"{key}/{variant}"] = close(out, want, tol)

    if which == ATT:
        for key in ATT_CASES:
            check(key, "f64")
            check(key, "f64t")
        for key in ("A", "B", "T", "W", "M", "X"):
            check(key, "f64", TOL32, torch.float32, name=f"{key}/f32")
        for key in ("A", "V"):
            check(key, "f64s")
        for key in ATT_LARGE:
            check(key, "f64", TOL_LARGE, torch.float32, name=f"{key}/f32")
        check("A", "f64-default-causal")
        check("A", "f64-no_grad")
        check("T", "f64-no_grad")
        check("B", "f64-inference")
        check("D", "f64-recall")
        for key in ("A", "W", "T"):
            check(key, "f64-train")
        check("A", "f64-kw")
        check("B", "f64-kw")
        check("B", "f64-pos")
        check("C", "f64-pos")
    else:
        for key in LAM_CASES:
            check(key, "f64")
            check(key, "f64", TOL32, torch.float32, name=f"{key}/f32")
        check("e", "f64s")
        check("b", "f64-no_grad")
        check("c", "f64-inference")
        check("d", "f64-recall")
        check("a", "f64-default-again")   # the default lambda_init again, after calls that passed other values
        for key in ("a", "g"):
            check(key, "f64-train")
        check("b", "f64-kw")
        check("a", "f64-kw")
        check("b", "f64-pos")
    return res


def _grad_row(names, trainable, grads, wanted):
    wrong, none = set(), set()
    for n, g, w in zip(names, grads, wanted):
        if n not in trainable:
            continue
        if g is None:
            if np.all(np.asarray(w) == 0):
                continue          # None is PyTorch's zero gradient
            none.add(n)
            wrong.add(n)
        elif not close(g, w, TOL_GRAD):
            wrong.add(n)
    return wrong, none


def tier3(mod, which, strided=False):
    """Gradients -> {case: {"wrong": names, "none": names, "exc": text or None}}."""
    res = {}
    if which == ATT:
        cases, go, names, extra = {**ATT_CASES, **ATT_LARGE_GRAD}, att_run, ATT_NAMES, {"coef_kind": "tensor"}
        frozen_runs, ikey = FROZEN["att"], "A"
    else:
        cases, go, names, extra = LAM_CASES, lam_run, LAM_NAMES, {}
        frozen_runs, ikey = FROZEN["lam"], "b"
    runs = [(key, c, (), None) for key, c in cases.items() if not c.get("forward_only")]
    runs += [(f"{fk}-frozen{list(idx)}", cases[fk], idx, None) for fk, idx in frozen_runs]
    runs += [(f"{ikey}-interleaved", cases[ikey], (), INTERLEAVE["att" if which == ATT else "lam"])]
    for key, c, frozen, inter in runs:
        if strided and (inter is not None or key in ("X", "Y", "M")):
            continue
        r = go(mod, c, dtype=torch.float64, rg=True, strided=strided, frozen=frozen, interleave=inter, **extra)
        trainable = {n for i, n in enumerate(names) if i not in frozen}
        if r["grads"] is None:
            if r["exc"] is None and r["bexc"] is None and r["tensor"] and not r["requires_grad"]:
                # the output left the graph: no trainable input gets a gradient
                res[key] = {"wrong": set(trainable), "none": set(trainable), "exc": None}
                continue
            why = r["exc"] or r["bexc"] or "no gradients"
            res[key] = {"wrong": set(names), "none": set(), "exc": why}
            continue
        wrong, none = _grad_row(names, trainable, r["grads"], c["grads"])
        res[key] = {"wrong": wrong, "none": none, "exc": None}
    return res


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
        e = ATT_CASES["E"]  # coefficient exactly 1
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
    for tag, strided in (("grad", False), ("grad-strided", True)):
        for key, r in tier3(mod, which, strided=strided).items():
            if r["wrong"] or r["exc"]:
                fails.append(f"{tag}:{key}:{sorted(r['wrong'])}{' ' + r['exc'] if r['exc'] else ''}")
    fails += [k for k, ok in extras(mod, which).items() if not ok]
    return fails


# ====================================================================== one-bug check
# For every wrong file, the minimal edit that removes its bug: (old text, new text) pairs, each old text
# must occur in the file and every occurrence is replaced. With the edit applied in memory the file has to
# pass everything a correct file passes, which shows that the labelled bug is the only one.
FIXES = {
    "att_backward_delta_from_total_output": [
        ("lses[0], lses[1], outs[1], out)", "lses[0], lses[1], outs[1], outs[0])"),
        ("        delta = (grad * out).sum(dim=-1, keepdim=True)\n"
         "        for b, (q, k, lse, w) in enumerate(((q1, k1, lse1, 1.0), (q2, k2, lse2, -coef))):\n",
         "        for b, (q, k, lse, w, o) in enumerate(((q1, k1, lse1, 1.0, out), (q2, k2, lse2, -coef, o2))):\n"
         "            delta = (grad * o).sum(dim=-1, keepdim=True)\n"),
    ],
    "att_backward_grads_of_trainable_packed": [
        ("        return (*grads, *([None] * (7 - len(grads))))",
         "        it = iter(grads)\n        return (*[next(it) if x.requires_grad else None for x in inputs], None)"),
    ],
    "att_backward_lse_before_mask": [
        ("lses.append(torch.logsumexp(s, dim=-1, keepdim=True))",
         "lses.append(torch.logsumexp(_masked(s, causal), dim=-1, keepdim=True))"),
    ],
    "att_backward_softmax_saved_logits": [("ctx.save_for_backward(scores)", "ctx.save_for_backward(probs)")],
    "att_branches_stacked_last_axis": [("torch.softmax(logits, dim=-1).unbind(dim=-1)", "torch.softmax(logits, dim=-2).unbind(dim=-1)")],
    "att_class_scope_tile_offsets": [("[j * KEY for j in range(QUERY // KEY)]", "list(range(0, QUERY, KEY))")],
    "att_coef_detach_clone": [("coefficient.detach().clone().to(", "coefficient.to(")],
    "att_contiguity_checked_on_q1_only": [("if q1.is_contiguous():", "if all(x.is_contiguous() for x in tensors):")],
    "att_denominator_sum_float64": [("keepdim=True, dtype=torch.float64)", "keepdim=True)")],
    "att_eval_scratch_shared_by_branches": [("a2 = _map_in_place(buf, q2", "a2 = _map_in_place(torch.empty_like(buf), q2")],
    "att_key_loop_steps_by_query_tile": [("for ks in range(0, stop, _Q_TILE):", "for ks in range(0, stop, _K_TILE):")],
    "att_lerp_read_as_axpy": [("torch.lerp(a1, a2, -lam)", "torch.lerp(a1, a1 - a2, lam)")],
    "att_mask_inside_no_grad_block": [("            s = s.masked_fill(future,", "        s = s.masked_fill(future,")],
    "att_max_indices_as_shift": [("keepdim=True)[1]", "keepdim=True)[0]")],
    "att_meshgrid_xy_indexing": [('indexing="xy"', 'indexing="ij"')],
    "att_ones_column_wrong_slice": [("both[..., :-1] / both[..., :1]", "both[..., 1:] / both[..., :1]")],
    "att_online_numerator_unmasked": [("torch.exp(raw - m_new)", "torch.exp(s - m_new)")],
    "att_qtile_offset_from_tile_length": [("start = i * n", "start = i * _TILE")],
    "att_query_tiles_cat_wrong_axis": [("torch.cat(parts, dim=1)", "torch.cat(parts, dim=2)")],
    "att_reverse_key_tiles_unguarded": [
        ("            p = torch.exp(s - new_max)\n            decay = torch.exp(run_max - new_max)\n",
         "            shift = torch.where(torch.isfinite(new_max), new_max, torch.zeros_like(new_max))\n"
         "            p = torch.exp(s - shift)\n            decay = torch.exp(run_max - shift)\n"),
    ],
    "att_rsub_operand_order": [("torch.rsub(a1, coefficient * a2)", "torch.sub(a1, coefficient * a2)")],
    "att_running_stats_shared_by_branches": [
        ("    for q, k in ((q1, k1), (q2, k2)):\n        acc = value.new_zeros(value.shape)\n",
         "    for q, k in ((q1, k1), (q2, k2)):\n        m = q1.new_full((*q1.shape[:-1], 1), float(\"-inf\"))\n"
         "        l = torch.zeros_like(m)\n        acc = value.new_zeros(value.shape)\n"),
    ],
    "att_scale_model_width": [("scale = d_model ** -0.5", "scale = head_dim ** -0.5")],
    "att_softmax_applied_twice": [
        ("torch.softmax(_scores(q1, k1, causal), dim=-1)", "_scores(q1, k1, causal)"),
        ("torch.softmax(_scores(q2, k2, causal), dim=-1)", "_scores(q2, k2, causal)"),
    ],
    "att_zero_value_rows_as_padding": [
        ("hidden = (value == 0).all(dim=-1).unsqueeze(-2)", "hidden = torch.zeros(1, t, dtype=torch.bool, device=q1.device)"),
    ],
    "lam_backward_saves_needed_only": [("ctx.save_for_backward(e1, e2, *keep)", "ctx.save_for_backward(e1, e2, k1, q1, k2, q2)")],
    "lam_backward_stashed_dot_exp_inplace": [("a.exp_()", "a.exp()"), ("b.exp_()", "b.exp()")],
    "lam_function_output_default_dtype": [("torch.tensor(e1 - e2 + lambda_init, device=q1.device)", "q1.new_tensor(e1 - e2 + lambda_init)")],
    "lam_item_without_grad": [("return lam.item()", "return lam")],
    "lam_linear_keeps_feature_axis": [("a.exp() - b.exp() + lambda_init", "a.exp().squeeze(0) - b.exp().squeeze(0) + lambda_init")],
    "lam_paper_parameter_names": [("lambda_q1", "q1"), ("lambda_k1", "k1"), ("lambda_q2", "q2"), ("lambda_k2", "k2")],
    "lam_sign_factored_tie": [
        ("torch.sign(gap) * torch.exp(torch.maximum(a, b)) * -torch.expm1(-gap.abs())", "torch.exp(a) - torch.exp(b)"),
    ],
    "lam_squeeze_before_matmul": [("    q1, k1, q2, k2 = (v.squeeze() for v in (q1, k1, q2, k2))\n", "")],
}


def fixed_module(path: Path, pairs):
    """The file with its fix applied, executed as a fresh module (None, reason) if the fix does not apply."""
    text = path.read_text()
    for old, new in pairs:
        if old not in text:
            return None, f"fix text not found: {old[:40]!r}"
        text = text.replace(old, new)
    mod = types.ModuleType(f"cold_corpus_fixed_{path.stem}")
    mod.__file__ = str(path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exec(compile(text, str(path), "exec"), mod.__dict__)
    except BaseException as exc:  # noqa: BLE001
        return None, f"fixed file does not load: {type(exc).__name__}: {exc}"
    return mod, None


def one_bug_check(key):
    """(ok, note): with its fix applied the wrong file passes everything a correct file passes."""
    stem = key.split("/")[-1]
    if stem not in FIXES:
        return False, "no fix recorded"
    mod, err = fixed_module(HERE / (key + ".py"), FIXES[stem])
    if mod is None:
        return False, err
    fails = failures_of_correct_function(mod, LAM) + failures_of_correct_function(mod, ATT)
    return not fails, ("the fix makes it correct" if not fails else "still wrong after the fix: " + ", ".join(fails[:3]))


# ====================================================================== confirming a label
def schema_errors(lab):
    errs = []
    if not isinstance(lab.get("correct"), bool):
        return ["'correct' must be a bool"]
    if lab["correct"]:
        return [] if set(lab) == {"correct"} else ["a correct label has only 'correct'"]
    if set(lab) != {"correct", "function", "tier", "component", "bug", "names"}:
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
    if not isinstance(lab.get("bug"), str) or not lab["bug"].strip():
        errs.append("missing bug sentence")
    names = lab.get("names")
    if not (isinstance(names, list) and 3 <= len(names) <= 5
            and all(isinstance(n, str) and n and n == n.lower() for n in names)):
        errs.append("names must be 3-5 lowercase strings")
    return errs


def precision_only(mod, which, failed):
    """Re-run the failing float64 cases: they must match the oracle to float32 accuracy."""
    for k in failed:
        key, variant = k.split("/")
        out, want = forward_variant(mod, which, key, variant)
        if not close(out, want, TOL32):
            return False
    return True


def confirm_mask(mod, failed):
    """A mask bug is wrong in one causal mode only, has the flag exactly inverted, or only
    breaks the cases whose value tensor has all-zero rows (a mask derived from the values)."""
    keys = {k.split("/")[0] for k in failed}
    modes = {ALL_ATT[k]["causal"] for k in keys}
    if len(modes) == 1:
        return True, "only causal=%s wrong" % modes.pop()
    if keys <= ZERO_VALUE_CASES:
        return True, "only the cases with all-zero value rows are wrong"
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
        return not t1[comp], f"T1 fails {t1_failed}"
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
            ordinary64 = [k for k in t2_failed if not k.startswith("L") and "/f32" not in k]
            large = [k for k in t2_failed if k.startswith("L")]
            ok = not ordinary64 and bool(large)
            return ok, note + ("; only large-logit and float32 cases fail" if ok else
                               "; float64 ordinary inputs fail too" if ordinary64 else "; no large-logit case fails")
        if comp == "dtype":
            only64 = all("/f64" in k for k in t2_failed)
            near = only64 and precision_only(mod, fn, t2_failed)
            return near, note + ("; only float64 fails, within float32 accuracy" if near else
                                 "; not a pure precision loss")
        if comp == "mask" and fn == ATT:
            ok, why = confirm_mask(mod, t2_failed)
            return ok, note + "; " + why
        return True, note
    if t2_failed:
        return False, f"T3 label but forward differs on {t2_failed[:3]}"

    t3 = tier3(mod, fn)
    t3.update({k + "-strided": r for k, r in tier3(mod, fn, strided=True).items()})
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
        ok = all(k.startswith("G") for k in bad) and not excs
        return ok, note + ("; only the large-logit gradient cases" if ok else "; ordinary gradients wrong too")
    if comp == "backward":
        if excs:
            return True, "forward ok; backward raises " + excs[0][:50]
        return not none, note + ("; every input gets a gradient" if not none else f"; missing {none}")
    return True, note


def main() -> int:
    start = time.time()
    torch.set_num_threads(1)
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
        ok, obs = confirm(key, lab)
        if not lab["correct"]:
            fixed_ok, fixed_note = one_bug_check(key)
            ok = ok and fixed_ok
            obs = f"{obs}; {fixed_note}" if not fixed_ok else obs + "; fix ok"
        rows.append((key, tag, ok, obs))

    width = max(len(r[0]) for r in rows) if rows else 10
    print(f"{'file':<{width}}  {'label':<15}  ok   observed")
    for key, tag, ok, obs in rows:
        print(f"{key:<{width}}  {tag:<15}  {'yes' if ok else 'NO ':<3}  {obs}")
    for p in problems:
        print("PROBLEM", p)

    shown = [k for k, *_ in rows]
    wrong = [labels[k] for k in shown if not labels[k].get("correct")]
    n_ok = sum(1 for r in rows if r[2])
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
