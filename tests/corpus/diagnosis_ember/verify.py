"""Confirm every label of the ember corpus against an independent float64 oracle.

Usage (from the project root):  python tests/corpus/diagnosis_ember/verify.py [stem ...]

Adapted from the verify.py of the frost corpus: the same label schema, the
same component vocabulary and the same per-tier idea (every tier before the
labelled one passes, the labelled tier fails in the labelled way), but with an
oracle of its own and with an explicit statement of each bug's "where":

* The oracle is torch autograd in float64 on fresh contiguous copies of the
  inputs, applied to a plain formula (explicit -inf causal mask through
  torch.where, exp of the logits minus the detached row maximum over the row
  sum, einsum products). It is checked at start-up against central finite
  differences (torch.autograd.gradcheck). float32 runs are compared with the
  oracle of the float32-rounded inputs.
* Every file is run on one battery of inputs (RUNS_ATT / RUNS_LAM): small and
  long sequences (up to T = 1100 with gradients), every subset of trainable
  inputs on two cases, strided layouts (permuted and sliced, token-major,
  expanded over the heads), float32 and float64, Python / int / float32 /
  tensor coefficients, no_grad and inference_mode, large logits.
* Each wrong file has a WHERE predicate (the inputs on which its label says
  the bug may show) and WITNESS runs. The label is confirmed when the other
  function passes the whole battery, the blamed function passes the contract
  checks, every battery run outside WHERE agrees with the oracle (forward and
  every gradient), and the witness runs show the labelled failure:
    T2  a forward value differs (mask: all differing runs share one causal mode);
    T3  every forward value of the battery matches, and a witness gradient
        differs; graph: no exception anywhere; backward: every trainable input
        gets a gradient in the witness runs (or the backward raises);
        stability: a witness gradient is not finite; dtype: the witness runs
        are float64 and their gradients agree to float32 accuracy only.
* A correct file passes everything, witness runs of all the wrong files
  included.

Prints one row per file, a summary, and exits 1 if any label is not confirmed.
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import json
import math
import sys
import time
import warnings
import zlib
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
ATT_NAMES = ("q1", "k1", "q2", "k2", "value", "coefficient")
LAM_NAMES = ("q1", "k1", "q2", "k2")
TOL = {"f64": 1e-9, "f32": 1e-4, "f32large": 2e-3}
TOL_GRAD = {"f64": 1e-9, "f32": 2e-3}


# ====================================================================== oracle
def _oracle_att_torch(q1, k1, q2, k2, v, c, causal):
    t, d = q1.shape[-2], q1.shape[-1]
    hidden = torch.arange(t)[None, :] > torch.arange(t)[:, None]

    def amap(q, k):
        s = torch.einsum("bhid,bhjd->bhij", q, k) / math.sqrt(d)
        if causal:
            s = torch.where(hidden, torch.tensor(float("-inf"), dtype=s.dtype), s)
        s = s - s.amax(dim=-1, keepdim=True).detach()
        e = torch.exp(s)
        return e / e.sum(dim=-1, keepdim=True)

    return torch.einsum("bhij,bhje->bhie", amap(q1, k1) - c * amap(q2, k2), v)


def oracle_att(arrays, coef, causal, cot):
    leaves = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in arrays]
    c = torch.tensor(float(coef), dtype=torch.float64, requires_grad=True)
    out = _oracle_att_torch(*leaves, c, causal)
    out.backward(torch.tensor(cot, dtype=torch.float64))
    return out.detach().numpy(), [x.grad.numpy() for x in leaves] + [c.grad.numpy()]


def oracle_lam(arrays, init, cot):
    leaves = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in arrays]
    q1, k1, q2, k2 = leaves
    out = torch.exp((q1 * k1).sum()) - torch.exp((q2 * k2).sum()) + init
    out.backward(torch.tensor(float(cot), dtype=torch.float64))
    return out.detach().numpy(), [x.grad.numpy() for x in leaves]


def self_test_oracle():
    rng = np.random.default_rng(7)
    for causal in (True, False):
        xs = [torch.tensor(rng.standard_normal((1, 2, 4, 3)), requires_grad=True) for _ in range(4)]
        v = torch.tensor(rng.standard_normal((1, 2, 4, 6)), requires_grad=True)
        c = torch.tensor(0.37, dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(lambda *a: _oracle_att_torch(*a, causal), (*xs, v, c))
    xs = [torch.tensor(rng.standard_normal(3) * 0.5, requires_grad=True) for _ in range(4)]
    assert torch.autograd.gradcheck(
        lambda a, b, c, d: torch.exp((a * b).sum()) - torch.exp((c * d).sum()) + 0.2, tuple(xs))


# ====================================================================== cases
def _rng(name):
    return np.random.default_rng(zlib.crc32(name.encode()))


ATT_CASES: dict = {}
LAM_CASES: dict = {}


def att_case(name, b, h, t, d, coef, causal, scale=1.0, cot_scale=1.0, head_constant=False, large=False,
             negative=False):
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
    cot = rng.standard_normal((b, h, t, 2 * d)) * cot_scale
    ATT_CASES[name] = dict(name=name, b=b, h=h, t=t, d=d, coef=coef, causal=causal, arrays=arrs, cot=cot,
                           large=large, head_constant=head_constant)


def lam_case(name, vectors, init=None, cot=0.7):
    LAM_CASES[name] = dict(name=name, arrays=[np.asarray(v, dtype=np.float64) for v in vectors], init=init,
                           cot=cot, large=False)


att_case("A", 2, 2, 5, 3, 0.37, True)
att_case("B", 1, 3, 6, 4, -0.55, False)
att_case("C", 2, 1, 7, 2, 1.4, True)
att_case("E", 1, 2, 5, 3, 1, True)                      # integer coefficient
att_case("O1", 2, 3, 7, 1, 0.45, True)                  # D = 1
att_case("D64", 1, 2, 6, 64, -0.2, True)
att_case("N64", 1, 1, 9, 64, 0.3, False)
att_case("R1", 2, 1, 1, 2, -0.2, False)                 # T = 1
att_case("S1", 1, 1, 1, 3, 0.6, True)
att_case("Z", 1, 2, 6, 3, 0.0, True)                    # coefficient exactly 0
att_case("MX", 2, 2, 5, 3, 0.375, True)                 # exact in float32
att_case("BH40", 2, 20, 5, 3, 0.35, True)
att_case("W40", 1, 2, 6, 40, 0.3, False)
att_case("H", 2, 3, 5, 3, 0.4, True, head_constant=True)
att_case("Hn", 1, 2, 6, 2, -0.3, False, head_constant=True)
att_case("SMALLCOT", 1, 2, 6, 3, 0.5, True, cot_scale=1e-3)
att_case("SMALLCOTn", 2, 1, 5, 2, -0.4, False, cot_scale=1e-3)
att_case("BH1", 1, 1, 9, 4, 0.65, True)                 # a single batch-head
att_case("BH1n", 1, 1, 8, 3, -0.45, False)
att_case("K128", 1, 1, 128, 4, 0.5, True)               # exactly one block of 128
att_case("K130", 1, 1, 130, 8, 0.5, True)
att_case("K130n", 1, 2, 130, 3, -0.6, False)
att_case("S200", 1, 2, 200, 4, -0.35, False)
att_case("C256", 1, 1, 256, 3, 0.3, True)               # two full blocks of 128
att_case("C300", 1, 1, 300, 2, 0.45, True)
att_case("N300", 1, 2, 300, 3, -0.25, False)
att_case("C511", 1, 1, 511, 2, 0.4, True)
att_case("C600", 1, 1, 600, 2, 0.55, True)
att_case("N600", 1, 1, 600, 3, -0.4, False)
att_case("Z600", 1, 1, 600, 2, 0.0, True)
att_case("C1100", 1, 1, 1100, 2, 0.45, True)
att_case("N1030", 1, 1, 1030, 2, -0.3, False)
att_case("L1", 1, 2, 6, 4, 0.5, True, scale=20.0, large=True)
att_case("L2", 1, 2, 40, 4, 0.6, False, scale=20.0, large=True)
att_case("L3", 2, 1, 9, 4, -0.3, True, scale=15.0, large=True, negative=True)
att_case("L32g", 1, 2, 8, 4, 0.5, True, scale=12.0, large=True)       # float32 gradients, logits of hundreds
att_case("G1", 1, 2, 12, 4, 0.5, True, scale=30.0, large=True)        # float64 gradients, logits of thousands
att_case("G2", 1, 1, 10, 4, -0.6, False, scale=30.0, large=True)

lam_case("a", [_rng("la").standard_normal(6) * 0.35 for _ in range(4)])
lam_case("b", [_rng("lb").standard_normal(3) * 0.5 for _ in range(4)], 0.65)
lam_case("d", [[-0.3, 0.2], [0.6, -0.4], [0.9, 0.5], [0.8, 0.7]], 0.35)          # negative lambda
lam_case("e", [_rng("le").standard_normal(64) * 0.15 for _ in range(4)], 0.8)    # D_lambda = 64
lam_case("k", [[1.0], [-0.7], [0.4], [0.9]], 0.2)                                # D_lambda = 1
lam_case("w", [_rng("lw").standard_normal(40) * 0.2 for _ in range(4)], -0.3)
lam_case("g", [[2.5, 2.0, 1.5], [2.0, 2.5, 1.0], [1.0, 0.5, 1.0], [1.0, 2.0, 1.0]], 0.5)
lam_case("tie", [[1.0, 2.0], [0.5, 0.25], [2.0, 1.0], [0.25, 0.5]], 0.2)         # equal dot products
lam_case("b3", LAM_CASES["b"]["arrays"], 0.65, cot=3.0)                          # incoming gradient 3
lam_case("a25", LAM_CASES["a"]["arrays"], None, cot=-2.5)
lam_case("gap32", [[5.0, 5.0], [5.0, 5.0], [-4.0, -4.0], [5.0, 5.0]], 0.2)      # dots 50 and -40
lam_case("gap32r", [[-5.0, -5.0], [5.0, 5.0], [5.0, 4.0], [5.0, 5.0]], 0.2)     # dots -50 and 45
lam_case("gap64", [[15.0, 10.0], [12.0, 12.0], [-21.0, -21.0], [10.0, 10.0]], 0.2)  # dots 300 and -420
LAM_CASES["gap32"]["large"] = LAM_CASES["gap32r"]["large"] = LAM_CASES["gap64"]["large"] = True


def R(case, **kw):
    v = dict(case=case, dtype="f64", layout="contig", frozen=(), coef_kind="tensor", mode=None, grads=True)
    v.update(kw)
    return v


def _att_runs():
    runs = []
    small = ["A", "B", "C", "O1", "D64", "N64", "R1", "S1", "Z", "BH40", "W40", "SMALLCOT", "SMALLCOTn", "BH1",
             "BH1n"]
    runs += [R(c) for c in small]
    runs += [R("A", coef_kind="python"), R("B", coef_kind="python"), R("BH40", coef_kind="python"),
             R("E", coef_kind="python"), R("E", coef_kind="int"), R("E", coef_kind="const"),
             R("MX", coef_kind="f32"), R("MX", coef_kind="f32", frozen=("coefficient",))]
    runs += [R(c, dtype="f32") for c in ("A", "B", "O1", "BH40", "C300", "N300")]
    runs += [R("A", layout="perm"), R("B", layout="perm"), R("N300", layout="perm"), R("C300", layout="perm"),
             R("A", layout="tokmajor"), R("K130n", layout="tokmajor"), R("H", layout="expand"),
             R("Hn", layout="expand"), R("A", layout="perm", dtype="f32")]
    for case in ("A", "B"):
        for n in range(7):
            for keep in itertools.combinations(ATT_NAMES, n):
                runs.append(R(case, frozen=tuple(x for x in ATT_NAMES if x not in keep)))
    for case in ("C300", "N300", "C600"):
        runs.append(R(case, frozen=("q1", "k1")))
        runs.append(R(case, frozen=("value", "coefficient")))
    runs += [R("A", mode="no_grad"), R("B", mode="inference"), R("C1100", mode="no_grad"),
             R("N300", mode="inference"), R("C300", mode="no_grad", coef_kind="python")]
    runs += [R(c) for c in ("K128", "K130", "K130n", "S200", "C256", "C300", "N300", "C511", "C600", "N600", "Z600",
                            "C1100", "N1030")]
    runs += [R("C600", coef_kind="python"), R("N1030", dtype="f32"), R("C1100", dtype="f32", grads=False)]
    runs += [R(c, dtype="f32", grads=False) for c in ("L1", "L2", "L3")]
    runs += [R("L32g", dtype="f32"), R("G1"), R("G2")]
    return runs


def _lam_runs():
    runs = []
    for c in LAM_CASES:
        runs.append(R(c))
        if c != "gap64":
            runs.append(R(c, dtype="f32"))
    runs += [R("a", layout="perm"), R("e", layout="perm"), R("b", layout="perm", dtype="f32")]
    for case in ("b", "d"):
        for n in range(5):
            for keep in itertools.combinations(LAM_NAMES, n):
                runs.append(R(case, frozen=tuple(x for x in LAM_NAMES if x not in keep)))
    runs += [R("a", mode="no_grad"), R("b", mode="inference"), R("gap64", mode="no_grad")]
    return runs


RUNS_ATT = _att_runs()
RUNS_LAM = _lam_runs()


# ====================================================================== calling a file
def load(path: Path):
    try:
        spec = importlib.util.spec_from_file_location(f"ember_corpus_{path.parent.name}_{path.stem}", path)
        mod = importlib.util.module_from_spec(spec)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            spec.loader.exec_module(mod)
        return mod, None
    except BaseException as exc:  # noqa: BLE001
        return None, f"{type(exc).__name__}: {' '.join(str(exc).split())}"


TDT = {"f64": torch.float64, "f32": torch.float32}


def _rounded(arrays, dtype):
    if dtype == "f32":
        return [np.asarray(a, dtype=np.float32).astype(np.float64) for a in arrays]
    return [np.asarray(a, dtype=np.float64) for a in arrays]


def _make(x, dtype, layout, rg):
    """Return (view handed to the function, getter of its gradient as numpy in the oracle's shape)."""
    tdt = TDT[dtype]
    if layout == "contig" or (layout == "expand" and x.ndim != 4):
        base = torch.tensor(np.ascontiguousarray(x), dtype=tdt).requires_grad_(rg)
        return base, (lambda: None if base.grad is None else base.grad.double().numpy())
    if layout == "perm" and x.ndim == 4:          # storage [B, T, H, 2w], permuted, every second column
        b, h, t, w = x.shape
        full = np.zeros((b, t, h, 2 * w))
        full[..., 1::2] = x.transpose(0, 2, 1, 3)
        base = torch.tensor(full, dtype=tdt).requires_grad_(rg)
        return (base.permute(0, 2, 1, 3)[..., 1::2],
                lambda: None if base.grad is None else base.grad.permute(0, 2, 1, 3)[..., 1::2].double().numpy())
    if layout == "perm":                          # every third element of a longer vector
        full = np.zeros(3 * x.size)
        full[::3] = x
        base = torch.tensor(full, dtype=tdt).requires_grad_(rg)
        return base[::3], (lambda: None if base.grad is None else base.grad[::3].double().numpy())
    if layout == "tokmajor":                      # dense [B, T, H, w] storage seen as [B, H, T, w]
        base = torch.tensor(np.ascontiguousarray(x.transpose(0, 2, 1, 3)), dtype=tdt).requires_grad_(rg)
        return (base.permute(0, 2, 1, 3),
                lambda: None if base.grad is None else base.grad.permute(0, 2, 1, 3).double().numpy())
    if layout == "expand":                        # [B, 1, T, w] leaf expanded over the heads (stride 0)
        base = torch.tensor(np.ascontiguousarray(x[:, :1]), dtype=tdt).requires_grad_(rg)
        return base.expand(x.shape), (lambda: None if base.grad is None else base.grad.double().numpy())
    raise ValueError(layout)


def _snapshot(ts):
    return [(t.detach().clone(), t._version, t.dtype, t.requires_grad, tuple(t.shape), t.stride()) for t in ts]


def _changed(ts, snap):
    return any(t._version != ver or t.dtype != dt or t.requires_grad != rg or tuple(t.shape) != sh
               or t.stride() != st or not torch.equal(t.detach(), old)
               for t, (old, ver, dt, rg, sh, st) in zip(ts, snap))


ORACLE_CACHE: dict = {}


def oracle_for(which, run):
    key = (which, run["case"], run["dtype"], run["coef_kind"])
    if key not in ORACLE_CACHE:
        if which == ATT:
            c = ATT_CASES[run["case"]]
            arrays = _rounded(c["arrays"], run["dtype"])
            coef = float(np.float32(c["coef"])) if run["coef_kind"] == "f32" else c["coef"]
            out, grads = oracle_att(arrays, coef, c["causal"], c["cot"])
        else:
            c = LAM_CASES[run["case"]]
            arrays = _rounded(c["arrays"], run["dtype"])
            out, grads = oracle_lam(arrays, 0.2 if c["init"] is None else c["init"], c["cot"])
        ORACLE_CACHE[key] = (out, grads)
    out, grads = ORACLE_CACHE[key]
    if which == ATT and run["layout"] == "expand":
        grads = [g.sum(axis=1, keepdims=True) for g in grads[:5]] + [grads[5]]
    return out, grads


def call(mod, which, run):
    """Call the function once as `run` says and record what happened."""
    res = dict(exc=None, bexc=None, out=None, tensor=False, shape=None, dtype=None, inference=False,
               requires_grad=False, mutated=False, default_dtype_ok=True, grads=None)
    if which == ATT:
        c = ATT_CASES[run["case"]]
        names, n_arr = ATT_NAMES, 5
    else:
        c = LAM_CASES[run["case"]]
        names, n_arr = LAM_NAMES, 4
    arrays = _rounded(c["arrays"], run["dtype"])
    trainable = [run["grads"] and names[i] not in run["frozen"] for i in range(len(names))]
    made = [_make(a, run["dtype"], run["layout"], trainable[i]) for i, a in enumerate(arrays)]
    inputs = [m[0] for m in made]
    getters = [m[1] for m in made]
    args = list(inputs)
    kwargs = {}
    if which == ATT:
        kind = run["coef_kind"]
        if kind == "python":
            coef = c["coef"]
            getters.append(lambda: None)
        elif kind == "int":
            coef = torch.tensor(int(c["coef"]))
            inputs.append(coef)
            getters.append(lambda: None)
        else:
            dt = torch.float32 if kind == "f32" else TDT[run["dtype"]]
            coef = torch.tensor(float(c["coef"]), dtype=dt).requires_grad_(kind != "const" and trainable[5])
            inputs.append(coef)
            getters.append(lambda coef=coef: None if coef.grad is None else coef.grad.double().numpy())
        args.append(coef)
        kwargs["causal"] = c["causal"]
    elif c["init"] is not None:
        kwargs["lambda_init"] = c["init"]
    fn = getattr(mod, which)
    mode = {"no_grad": torch.no_grad, "inference": torch.inference_mode}.get(run["mode"], contextlib.nullcontext)
    snap = _snapshot(inputs)
    default_dtype = torch.get_default_dtype()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with mode():
                out = fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001
        res["exc"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:80]}"
        return res
    res["default_dtype_ok"] = torch.get_default_dtype() == default_dtype
    res["mutated"] = _changed(inputs, snap)
    if not isinstance(out, torch.Tensor):
        return res
    res.update(tensor=type(out) is torch.Tensor, shape=tuple(out.shape), dtype=out.dtype,
               inference=out.is_inference(), requires_grad=bool(out.requires_grad),
               out=out.detach().double().numpy().copy())
    if run["grads"] and run["mode"] is None and out.requires_grad:
        cot = c["cot"]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out.backward(torch.as_tensor(np.asarray(cot), dtype=out.dtype))
            res["grads"] = {}
            for i, name in enumerate(names if which == LAM else ATT_NAMES):
                if trainable[i] and not (which == ATT and i == 5 and run["coef_kind"] in ("python", "int", "const")):
                    res["grads"][name] = getters[i]()
        except Exception as exc:  # noqa: BLE001
            res["bexc"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:80]}"
        res["mutated"] = res["mutated"] or _changed(inputs, snap)
    return res


