"""Confirm every label of the stateful corpus against an independent float64 numpy oracle.

Usage (from the project root):

    python tests/corpus/diagnosis_stateful/verify.py            # every file
    python tests/corpus/diagnosis_stateful/verify.py <stem> ... # some files
    python tests/corpus/diagnosis_stateful/verify.py --file path/to/file.py   # report on any file

Adapted from the verify.py of the sealed corpus (same oracle, same label
schema), but the checks are about CALL SEQUENCES: the bugs of this corpus live
in state that one call leaves for a later call.

The oracle is plain numpy in float64: a row-max-shifted softmax, an explicit
-inf causal mask, and the closed-form backward of that oracle (checked against
central finite differences at start-up). torch is only used to call the files
and to read the gradients their autograd produces.

Every file is run in its own fresh subprocess, which makes two kinds of checks:

* fresh single calls: for each of ~30 configurations (shapes from T = 1 to
  T = 300, float32 and float64, causal True/False/default, Python float/int and
  0-dim tensor coefficients, strided views, frozen inputs, large float32
  logits, grad / no_grad / inference_mode) the file's module is loaded anew
  (fresh module state) and called exactly once; the output's type, shape,
  dtype, graph attachment and values are checked, the inputs must be left
  unchanged, and in grad mode one backward pass must give the oracle's
  gradients. Every file, wrong ones included, must pass all of these.
* call sequences: each sequence starts from a freshly loaded module and runs
  several calls (same tensors twice, inputs overwritten with ``copy_`` or
  ``.data.copy_``, inputs freed and reallocated, dtype / causal / lambda_init /
  coefficient / shape switches, decoding steps, no_grad or inference_mode
  before training, micro-batches and layers sharing one backward pass, chained
  layers, small training loops with in-place optimiser updates). Every call's
  output, every returned tensor again at the end of the sequence (it must not
  change afterwards), and every gradient is checked against the oracle.

Confirmation rules:

* correct/*: no failure at all.
* wrong/*: no fresh-call failure; no failure in the sequences of the function
  the label does not blame; at least one failure in the blamed function's
  sequences (or in the sequences that use both functions), of the labelled
  kind:
    T1 <component>: a failure of that contract kind occurs (wrong dtype, wrong
        shape or a shape error, output detached from the graph or a call that
        raises because of inference-mode state, ...);
    T2: no contract failure (type, shape, dtype, mutation, graph); some
        returned value is wrong (possibly only when read again after later
        calls); for `dtype` every wrong value is float64 and still right to
        float32 accuracy; for `mask` every failing sequence contains a causal
        call;
    T3: every forward value and contract check right in every sequence; some
        gradient wrong; for `coefficient` only the coefficient's gradient, for
        `graph` some trainable input gets no gradient at all, for `backward`
        every input gets a gradient but some are wrong (or backward raises).

Prints one row per file and a summary; exits 1 if a label is not confirmed.
"""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import itertools
import json
import os
import subprocess
import sys
import time
import warnings
import zlib
from concurrent.futures import ThreadPoolExecutor
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
CONTRACT_KINDS = {"type", "shape", "dtype", "mutation", "graph"}
F64, F32 = torch.float64, torch.float32

# float64 against the oracle, float32 on ordinary inputs, float32 with large
# logits, autograd gradients in float64 and in float32.
TOL64, TOL32, TOL_LARGE, TOL_GRAD, TOL_GRAD32 = 1e-9, 1e-4, 2e-3, 1e-6, 1e-3


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


def self_test_oracle():
    rng = np.random.default_rng(7)
    for causal in (True, False):
        args = [rng.standard_normal((1, 2, 4, 3)) for _ in range(4)] + [rng.standard_normal((1, 2, 4, 6))]
        cot = rng.standard_normal((1, 2, 4, 6))
        f = lambda q1, k1, q2, k2, v, c: oracle_attention(q1, k1, q2, k2, v, c, causal)
        fd = central_differences(f, args + [np.asarray(0.45)], cot)
        for g, w in zip(oracle_attention_grads(*args, 0.45, causal, cot), fd):
            assert np.allclose(g, w, rtol=1e-6, atol=1e-7)
    vecs = [rng.standard_normal(3) * 0.5 for _ in range(4)]
    fd = central_differences(lambda *v: oracle_lambda(*v, 0.3), vecs, 0.7)
    for g, w in zip(oracle_lambda_grads(*vecs, 0.7), fd):
        assert np.allclose(g, w, rtol=1e-6, atol=1e-7)


def rel_err(got, want):
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        return float("inf")
    if not np.all(np.isfinite(got)):
        return float("inf")
    return float(np.max(np.abs(got - want) / (1.0 + np.abs(want)), initial=0.0))


# ====================================================================== calling a file
_LOADS = itertools.count()
MODES = {"grad": contextlib.nullcontext, "no_grad": torch.no_grad, "inference": torch.inference_mode}


def load_fresh(path: Path):
    """A new module object for every call: no state is shared with earlier loads."""
    spec = importlib.util.spec_from_file_location(f"stateful_{path.stem}_{next(_LOADS)}", path)
    mod = importlib.util.module_from_spec(spec)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spec.loader.exec_module(mod)
    return mod


def classify_exception(exc: BaseException, during_backward: bool) -> str:
    msg = str(exc).lower()
    if "inference" in msg:
        return "graph"
    if during_backward:
        return "backward_exc"
    if any(w in msg for w in ("size of tensor", "shape", "cannot be multiplied", "dimension", "must match")):
        return "shape"
    if "dtype" in msg or "scalar type" in msg:
        return "dtype"
    return "exc"


class Abort(Exception):
    """A step raised: the sequence cannot go on."""


class Inp:
    """An argument handed to the function and how to read its gradient."""

    def __init__(self, t, leaf=None, getter=None, name=""):
        self.t = t
        self.leaf = leaf if leaf is not None else (t if t.is_leaf else None)
        self.getter = getter or (lambda: None if t.grad is None else t.grad.detach().double().numpy().copy())
        self.name = name

    @property
    def trainable(self):
        return self.leaf is not None and self.leaf.requires_grad


class Session:
    """One fresh module and the records of the calls made on it."""

    def __init__(self, path: Path, name: str, fn: str):
        self.mod = load_fresh(path)
        self.name, self.fn = name, fn
        self.fails: list[dict] = []
        self.recs: list[dict] = []
        self.any_causal = False
        self.rng = np.random.default_rng(zlib.crc32(name.encode()))

    # ---------------------------------------------------------------- failures
    def fail(self, kind, step, detail, **extra):
        self.fails.append({"seq": self.name, "fn": self.fn, "step": step, "kind": kind,
                           "detail": detail, "any_causal": self.any_causal, **extra})

    # ---------------------------------------------------------------- inputs
    def arr(self, shape, scale=1.0):
        return self.rng.standard_normal(shape) * scale

    def att_inputs(self, b, h, t, d, dtype=F64, rg=True, scale=1.0, strided=False, frozen=(), arrays=None):
        names = ("q1", "k1", "q2", "k2", "value")
        if arrays is None:
            arrays = [self.arr((b, h, t, d), scale) for _ in range(4)] + [self.arr((b, h, t, 2 * d))]
        out = []
        for i, (n, x) in enumerate(zip(names, arrays)):
            want_rg = rg and i not in frozen
            if not strided:
                out.append(Inp(torch.tensor(x, dtype=dtype).requires_grad_(want_rg), name=n))
                continue
            bb, hh, tt, dd = x.shape            # storage [B, T, H, 2*last], seen permuted, every 2nd column
            full = np.zeros((bb, tt, hh, 2 * dd))
            full[..., 1::2] = x.transpose(0, 2, 1, 3)
            base = torch.tensor(full, dtype=dtype).requires_grad_(want_rg)
            view = base.permute(0, 2, 1, 3)[..., 1::2]
            get = (lambda base=base: None if base.grad is None
                   else base.grad.permute(0, 2, 1, 3)[..., 1::2].double().numpy().copy())
            out.append(Inp(view, leaf=base, getter=get, name=n))
        return out

    def lam_inputs(self, n, dtype=F64, rg=True, scale=0.4, strided=False, frozen=(), arrays=None):
        if arrays is None:
            arrays = [self.arr(n, scale) for _ in range(4)]
        out = []
        for i, (name, x) in enumerate(zip(("lambda.q1", "lambda.k1", "lambda.q2", "lambda.k2"), arrays)):
            x = np.asarray(x, dtype=np.float64)
            want_rg = rg and i not in frozen
            if not strided:
                out.append(Inp(torch.tensor(x, dtype=dtype).requires_grad_(want_rg), name=name))
                continue
            full = np.zeros(3 * x.size)
            full[::3] = x
            base = torch.tensor(full, dtype=dtype).requires_grad_(want_rg)
            get = lambda base=base: None if base.grad is None else base.grad[::3].double().numpy().copy()
            out.append(Inp(base[::3], leaf=base, getter=get, name=name))
        return out

    def coef(self, value, dtype=F64, rg=True):
        return Inp(torch.tensor(float(value), dtype=dtype).requires_grad_(rg), name="coefficient")

    def refill(self, inps, how="copy", scale=1.0):
        """Overwrite the inputs in place with new values (an optimiser step, a reused buffer)."""
        with torch.no_grad():
            for inp in inps:
                new = torch.as_tensor(self.arr(tuple(inp.t.shape), scale), dtype=inp.t.dtype)
                if how == "copy":
                    inp.t.copy_(new)
                else:
                    inp.t.data.copy_(new)

    # ---------------------------------------------------------------- calls
    @staticmethod
    def _snap(t):
        return t.detach().double().numpy().copy()

    def _run(self, fn, args, kwargs, mode, step, watch):
        version = lambda t: None if t.is_inference() else t._version  # noqa: E731
        before = [(t.detach().clone(), version(t)) for t in watch]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                with MODES[mode]():
                    out = fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001
            self.fail(classify_exception(exc, False), step, f"{mode} call raised {type(exc).__name__}: "
                      + " ".join(str(exc).split())[:90])
            raise Abort from exc
        if any(version(t) != v or not torch.equal(t.detach(), old) for t, (old, v) in zip(watch, before)):
            self.fail("mutation", step, "an input was modified")
        if not isinstance(out, torch.Tensor):
            self.fail("type", step, f"returned {type(out).__name__}")
            raise Abort
        return out

    def _check_out(self, rec):
        out, want, step = rec["out"], rec["want"], rec["step"]
        if tuple(out.shape) != np.shape(want):
            self.fail("shape", step, f"shape {tuple(out.shape)} instead of {np.shape(want)}")
            raise Abort
        if out.dtype != rec["dtype"]:
            self.fail("dtype", step, f"dtype {out.dtype} instead of {rec['dtype']}")
        if rec["mode"] == "grad" and rec["needs_graph"] and not out.requires_grad:
            self.fail("graph", step, "output detached from the graph although an input requires grad")
        err = rel_err(out.detach().double().numpy(), want)
        rec["right_at_call"] = err <= rec["tol"]
        if not rec["right_at_call"]:
            self.fail("value", step, f"values off by {err:.2e}", err=err,
                      f64=rec["dtype"] == F64, causal=rec.get("causal"))

    def att(self, inps, coef, causal=True, mode="grad", step="", keep=True, tol=None):
        step = step or f"att#{len(self.recs) + 1}"
        inps = [i if isinstance(i, Inp) else Inp(i) for i in inps]
        ct = coef if isinstance(coef, Inp) else (Inp(coef, name="coefficient") if isinstance(coef, torch.Tensor) else None)
        coef_arg = ct.t if ct is not None else coef
        coef_val = float(ct.t.detach()) if ct is not None else float(coef)
        eff_causal = True if causal is None else bool(causal)
        self.any_causal |= eff_causal
        snaps = [self._snap(i.t) for i in inps]
        dtype = inps[0].t.dtype
        if tol is None:
            tol = TOL64 if dtype == F64 else TOL32
        rec = {"kind": ATT, "step": step, "inps": inps, "coef": ct, "coef_val": coef_val, "causal": eff_causal,
               "snaps": snaps, "dtype": dtype, "mode": mode, "tol": tol,
               "want": oracle_attention(*snaps, coef_val, eff_causal),
               "needs_graph": any(i.t.requires_grad for i in inps) or (ct is not None and ct.t.requires_grad)}
        kwargs = {} if causal is None else {"causal": causal}
        watch = [i.t for i in inps] + ([ct.t] if ct is not None else [])
        rec["out"] = self._run(self.mod.differential_attention, [i.t for i in inps] + [coef_arg], kwargs,
                               mode, step, watch)
        self._check_out(rec)
        rec["cot"] = self.rng.standard_normal(np.shape(rec["want"]))
        if keep:
            self.recs.append(rec)
        return rec

    def lam(self, inps, init=None, mode="grad", step="", keep=True):
        step = step or f"lam#{len(self.recs) + 1}"
        inps = [i if isinstance(i, Inp) else Inp(i) for i in inps]
        snaps = [self._snap(i.t) for i in inps]
        dtype = inps[0].t.dtype
        rec = {"kind": LAM, "step": step, "inps": inps, "snaps": snaps, "dtype": dtype, "mode": mode,
               "tol": TOL64 if dtype == F64 else TOL32, "init": init,
               "want": oracle_lambda(*snaps, 0.2 if init is None else init),
               "needs_graph": any(i.t.requires_grad for i in inps)}
        kwargs = {} if init is None else {"lambda_init": init}
        rec["out"] = self._run(self.mod.differential_lambda, [i.t for i in inps], kwargs, mode, step,
                               [i.t for i in inps])
        self._check_out(rec)
        rec["cot"] = float(self.rng.uniform(0.5, 1.5))
        if keep:
            self.recs.append(rec)
        return rec

    # ---------------------------------------------------------------- gradients
    def backward(self, recs, step="backward", extra=None):
        """One backward pass through sum(out * cot) of `recs`; compare every trainable input's gradient.

        A lambda record whose output is used as the coefficient of an attention
        record in `recs` gets that coefficient's gradient as its cotangent.
        `extra` is a list of (Inp, expected gradient) added to the expectation.
        """
        expected: dict[int, list] = {}

        def add(inp, g):
            if inp is None or not inp.trainable:
                return
            slot = expected.setdefault(id(inp.t), [inp, 0.0])
            slot[1] = slot[1] + np.asarray(g, dtype=np.float64)

        lam_cot: dict[int, list] = {}
        lam_recs = [r for r in self.recs if r["kind"] == LAM]
        for r in recs:
            if r["kind"] == LAM:
                lam_cot.setdefault(id(r), [r, 0.0])[1] += r["cot"]
        for r in recs:
            if r["kind"] != ATT:
                continue
            grads = oracle_attention_grads(*r["snaps"], r["coef_val"], r["causal"], r["cot"])
            for inp, g in zip(r["inps"], grads[:5]):
                add(inp, g)
            ct = r["coef"]
            if ct is None:
                continue
            if ct.trainable:
                add(ct, grads[5])
            else:
                for lr in lam_recs:
                    if lr["out"] is ct.t:
                        lam_cot.setdefault(id(lr), [lr, 0.0])[1] += float(grads[5])
        for lr, cot in lam_cot.values():
            for inp, g in zip(lr["inps"], oracle_lambda_grads(*lr["snaps"], cot)):
                add(inp, g)
        for inp, g in extra or ():
            add(inp, g)
        for inp, _ in expected.values():
            inp.leaf.grad = None
        loss = 0
        for r in recs:
            loss = loss + (r["out"] * torch.as_tensor(np.asarray(r["cot"]), dtype=r["out"].dtype)).sum()
        try:
            loss.backward()
        except Exception as exc:  # noqa: BLE001
            self.fail(classify_exception(exc, True), step, f"backward raised {type(exc).__name__}: "
                      + " ".join(str(exc).split())[:90])
            raise Abort from exc
        for inp, want in expected.values():
            got = inp.getter()
            if got is None:
                if np.all(want == 0):
                    continue                              # None is PyTorch's zero gradient
                self.fail("grad_none", step, f"no gradient reaches {inp.name}", input=inp.name)
                continue
            tol = TOL_GRAD if inp.t.dtype == F64 else TOL_GRAD32
            err = rel_err(got, want)
            if err > tol:
                self.fail("grad", step, f"gradient of {inp.name} off by {err:.2e}", input=inp.name, err=err)

    def final(self):
        """Every tensor returned during the sequence must still hold its value."""
        for r in self.recs:
            if not r.get("right_at_call"):
                continue                                  # already reported when it was returned
            err = rel_err(r["out"].detach().double().numpy(), r["want"])
            if err > r["tol"]:
                self.fail("value", r["step"] + " (read again at the end)",
                          f"returned tensor changed after later calls (off by {err:.2e})", err=err,
                          f64=r["dtype"] == F64, causal=r.get("causal"))