def close(got, want, tol):
    if got is None:
        return False
    got = np.asarray(got, dtype=np.float64)
    if got.shape != np.shape(want) or not np.all(np.isfinite(got)):
        return False
    return bool(np.all(np.abs(got - want) <= tol * (1.0 + np.abs(want))))


def judge(mod, which, run):
    """-> dict(fwd_ok, wrong (names), none (names), nonfinite (names), exc, res)."""
    res = call(mod, which, run)
    c = (ATT_CASES if which == ATT else LAM_CASES)[run["case"]]
    want, wgrads = oracle_for(which, run)
    ftol = TOL["f64"] if run["dtype"] == "f64" else (TOL["f32large"] if c["large"] else TOL["f32"])
    out = dict(res=res, exc=res["exc"] or res["bexc"], fwd_ok=res["exc"] is None and close(res["out"], want, ftol),
               wrong=set(), none=set(), nonfinite=set(), loose_ok=True)
    if res["grads"] is not None:
        names = ATT_NAMES if which == ATT else LAM_NAMES
        for name, g in res["grads"].items():
            w = wgrads[names.index(name)]
            gtol = 1e-6 if (name == "coefficient" and run["coef_kind"] == "f32") else TOL_GRAD[run["dtype"]]
            if g is None:
                if np.any(np.asarray(w) != 0):
                    out["none"].add(name)
                    out["wrong"].add(name)
            elif not close(g, w, gtol):
                out["wrong"].add(name)
                if not np.all(np.isfinite(g)):
                    out["nonfinite"].add(name)
                if not close(g, w, 1e-5):
                    out["loose_ok"] = False
    elif run["grads"] and run["mode"] is None and res["exc"] is None and not res["bexc"]:
        # trainable inputs but an output without a graph
        if any(n not in run["frozen"] for n in (ATT_NAMES if which == ATT else LAM_NAMES)):
            out["wrong"].add("<no graph>")
    return out