# ====================================================================== fresh single calls
# name: (shape, dtype, causal, coefficient kind, coefficient, mode, strided, frozen, logit scale, grads)
FRESH_ATT = {
    "A01": ((2, 2, 5, 3), F64, True, "tensor", 0.37, "grad", False, (), 1.0, True),
    "A02": ((1, 3, 6, 4), F64, False, "python", -0.55, "grad", False, (), 1.0, True),
    "A03": ((2, 1, 7, 2), F32, True, "tensor", 1.4, "grad", False, (), 1.0, True),
    "A04": ((1, 2, 4, 5), F32, False, "int", 1, "grad", False, (), 1.0, True),
    "A05": ((1, 1, 1, 4), F64, True, "tensor", 0.6, "grad", False, (), 1.0, True),
    "A06": ((2, 1, 1, 2), F64, False, "python", -0.2, "grad", False, (), 1.0, True),
    "A07": ((1, 2, 40, 3), F64, True, "python", 0.45, "grad", False, (), 1.0, True),
    "A08": ((1, 1, 300, 2), F64, True, "tensor", 0.7, "grad", False, (), 1.0, True),
    "A09": ((1, 2, 33, 3), F64, False, "tensor", -0.4, "grad", False, (), 1.0, True),
    "A10": ((2, 2, 5, 3), F64, True, "tensor", 0.37, "grad", True, (), 1.0, True),
    "A11": ((1, 3, 6, 4), F32, False, "python", 0.5, "grad", True, (), 1.0, True),
    "A12": ((2, 1, 7, 2), F64, True, "frozen", 0.8, "grad", False, (0, 4), 1.0, True),
    "A13": ((2, 2, 5, 3), F64, True, "float32", 1.0, "no_grad", False, (), 1.0, False),
    "A14": ((2, 2, 5, 3), F64, False, "int64", 1, "inference", False, (), 1.0, False),
    "A15": ((1, 2, 9, 3), F32, True, "python", 0.6, "inference", False, (), 1.0, False),
    "A16": ((1, 2, 9, 3), F64, True, "tensor", 0.6, "no_grad", False, (), 1.0, False),
    "A17": ((1, 2, 6, 4), F32, True, "python", 0.5, "no_grad", False, (), 20.0, False),
    "A18": ((1, 2, 40, 4), F32, False, "python", 0.6, "grad", False, (), 20.0, False),
    "A19": ((2, 2, 5, 3), F64, None, "python", 0.3, "grad", False, (), 1.0, True),
    "A20": ((1, 2, 6, 3), F64, True, "tensor", 0.0, "grad", False, (), 1.0, True),
    "A21": ((2, 2, 5, 3), F64, True, "tensor", 0.37, "inference", True, (), 1.0, False),
    "A22": ((1, 2, 300, 3), F32, False, "tensor", -0.25, "no_grad", False, (), 1.0, False),
    "A23": ((1, 2, 7, 3), F32, True, "float64", 0.45, "grad", False, (), 1.0, True),
    "A24": ((1, 1, 300, 4), F32, True, "python", 0.5, "inference", False, (), 20.0, False),
}
# name: (D_lambda, dtype, lambda_init, mode, strided, frozen, fixed vectors or None)
FRESH_LAM = {
    "L01": (6, F64, None, "grad", False, (), None),
    "L02": (3, F32, 0.65, "grad", False, (), None),
    "L03": (1, F64, 0.2, "grad", False, (), None),
    "L04": (64, F64, 0.8, "grad", True, (), None),
    "L05": (5, F64, 0.0, "no_grad", False, (), None),
    "L06": (4, F32, None, "inference", False, (), None),
    "L07": (3, F64, 0.5, "grad", False, (), [[2.5, 2.0, 1.5], [2.0, 2.5, 1.0], [1.0, 0.5, 1.0], [1.0, 2.0, 1.0]]),
    "L08": (2, F64, 0.35, "grad", False, (0,), None),
    "L09": (8, F32, 0.3, "inference", True, (), None),
    "L10": (2, F64, 0.35, "grad", False, (), [[-0.3, 0.2], [0.6, -0.4], [0.9, 0.5], [0.8, 0.7]]),
    "L11": (6, F32, None, "no_grad", False, (), None),
}