def run_ok(j):
    return j["fwd_ok"] and not j["wrong"] and not j["exc"]


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
    return "/".join(bits)


# ====================================================================== contract (T1)
def contract(mod, which):
    """-> {check: passed} for type, shape, dtype, mutation, graph, strided, default dtype."""
    if which == ATT:
        base, more, strided = "A", ["B", "R1", "O1", "C300"], [R("A", layout="perm"), R("A", layout="tokmajor"),
                                                              R("H", layout="expand")]
        want_shape = lambda c: tuple(ATT_CASES[c]["arrays"][4].shape)
    else:
        base, more, strided = "a", ["b", "k", "e"], [R("a", layout="perm")]
        want_shape = lambda c: ()
    r64 = call(mod, which, R(base, grads=False))
    r32 = call(mod, which, R(base, dtype="f32", grads=False))
    rng = call(mod, which, R(base, mode="no_grad"))
    rinf = call(mod, which, R(base, mode="inference", grads=False))
    rgr = call(mod, which, R(base))
    rafter = call(mod, which, R(base))            # a second call after an inference_mode call
    rmore = [(c, call(mod, which, R(c, grads=False))) for c in more]
    rstr = [(s, call(mod, which, dict(s, grads=False))) for s in strided]
    rstr32 = call(mod, which, R(base, layout="perm", dtype="f32", grads=False))
    allr = [r64, r32, rng, rinf, rgr, rafter, rstr32] + [r for _, r in rmore] + [r for _, r in rstr]
    return {
        "type": r64["exc"] is None and r64["tensor"] and (rng["exc"] is not None or not rng["inference"]),
        "shape": all(r["shape"] == want_shape(c) for c, r in [(base, r64)] + rmore),
        "dtype": r64["dtype"] == torch.float64 and r32["dtype"] == torch.float32
        and rstr32["dtype"] == torch.float32 and all(r["default_dtype_ok"] for r in allr),
        "mutation": not any(r["mutated"] for r in allr),
        "graph": rgr["exc"] is None and rgr["requires_grad"] and rafter["requires_grad"],
        "strided": all(r["exc"] is None and r["shape"] == want_shape(s["case"]) for s, r in rstr),
    }


# ====================================================================== where of each wrong file
def _a(run):
    return ATT_CASES[run["case"]]


def _trainable(run, name):
    return run["grads"] and run["mode"] is None and name not in run["frozen"]


def _coef_trainable(run):
    return _trainable(run, "coefficient") and run["coef_kind"] in ("tensor", "f32")


def _map_grad_norm_above_one(run):
    c = _a(run)
    dp = np.einsum("bhie,bhje->bhij", c["cot"], c["arrays"][4])
    n = np.linalg.norm(dp)
    return run["grads"] and (n > 0.999 or abs(c["coef"]) * n > 0.999)


def _lam_gap(run):
    c = LAM_CASES[run["case"]]
    a = float(np.dot(c["arrays"][0], c["arrays"][1]))
    b = float(np.dot(c["arrays"][2], c["arrays"][3]))
    return abs(a - b) > (88.0 if run["dtype"] == "f32" else 709.0)


WHERE = {
    "wrong/att_fn_key_block_backward_local_causal_positions": (
        lambda r: r["grads"] and _a(r)["causal"] and _a(r)["t"] > 128,
        [R("C300"), R("K130"), R("C600", frozen=("value", "coefficient"))]),
    "wrong/att_fn_query_block_backward_floor_count": (
        lambda r: r["grads"] and _a(r)["t"] > 128 and _a(r)["t"] % 128 != 0,
        [R("C300"), R("N300"), R("K130n")]),
    "wrong/att_fn_maps_on_ctx_signed_in_place_long": (
        lambda r: r["grads"] and _a(r)["t"] >= 512 and _a(r)["coef"] != 0,
        [R("C600"), R("N1030")]),
    "wrong/att_raw_exp_fast_path_where_nan_grad": (
        lambda r: r["grads"] and _a(r)["large"],
        [R("G1"), R("G2"), R("L32g", dtype="f32")]),
    "wrong/att_fn_head_loop_coefficient_grad_assigned": (
        lambda r: _coef_trainable(r) and _a(r)["b"] * _a(r)["h"] > 1,
        [R("A"), R("BH40"), R("MX", coef_kind="f32")]),
    "wrong/att_fn_backward_float32_accumulators": (
        lambda r: r["grads"] and r["dtype"] == "f64",
        [R("A"), R("C300")]),
    "wrong/att_frozen_first_branch_under_no_grad": (
        lambda r: _trainable(r, "value") and "q1" in r["frozen"] and "k1" in r["frozen"],
        [R("A", frozen=("q1", "k1")), R("C300", frozen=("q1", "k1"))]),
    "wrong/att_two_pass_long_rows_statistics_no_grad": (
        lambda r: r["grads"] and _a(r)["t"] >= 512,
        [R("C600"), R("N600"), R("C1100")]),
    "wrong/att_online_tiles_accumulator_rescaled_through_data": (
        lambda r: r["grads"] and _a(r)["t"] > 128,
        [R("C300"), R("N300"), R("N600", frozen=("q1", "k1", "q2", "k2"))]),
    "wrong/att_map_gradient_norm_clipped_by_hook": (
        _map_grad_norm_above_one,
        [R("A"), R("B")]),
    "wrong/att_float32_row_sums_in_float64_without_grad": (
        lambda r: r["grads"] and r["dtype"] == "f32",
        [R("A", dtype="f32"), R("N300", dtype="f32")]),
    "wrong/lam_gradient_clamp_hook": (
        lambda r: r["grads"] and abs(LAM_CASES[r["case"]]["cot"]) * 1.0 > 1.0,
        [R("b3"), R("a25")]),
    "wrong/lam_expm1_where_branches_nan_grad": (
        lambda r: r["grads"] and _lam_gap(r),
        [R("gap64"), R("gap32", dtype="f32"), R("gap32r", dtype="f32")]),
    "wrong/lam_fn_gradient_buffer_default_dtype": (
        lambda r: r["grads"] and r["dtype"] == "f64",
        [R("a"), R("e")]),
    "wrong/att_query_blocks_full_last_block_rows_misaligned": (
        lambda r: _a(r)["t"] > 128 and _a(r)["t"] % 128 != 0,
        [R("C300", grads=False), R("N300", grads=False), R("K130", grads=False)]),
    "wrong/att_sdpa_float_keep_mask_added": (
        lambda r: _a(r)["causal"] and _a(r)["t"] > 1,
        [R("A", grads=False), R("C300", grads=False)]),
}
ALL_WITNESS_ATT = [w for k, (_, ws) in WHERE.items() if "/att_" in k for w in ws]
ALL_WITNESS_LAM = [w for k, (_, ws) in WHERE.items() if "/lam_" in k for w in ws]