def fresh_att(path, key):
    shape, dtype, causal, kind, coef, mode, strided, frozen, scale, grads = FRESH_ATT[key]
    S = Session(path, "fresh:" + key, ATT)
    try:
        rg = mode != "inference"
        X = S.att_inputs(*shape, dtype=dtype, rg=rg, scale=scale, strided=strided, frozen=frozen)
        if kind == "tensor":
            c = S.coef(coef, dtype, rg=rg)
        elif kind == "frozen":
            c = S.coef(coef, dtype, rg=False)
        elif kind == "float32":
            c = Inp(torch.tensor(float(coef), dtype=F32), name="coefficient")
        elif kind == "float64":
            c = Inp(torch.tensor(float(coef), dtype=F64), name="coefficient")
        elif kind == "int64":
            c = Inp(torch.tensor(int(coef)), name="coefficient")
        elif kind == "int":
            c = int(coef)
        else:
            c = float(coef)
        tol = TOL_LARGE if scale > 1 else None
        r = S.att(X, c, causal, mode, key, tol=tol)
        if mode == "grad" and grads:
            S.backward([r], key + " backward")
    except Abort:
        pass
    return S.fails


def fresh_lam(path, key):
    n, dtype, init, mode, strided, frozen, fixed = FRESH_LAM[key]
    S = Session(path, "fresh:" + key, LAM)
    try:
        V = S.lam_inputs(n, dtype, rg=mode != "inference", strided=strided, frozen=frozen, arrays=fixed)
        r = S.lam(V, init, mode, key)
        if mode == "grad":
            S.backward([r], key + " backward")
    except Abort:
        pass
    return S.fails


# ====================================================================== sequences
SEQUENCES: list[tuple[str, str, object]] = []


def sequence(group):
    def deco(f):
        SEQUENCES.append((f.__name__, group, f))
        return f
    return deco


SH = (2, 2, 5, 3)       # D = 3: 1/sqrt(D) is not exact in float32


@sequence(ATT)
def att_same_tensors_twice(S):
    X, c = S.att_inputs(*SH), S.coef(0.37)
    r1 = S.att(X, c, True)
    r2 = S.att(X, c, True)
    S.backward([r1, r2], "one backward through both calls")
    r3 = S.att(X, c, True)
    S.backward([r3], "backward of the third call")
    r4 = S.att(X, 0.37, False)
    S.backward([r4], "backward of a non-causal call")


@sequence(ATT)
def att_repeat_without_graph(S):
    X = S.att_inputs(*SH, rg=False)
    for mode in ("no_grad", "no_grad", "inference", "no_grad", "inference"):
        S.att(X, 0.5, True, mode)


@sequence(ATT)
def att_eval_outputs_kept(S):
    for mode in ("no_grad", "no_grad", "no_grad", "inference", "inference", "grad"):
        S.att(S.att_inputs(*SH, rg=False), 0.3, True, mode)
    for mode in ("no_grad", "inference"):
        S.att(S.att_inputs(*SH, rg=False), -0.6, False, mode)


def _refill_sequence(S, how):
    X, c = S.att_inputs(*SH), S.coef(0.3, rg=False)
    S.att(X, c, True, "no_grad", "before the in-place change")
    S.refill(X + [c], how)
    S.att(X, c, True, "no_grad", "after the in-place change (no_grad)")
    S.refill(X + [c], how)
    S.att(X, c, True, "inference", "after a second change (inference)")
    r = S.att(X, c, True, "grad", "after the changes (grad)")
    S.backward([r])
    S.refill(X + [c], how)
    r = S.att(X, 0.45, False, "grad", "after a third change, python coefficient, non-causal")
    S.backward([r])


@sequence(ATT)
def att_inputs_copied_in_place(S):
    _refill_sequence(S, "copy")


@sequence(ATT)
def att_inputs_data_copied(S):
    _refill_sequence(S, "data")


@sequence(ATT)
def att_free_and_reallocate(S):
    for i in range(4):
        X, c = S.att_inputs(*SH, rg=False), S.coef(0.2 + 0.3 * i, rg=False)
        S.att(X, c, True, "no_grad", f"allocation {i}", keep=False)
        del X, c
        gc.collect()
    for i in range(3):
        X = S.att_inputs(*SH)
        r = S.att(X, 0.3 + 0.2 * i, True, "grad", f"training allocation {i}", keep=False)
        S.backward([r], f"backward of allocation {i}")
        del X, r
        gc.collect()


def _dtype_sequence(S, first, second):
    arrays = [S.arr(SH) for _ in range(4)] + [S.arr(SH[:3] + (2 * SH[3],))]
    A = S.att_inputs(*SH, dtype=first, arrays=arrays)
    B = S.att_inputs(*SH, dtype=second, arrays=arrays)
    ra = S.att(A, S.coef(0.37, first), True, "grad", f"{first}")
    S.backward([ra])
    rb = S.att(B, S.coef(0.37, second), True, "grad", f"{second} after {first}")
    S.backward([rb])
    S.att(B, 0.6, False, "no_grad", f"{second} non-causal")
    S.att(A, 0.6, False, "no_grad", f"{first} non-causal")
    S.att(B, 0.25, True, "inference", f"{second} inference")


@sequence(ATT)
def att_float64_then_float32(S):
    _dtype_sequence(S, F64, F32)


@sequence(ATT)
def att_float32_then_float64(S):
    _dtype_sequence(S, F32, F64)


def _causal_sequence(S, flags):
    X = S.att_inputs(*SH)
    recs = [S.att(X, 0.45, f, "grad", f"causal={f}") for f in flags]
    S.backward(recs, "one backward through calls with different causal flags")
    for f in flags:
        S.att(X, 0.45, f, "no_grad", f"causal={f} (no_grad)")


@sequence(ATT)
def att_causal_true_false_true(S):
    _causal_sequence(S, (True, False, True))


@sequence(ATT)
def att_causal_false_true_false(S):
    _causal_sequence(S, (False, True, False))


@sequence(ATT)
def att_default_causal_after_false(S):
    X = S.att_inputs(*SH)
    S.att(X, 0.5, False, "grad", "causal=False")
    r = S.att(X, 0.5, None, "grad", "causal omitted (default True)")
    S.backward([r])


@sequence(ATT)
def att_long_then_short(S):
    for t, causal, mode in ((40, True, "grad"), (7, True, "no_grad"), (1, True, "no_grad"), (1, True, "grad"),
                            (12, True, "grad"), (7, False, "no_grad"), (40, True, "no_grad")):
        r = S.att(S.att_inputs(1, 2, t, 3), -0.35, causal, mode, f"T={t} causal={causal} {mode}")
        if mode == "grad":
            S.backward([r], f"backward T={t}")


@sequence(ATT)
def att_short_then_long(S):
    for t in (3, 50, 20, 50):
        r = S.att(S.att_inputs(2, 1, t, 3), 0.55, True, "grad", f"T={t}")
        S.backward([r], f"backward T={t}")


@sequence(ATT)
def att_decode_steps(S):
    S.att(S.att_inputs(1, 2, 16, 4, rg=False), 0.5, True, "no_grad", "prompt T=16")
    for i in range(4):
        S.att(S.att_inputs(1, 2, 1, 4, rg=False), 0.5, True, "inference", f"decode step {i} (T=1)")
    r = S.att(S.att_inputs(1, 2, 17, 4), 0.5, True, "grad", "training call T=17")
    S.backward([r])


@sequence(ATT)
def att_batch_and_heads_change(S):
    for shape in ((2, 2, 6, 3), (1, 3, 6, 3), (3, 1, 6, 3), (2, 2, 6, 3)):
        r = S.att(S.att_inputs(*shape), S.coef(0.4), True, "grad", f"shape {shape}")
        S.backward([r], f"backward {shape}")


@sequence(ATT)
def att_head_width_change(S):
    for d in (3, 5, 2, 3):
        r = S.att(S.att_inputs(1, 2, 6, d), 0.4, True, "grad", f"D={d}")
        S.backward([r], f"backward D={d}")
    S.att(S.att_inputs(1, 2, 6, 5, rg=False), 0.4, False, "no_grad", "D=5 no_grad")


@sequence(ATT)
def att_no_grad_then_train(S):
    X, c = S.att_inputs(*SH), S.coef(0.5)
    S.att(X, c, True, "no_grad", "evaluation call")
    r = S.att(X, c, True, "grad", "training call, same tensors")
    S.backward([r])


@sequence(ATT)
def att_inference_then_train(S):
    X, c = S.att_inputs(*SH), S.coef(0.5)
    S.att(X, c, True, "inference", "first call, inference_mode")
    r = S.att(X, c, True, "grad", "training call, same tensors")
    S.backward([r])
    r = S.att(X, 0.7, False, "grad", "training call, non-causal")
    S.backward([r])


@sequence(ATT)
def att_inference_then_train_new_tensors(S):
    S.att(S.att_inputs(*SH, rg=False), 0.6, True, "inference", "first call, inference_mode")
    r = S.att(S.att_inputs(*SH), S.coef(0.6), True, "grad", "training call, new tensors")
    S.backward([r])


@sequence(ATT)
def att_micro_batches_one_backward(S):
    c, c2 = S.coef(0.4), S.coef(0.9)
    ra = S.att(S.att_inputs(*SH), c, True, "grad", "micro-batch a")
    rb = S.att(S.att_inputs(*SH), c, True, "grad", "micro-batch b")
    rc = S.att(S.att_inputs(*SH), c2, True, "grad", "micro-batch c, other coefficient")
    S.backward([ra, rb, rc], "one backward through three micro-batches")
    ra = S.att(S.att_inputs(1, 2, 5, 3), -0.3, True, "grad", "micro-batch T=5")
    rb = S.att(S.att_inputs(1, 2, 9, 3), 0.8, True, "grad", "micro-batch T=9")
    S.backward([ra, rb], "one backward through two lengths")


@sequence(ATT)
def att_two_layers_different_flags(S):
    ra = S.att(S.att_inputs(*SH), S.coef(0.4), True, "grad", "layer 1 (causal)")
    rb = S.att(S.att_inputs(*SH), S.coef(0.8), False, "grad", "layer 2 (not causal)")
    S.backward([ra, rb], "one backward through both layers")