def battery(which):
    return (RUNS_ATT + ALL_WITNESS_ATT) if which == ATT else (RUNS_LAM + ALL_WITNESS_LAM)


def failures_of_correct_function(mod, which):
    fails = [f"contract:{k}" for k, ok in contract(mod, which).items() if not ok]
    for run in battery(which):
        j = judge(mod, which, run)
        if not run_ok(j):
            fails.append(f"{describe(run)}:{'fwd' if not j['fwd_ok'] else sorted(j['wrong'])}"
                         + (f" {j['exc'][:50]}" if j["exc"] else ""))
    return fails


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
    if lab.get("tier") == "T1" and lab.get("component") not in T1_COMPONENTS:
        errs.append("T1 label needs a contract component")
    if lab.get("tier") != "T1" and lab.get("component") in T1_COMPONENTS - {"graph", "dtype"}:
        errs.append("contract component on a T2/T3 label")
    for field in ("bug", "where"):
        if not isinstance(lab.get(field), str) or not lab[field].strip():
            errs.append(f"missing {field} sentence")
    names = lab.get("names")
    if not (isinstance(names, list) and 3 <= len(names) <= 5
            and all(isinstance(n, str) and n and n == n.lower() for n in names)):
        errs.append("names must be 3-5 lowercase strings")
    return errs