@sequence(ATT)
def att_stacked_layers(S):
    b, h, t, d = SH
    X1, c1 = S.att_inputs(*SH), S.coef(0.35)
    r1 = S.att(X1, c1, True, "grad", "layer 1 (causal)")
    rest = S.att_inputs(*SH)[1:]
    c2 = S.coef(0.7)
    q_next = Inp(r1["out"][..., :d], name="layer-2 q1 (layer-1 output)")
    r2 = S.att([q_next] + rest, c2, False, "grad", "layer 2 (not causal) fed by layer 1")
    g2 = oracle_attention_grads(*r2["snaps"], r2["coef_val"], r2["causal"], r2["cot"])
    cot1 = r1["cot"].copy()
    cot1[..., :d] += g2[0]
    g1 = oracle_attention_grads(*r1["snaps"], r1["coef_val"], r1["causal"], cot1)
    extra = list(zip(X1 + [c1], g1)) + list(zip(rest + [c2], g2[1:]))
    r1_cot, r2_cot = r1["cot"], r2["cot"]
    # backward of sum(out1 * cot1) + sum(out2 * cot2); expectations are given explicitly
    r1["kind"] = r2["kind"] = "chain"
    for inp, _ in extra:
        inp.leaf.grad = None
    try:
        ((r1["out"] * torch.as_tensor(r1_cot)).sum() + (r2["out"] * torch.as_tensor(r2_cot)).sum()).backward()
    except Exception as exc:  # noqa: BLE001
        S.fail(classify_exception(exc, True), "backward through two stacked layers",
               f"backward raised {type(exc).__name__}: {' '.join(str(exc).split())[:90]}")
        raise Abort from exc
    for inp, want in extra:
        got = inp.getter()
        if got is None:
            S.fail("grad_none", "backward through two stacked layers", f"no gradient reaches {inp.name}",
                   input=inp.name)
        elif rel_err(got, want) > TOL_GRAD:
            S.fail("grad", "backward through two stacked layers", f"gradient of {inp.name} off by "
                   f"{rel_err(got, want):.2e}", input=inp.name, err=rel_err(got, want))


@sequence(ATT)
def att_coefficient_changes(S):
    X = S.att_inputs(*SH)
    S.att(X, 0.3, True, "grad", "python 0.3")
    S.att(X, 0.9, True, "no_grad", "python 0.9")
    S.att(X, 1, True, "grad", "python int 1")
    r4 = S.att(X, S.coef(0.5), True, "grad", "tensor 0.5")
    r5 = S.att(X, S.coef(-0.2), True, "grad", "new tensor -0.2")
    S.backward([r4, r5], "backward through both tensor coefficients")
    S.att(X, 0.3, True, "grad", "python 0.3 again")


@sequence(ATT)
def att_frozen_coefficient_updated(S):
    X, c = S.att_inputs(*SH), S.coef(0.3, rg=False)
    S.att(X, c, True, "no_grad", "coefficient 0.3")
    with torch.no_grad():
        c.t.fill_(0.8)
    S.att(X, c, True, "no_grad", "coefficient filled with 0.8")
    c.t.data.fill_(-0.4)
    r = S.att(X, c, True, "grad", "coefficient set to -0.4 through .data")
    S.backward([r])


def _sgd(inps, lr, style):
    with torch.no_grad():
        for inp in inps:
            if inp.leaf.grad is None:
                continue
            if style == "no_grad":
                inp.leaf -= lr * inp.leaf.grad
            else:
                inp.leaf.data.add_(-lr * inp.leaf.grad)
            inp.leaf.grad = None


@sequence(ATT)
def att_training_loop(S):
    X, c = S.att_inputs(*SH), S.coef(0.4)
    for step, style in enumerate(("no_grad", "data", "no_grad", "data")):
        r = S.att(X, c, True, "grad", f"training step {step}", keep=False)
        S.backward([r], f"backward step {step}")
        S.att(X, c, True, "no_grad", f"evaluation after step {step}")
        _sgd(X + [c], 0.5, style)


@sequence(ATT)
def att_mixed_modes(S):
    X, c = S.att_inputs(*SH), S.coef(0.45)
    r1 = S.att(X, c, True, "grad", "grad")
    S.att(X, c, True, "no_grad", "no_grad")
    S.att(X, c, True, "inference", "inference")
    r4 = S.att(X, c, True, "grad", "grad again")
    S.backward([r1, r4], "one backward through the two graph-building calls")


@sequence(ATT)
def att_strided_views_refilled(S):
    X = S.att_inputs(*SH, strided=True)
    S.att(X, 0.5, True, "no_grad", "strided views")
    with torch.no_grad():
        for inp in X:
            inp.leaf.copy_(torch.as_tensor(S.arr(tuple(inp.leaf.shape)), dtype=inp.leaf.dtype))
    S.att(X, 0.5, True, "no_grad", "strided views after their storage changed")
    r = S.att(X, 0.5, True, "grad", "strided views, grad")
    S.backward([r])


# ---------------------------------------------------------------------- lambda
@sequence(LAM)
def lam_same_tensors_twice(S):
    V = S.lam_inputs(6)
    r1, r2 = S.lam(V), S.lam(V)
    S.backward([r1, r2], "one backward through both calls")
    r3 = S.lam(V, 0.5)
    S.backward([r3])


@sequence(LAM)
def lam_eval_outputs_kept(S):
    V1 = S.lam_inputs(6, rg=False)
    for mode, V in (("no_grad", V1), ("no_grad", S.lam_inputs(6, rg=False)),
                    ("inference", S.lam_inputs(6, rg=False)), ("no_grad", V1), ("inference", V1),
                    ("grad", S.lam_inputs(6, rg=False))):
        S.lam(V, 0.3, mode)


def _lam_refill(S, how):
    V = S.lam_inputs(5)
    S.lam(V, 0.4, "no_grad", "before the in-place change")
    S.refill(V, how, 0.4)
    S.lam(V, 0.4, "no_grad", "after the in-place change")
    S.refill(V, how, 0.4)
    S.lam(V, 0.4, "inference", "after a second change (inference)")
    r = S.lam(V, 0.4, "grad", "after the changes (grad)")
    S.backward([r])


@sequence(LAM)
def lam_inputs_copied_in_place(S):
    _lam_refill(S, "copy")


@sequence(LAM)
def lam_inputs_data_copied(S):
    _lam_refill(S, "data")


@sequence(LAM)
def lam_free_and_reallocate(S):
    for i in range(4):
        V = S.lam_inputs(6, rg=False)
        S.lam(V, 0.2, "no_grad", f"allocation {i}", keep=False)
        del V
        gc.collect()
    for i in range(3):
        V = S.lam_inputs(6)
        r = S.lam(V, 0.2, "grad", f"training allocation {i}", keep=False)
        S.backward([r])
        del V, r
        gc.collect()


def _lam_dtypes(S, first, second):
    arrays = [S.arr(4, 0.5) for _ in range(4)]
    A = S.lam_inputs(4, first, arrays=arrays)
    B = S.lam_inputs(4, second, arrays=arrays)
    ra = S.lam(A, 0.3, "grad", f"{first}")
    S.backward([ra])
    rb = S.lam(B, 0.3, "grad", f"{second} after {first}")
    S.backward([rb])
    S.lam(B, None, "no_grad", f"{second}, default init")
    S.lam(A, 0.3, "inference", f"{first} again")


@sequence(LAM)
def lam_float64_then_float32(S):
    _lam_dtypes(S, F64, F32)


@sequence(LAM)
def lam_float32_then_float64(S):
    _lam_dtypes(S, F32, F64)


@sequence(LAM)
def lam_init_changes(S):
    V = S.lam_inputs(6)
    for init in (None, 0.5, 0.8, None, 0.0):
        S.lam(V, init, "no_grad", f"lambda_init={init}")
    r = S.lam(V, 0.62, "grad", "lambda_init=0.62")
    S.backward([r])


@sequence(LAM)
def lam_explicit_init_first(S):
    V = S.lam_inputs(3)
    for init in (0.7, None, 0.7, 0.35):
        S.lam(V, init, "grad", f"lambda_init={init}")


@sequence(LAM)
def lam_length_changes(S):
    for n in (6, 3, 64, 1, 6):
        r = S.lam(S.lam_inputs(n, scale=0.3), 0.2, "grad", f"D_lambda={n}")
        S.backward([r])


@sequence(LAM)
def lam_no_grad_then_train(S):
    V = S.lam_inputs(6)
    S.lam(V, 0.3, "no_grad", "evaluation call")
    r = S.lam(V, 0.3, "grad", "training call, same tensors")
    S.backward([r])


@sequence(LAM)
def lam_inference_then_train(S):
    V = S.lam_inputs(6)
    S.lam(V, 0.3, "inference", "first call, inference_mode")
    r = S.lam(V, 0.3, "grad", "training call, same tensors")
    S.backward([r])
    r = S.lam(S.lam_inputs(6), 0.3, "grad", "training call, new tensors")
    S.backward([r])


@sequence(LAM)
def lam_micro_batches_one_backward(S):
    ra = S.lam(S.lam_inputs(4), 0.2, "grad", "parameter set a")
    rb = S.lam(S.lam_inputs(4), 0.2, "grad", "parameter set b")
    S.backward([ra, rb], "one backward through two parameter sets")
    V = S.lam_inputs(4)
    r1 = S.lam(V, 0.2, "grad", "layer 1 (lambda_init 0.2)")
    r2 = S.lam(V, 0.38, "grad", "layer 2 (lambda_init 0.38)")
    S.backward([r1, r2], "one backward through two layers")


@sequence(LAM)
def lam_mixed_modes(S):
    V = S.lam_inputs(5)
    r1 = S.lam(V, 0.25, "grad")
    S.lam(V, 0.25, "no_grad")
    S.lam(V, 0.25, "inference")
    r4 = S.lam(V, 0.25, "grad")
    S.backward([r1, r4], "one backward through the two graph-building calls")


@sequence(LAM)
def lam_training_loop(S):
    V = S.lam_inputs(4, scale=0.5)
    for step, style in enumerate(("no_grad", "data", "no_grad", "data")):
        r = S.lam(V, 0.3, "grad", f"training step {step}", keep=False)
        S.backward([r], f"backward step {step}")
        S.lam(V, 0.3, "no_grad", f"evaluation after step {step}")
        _sgd(V, 0.2, style)


# ---------------------------------------------------------------------- both functions together
@sequence("both")
def both_layer_training_loop(S):
    LV, X = S.lam_inputs(4, scale=0.5), S.att_inputs(*SH)
    for step, style in enumerate(("no_grad", "data", "no_grad")):
        lam = S.lam(LV, 0.3, "grad", f"lambda, step {step}")
        out = S.att(X, lam["out"], True, "grad", f"attention, step {step}")
        S.backward([out], f"backward step {step}")
        _sgd(LV + X, 0.3, style)


@sequence("both")
def both_two_layers_shared_lambda_vectors(S):
    LV = S.lam_inputs(4, scale=0.5)
    l1 = S.lam(LV, 0.2, "grad", "lambda layer 1")
    l2 = S.lam(LV, 0.38, "grad", "lambda layer 2")
    o1 = S.att(S.att_inputs(*SH), l1["out"], True, "grad", "attention layer 1 (causal)")
    o2 = S.att(S.att_inputs(*SH), l2["out"], False, "grad", "attention layer 2 (not causal)")
    S.backward([o1, o2], "one backward through both layers")


@sequence("both")
def both_eval_then_train(S):
    LV, X = S.lam_inputs(4, scale=0.5), S.att_inputs(*SH)
    for mode in ("no_grad", "inference"):
        lam = S.lam(LV, 0.3, mode, f"lambda ({mode})")
        S.att(X, lam["out"], True, mode, f"attention ({mode})")
    lam = S.lam(LV, 0.3, "grad", "lambda (training)")
    out = S.att(X, lam["out"], True, "grad", "attention (training)")
    S.backward([out])


def run_sequence(path, name, group, f):
    S = Session(path, name, group)
    try:
        f(S)
        S.final()
    except Abort:
        pass
    return S.fails


# ====================================================================== worker (one file, one process)
def worker(path: Path) -> dict:
    torch.set_num_threads(1)
    try:
        load_fresh(path)
    except BaseException as exc:  # noqa: BLE001
        return {"load_error": f"{type(exc).__name__}: {exc}"}
    fresh = []
    for key in FRESH_ATT:
        fresh += fresh_att(path, key)
    for key in FRESH_LAM:
        fresh += fresh_lam(path, key)
    seqs = {}
    for name, group, f in SEQUENCES:
        seqs[name] = {"group": group, "fails": run_sequence(path, name, group, f)}
    return {"load_error": None, "fresh": fresh, "seqs": seqs}


def run_worker(path: Path) -> dict:
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--worker", str(path)],
                          capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except Exception:  # noqa: BLE001
        return {"load_error": "worker crashed: " + proc.stderr.strip()[-300:]}


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


def describe(fails, limit=3):
    seqs = sorted({f["seq"] for f in fails})
    return f"{len(seqs)} sequence(s): " + ", ".join(seqs[:limit]) + ("..." if len(seqs) > limit else "")