def confirm(key, lab):
    mod, err = load(HERE / (key + ".py"))
    if mod is None:
        return False, "does not load: " + err
    if lab["correct"]:
        fails = failures_of_correct_function(mod, LAM) + failures_of_correct_function(mod, ATT)
        n = len(battery(LAM)) + len(battery(ATT))
        return not fails, (f"contract and all {n} runs agree" if not fails else "fails: " + "; ".join(fails[:4]))
    fn, tier, comp = lab["function"], lab["tier"], lab["component"]
    if key not in WHERE:
        return False, "no WHERE entry"
    where, witness = WHERE[key]
    other = ATT if fn == LAM else LAM
    other_fails = failures_of_correct_function(mod, other)
    if other_fails:
        return False, f"{other} should be correct but fails: " + "; ".join(other_fails[:3])
    t1 = contract(mod, fn)
    if tier == "T1":
        return not t1.get(comp, True), f"contract {sorted(k for k, ok in t1.items() if not ok)}"
    if not all(t1.values()):
        return False, f"contract fails {sorted(k for k, ok in t1.items() if not ok)}"
    # outside the where: everything agrees
    inside, outside_bad, fwd_bad = [], [], []
    for run in battery(fn):
        j = judge(mod, fn, run)
        if not j["fwd_ok"]:
            fwd_bad.append((run, j))
        if where(run):
            inside.append((run, j))
        elif not run_ok(j):
            outside_bad.append(f"{describe(run)}:{'fwd' if not j['fwd_ok'] else sorted(j['wrong'])}"
                               + (f" {j['exc'][:40]}" if j["exc"] else ""))
    if outside_bad:
        return False, f"differs outside its where: {outside_bad[:3]} ({len(outside_bad)})"
    wit = [(run, judge(mod, fn, run)) for run in witness]
    not_inside = [describe(r) for r, _ in wit if not where(r)]
    if not_inside:
        return False, f"witness outside its own where: {not_inside}"
    n_in_bad = sum(1 for _, j in inside if not run_ok(j))
    base_note = f"agrees on {len(battery(fn)) - len(inside)} runs outside; {n_in_bad}/{len(inside)} inside differ"
    if tier == "T2":
        shown = [r for r, j in wit if not j["fwd_ok"]]
        if not shown:
            return False, "no witness forward value differs"
        note = f"witness forward differs on {[describe(r) for r in shown]}; {base_note}"
        if comp == "mask" and fn == ATT:
            modes = {_a(r)["causal"] for r, _ in fwd_bad}
            return len(modes) == 1, note + f"; differing causal modes {sorted(modes)}"
        return True, note
    # T3
    if fwd_bad:
        return False, f"T3 label but forward differs on {[describe(r) for r, _ in fwd_bad[:3]]}"
    shown = [(r, j) for r, j in wit if j["wrong"] or j["exc"]]
    if len(shown) != len(wit):
        return False, f"witness shows no gradient difference: {[describe(r) for r, j in wit if not (j['wrong'] or j['exc'])]}"
    wrong = sorted(set().union(*(j["wrong"] for _, j in shown)))
    note = f"forward ok everywhere; witness grads wrong for {wrong}; {base_note}"
    excs = [j["exc"] for _, j in shown if j["exc"]]
    if comp == "graph":
        all_exc = [j["exc"] for _, j in inside if j["exc"]] + excs
        return not all_exc, note + ("" if not all_exc else f"; raises {all_exc[0][:40]}")
    if comp == "backward":
        if excs:
            return True, note + f"; backward raises: {excs[0][:40]}"
        none = sorted(set().union(*(j["none"] for _, j in shown)))
        return not none, note + ("; every trainable input gets a gradient" if not none else f"; missing {none}")
    if comp == "stability":
        nonfinite = all(j["nonfinite"] for _, j in shown)
        return nonfinite, note + ("; witness gradients not finite" if nonfinite else "; finite but wrong")
    if comp == "dtype":
        ok = all(r["dtype"] == "f64" for r, _ in shown) and all(j["loose_ok"] and not j["exc"] for _, j in shown)
        return ok, note + ("; float64 gradients right only to float32 accuracy" if ok else "; not a precision loss")
    return True, note


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
            if s.startswith(("import ", "from ")) and not s.startswith(
                    ("import math", "import torch", "from __future__", "from torch")):
                problems.append(f"{p.parent.name}/{p.stem}: imports something else: {s}")
    rows = []
    for key in sorted(labels):
        if only and key not in only and key.split("/")[-1] not in only:
            continue
        lab = labels[key]
        errs = schema_errors(lab)
        if errs:
            rows.append((key, "-", False, "schema: " + "; ".join(errs)))
            print(f"{key:<62}  {'-':<15}  NO   {rows[-1][3]}", flush=True)
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
        print(f"{key:<62}  {tag:<15}  {'yes' if ok else 'NO '}  {rows[-1][3]}", flush=True)
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
    print(f"{n_ok}/{len(rows)} labels verified")
    return 0 if n_ok == len(rows) and not problems else 1


if __name__ == "__main__":
    sys.exit(main())