def confirm(lab, res):
    if res.get("load_error"):
        return False, "does not load: " + res["load_error"][:80]
    fresh = res["fresh"]
    all_seq = [f for s in res["seqs"].values() for f in s["fails"]]
    if lab["correct"]:
        bad = fresh + all_seq
        if not bad:
            return True, f"{len(FRESH_ATT) + len(FRESH_LAM)} fresh calls and {len(res['seqs'])} sequences pass"
        f = bad[0]
        return False, f"fails {len(bad)} checks, e.g. {f['seq']} / {f['step']}: {f['detail']}"
    if fresh:
        f = fresh[0]
        return False, f"a fresh single call fails: {f['seq']} {f['detail']}"
    fn, tier, comp = lab["function"], lab["tier"], lab["component"]
    other = LAM if fn == ATT else ATT
    other_fails = [f for s in res["seqs"].values() if s["group"] == other for f in s["fails"]]
    if other_fails:
        return False, f"{other} sequences fail: {other_fails[0]['seq']} {other_fails[0]['detail']}"
    mine = [f for s in res["seqs"].values() if s["group"] in (fn, "both") for f in s["fails"]]
    if not mine:
        return False, "every sequence passes"
    kinds = {f["kind"] for f in mine}
    note = describe(mine) + f"; kinds {sorted(kinds)}"
    if tier == "T1":
        ok = comp in kinds
        return ok, note + ("" if ok else f"; no {comp} failure")
    if tier == "T2":
        if kinds & CONTRACT_KINDS:
            return False, note + "; a contract check fails too"
        values = [f for f in mine if f["kind"] == "value"]
        if not values:
            return False, note + "; no wrong value"
        if comp == "dtype":
            ok = all(f.get("f64") and f.get("err", 1) <= TOL32 for f in values)
            return ok, note + ("; only float64 values, right to float32 accuracy" if ok else "; not a precision loss")
        if comp == "mask":
            ok = all(f["any_causal"] for f in values)
            return ok, note + ("; every failing sequence uses the causal mask" if ok else "; fails without a mask")
        return True, note
    # T3
    forward = kinds & (CONTRACT_KINDS | {"value", "exc"})
    if forward:
        return False, note + "; forward checks fail too"
    grads = [f for f in mine if f["kind"] in ("grad", "grad_none", "backward_exc")]
    if not grads:
        return False, note + "; no gradient failure"
    if comp == "coefficient":
        # in the sequences that feed lambda into attention, lambda's vectors sit behind the coefficient
        ok = all(f.get("input") == "coefficient" or str(f.get("input")).startswith("lambda.") for f in grads)
        return ok, note + ("; only the coefficient's gradient" if ok else "; other gradients wrong too")
    if comp == "graph":
        ok = "grad_none" in kinds
        return ok, note + ("; a trainable input gets no gradient" if ok else "; every input gets a gradient")
    if comp == "backward":
        ok = "grad_none" not in kinds
        return ok, note + ("; every input gets a gradient, some wrong" if ok else "; some gradient missing")
    return True, note


def main(argv) -> int:
    start = time.time()
    if argv[:1] == ["--worker"]:
        print(json.dumps(worker(Path(argv[1]))))
        return 0
    self_test_oracle()
    if argv[:1] == ["--file"]:
        res = run_worker(Path(argv[1]).resolve())
        if res.get("load_error"):
            print("load error:", res["load_error"])
            return 1
        fails = res["fresh"] + [f for s in res["seqs"].values() for f in s["fails"]]
        for f in fails:
            print(f"{f['seq']:<40} {f['kind']:<12} {f['step']}: {f['detail']}")
        print(f"{len(fails)} failures; {time.time() - start:.1f} s")
        return 1 if fails else 0
    labels = json.loads((HERE / "labels.json").read_text())
    only = set(argv)
    files = {f"{p.parent.name}/{p.stem}" for d in ("correct", "wrong") for p in (HERE / d).glob("*.py")}
    problems = [f"{k}: file without a label" for k in sorted(files - labels.keys())]
    problems += [f"{k}: label without a file" for k in sorted(labels.keys() - files)]
    for key in sorted(files):
        for line in (HERE / (key + ".py")).read_text().splitlines():
            s = line.strip()
            if s.startswith(("import ", "from ")) and not s.startswith(
                    ("import math", "import torch", "import functools", "import typing",
                     "from __future__", "from torch", "from math", "from functools", "from typing")):
                problems.append(f"{key}: imports something else: {s}")
        text = (HERE / (key + ".py")).read_text()
        for call in ("check_lambda_inputs(q1, k1, q2, k2)\n", "check_attention_inputs(q1, k1, q2, k2, value, coefficient)\n"):
            if call not in text:
                problems.append(f"{key}: supplied validation call missing: {call.strip()}")
    keys = [k for k in sorted(labels) if k in files and (not only or k in only or k.split("/")[-1] in only)]
    with ThreadPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1))) as pool:
        results = dict(zip(keys, pool.map(lambda k: run_worker(HERE / (k + ".py")), keys)))
    rows = []
    for key in keys:
        lab = labels[key]
        errs = schema_errors(lab)
        if errs:
            rows.append((key, "-", False, "schema: " + "; ".join(errs)))
            continue
        tag = "correct" if lab["correct"] else f"{lab['tier']} {lab['component']}"
        ok, obs = confirm(lab, results[key])
        rows.append((key, tag, ok, obs))
    width = max(len(r[0]) for r in rows)
    print(f"{'file':<{width}}  {'label':<15}  ok   observed")
    for key, tag, ok, obs in rows:
        print(f"{key:<{width}}  {tag:<15}  {'yes' if ok else 'NO ':<3}  {obs}")
    for p in problems:
        print("PROBLEM", p)
    wrong = [labels[k] for k, *_ in rows if not labels[k].get("correct")]
    n_ok = sum(1 for r in rows if r[2])
    print()
    print(f"{len(rows)} labelled files ({len(rows) - len(wrong)} correct, {len(wrong)} wrong); "
          f"{n_ok} confirmed, {len(rows) - n_ok} not confirmed; "
          f"{len(FRESH_ATT) + len(FRESH_LAM)} fresh calls and {len(SEQUENCES)} sequences per file; "
          f"{time.time() - start:.1f} s")
    for field in ("tier", "component", "function"):
        counts: dict[str, int] = {}
        for lab in wrong:
            counts[lab[field]] = counts.get(lab[field], 0) + 1
        print(f"  by {field}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return 0 if n_ok == len(rows) and not problems else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
