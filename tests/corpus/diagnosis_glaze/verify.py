"""Check the glaze corpus against an independent float64 computation of the contract.

Run ``python tests/corpus/diagnosis_glaze/verify.py`` (every file plus a sanity
row for the instructor reference) or ``verify.py <stem> ...`` for some files.
One process, torch only. Every file is imported from its path and called on a
battery of attention and lambda runs:

* attention: shapes [B, H, T, D] from T = 1 to T = 200 (past the key blocks of
  64 and the 128-row threshold the files use), D from 1 to 64, H = 1 and H = T,
  a wide batch-times-heads shape (B * H * T = 67584), float32 and float64,
  causal and not, contiguous and strided inputs (token-major transposes and
  slices of a fused projection at a storage offset), Python float / int
  coefficients (negative, zero, one, > 1) and 0-dim tensor coefficients
  (float32, float64, int64, int8, a trainable zero; trainable or not),
  positional and keyword calls, grad mode with several subsets of trainable
  inputs, no_grad, inference_mode, frozen inputs, normal, large (float32
  overflow range) and huge (float64 overflow range) logits;
* lambda: D_lambda 1 to 64, float32 and float64, strided vectors, tied
  vectors, lambda_init 0.2, 0, negative and > 1, negative lambda, dot
  products near exp's float32 and float64 limits, the same grad modes.

Each run is checked in three stages, the first failure deciding its tier:
T1 contract (no exception, exact torch.Tensor type, shape, dtype, device, an
autograd graph exactly when one is expected, no input modified by the call or
by the backward pass: values, version counter, shape, strides,
requires_grad, .grad), T2 values against the float64 oracle, T3 gradients from
torch.autograd.grad with a random cotangent against analytic vector-Jacobian
products (themselves checked against float64 finite differences at start-up).

A correct file (and the reference) must pass every run. A wrong file must pass
every run of its other function and every run of the blamed function outside
the WHERE predicate written below for it, and at least one run inside WHERE
must fail at the labelled tier (T3 files must also give right values on every
run).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import os
import sys
import warnings

import torch

sys.dont_write_bytecode = True  # importing the submissions leaves no __pycache__ behind

HERE = os.path.dirname(os.path.abspath(__file__))
REFERENCE = os.path.normpath(os.path.join(HERE, "..", "..", "..", "reference", "diff_attention.py"))
F32, F64 = torch.float32, torch.float64
KEY_BLOCK = 64  # the block size of the streaming files, for the WHERE predicates

torch.set_num_threads(1)


# --------------------------------------------------------------------------
# oracles (float64, from the maths; independent of every submission)
# --------------------------------------------------------------------------


def _logits64(q, k):
    return torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])


def _softmax64(s, causal):
    if causal:
        t = s.shape[-1]
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    e = torch.exp(s - s.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)


def att_maps(q1, k1, q2, k2, causal):
    return _softmax64(_logits64(q1, k1), causal), _softmax64(_logits64(q2, k2), causal)


def att_oracle(q1, k1, q2, k2, v, lam, causal):
    a1, a2 = att_maps(q1, k1, q2, k2, causal)
    return torch.matmul(a1 - lam * a2, v)


def att_vjp(q1, k1, q2, k2, v, lam, causal, g):
    scale = 1.0 / math.sqrt(q1.shape[-1])
    a1, a2 = att_maps(q1, k1, q2, k2, causal)
    dp = torch.matmul(g, v.transpose(-2, -1))
    out = {"value": torch.matmul((a1 - lam * a2).transpose(-2, -1), g), "coefficient": -(a2 * dp).sum()}
    for qn, kn, a, q, k, w in (("q1", "k1", a1, q1, k1, 1.0), ("q2", "k2", a2, q2, k2, -lam)):
        da = w * dp
        ds = a * (da - (da * a).sum(dim=-1, keepdim=True))
        out[qn] = torch.matmul(ds, k) * scale
        out[kn] = torch.matmul(ds.transpose(-2, -1), q) * scale
    return out


def _dot_fsum(a, b):
    return math.fsum(x * y for x, y in zip(a.tolist(), b.tolist()))


def lam_oracle(q1, k1, q2, k2, init):
    e1, e2 = math.exp(_dot_fsum(q1, k1)), math.exp(_dot_fsum(q2, k2))
    return e1 - e2 + init, e1, e2


def lam_vjp(q1, k1, q2, k2, g):
    e1, e2 = math.exp(_dot_fsum(q1, k1)), math.exp(_dot_fsum(q2, k2))
    return {"q1": g * e1 * k1, "k1": g * e1 * q1, "q2": -g * e2 * k2, "k2": -g * e2 * q2}


def self_check_oracles():
    """The analytic VJPs against central finite differences in float64."""
    gen = torch.Generator().manual_seed(11)
    x = {n: torch.randn(2, 1, 5, 3, generator=gen, dtype=F64) for n in ("q1", "k1", "q2", "k2")}
    x["value"] = torch.randn(2, 1, 5, 6, generator=gen, dtype=F64)
    g = torch.randn(2, 1, 5, 6, generator=gen, dtype=F64)
    lam, eps = -0.7, 1e-6
    for causal in (True, False):
        an = att_vjp(x["q1"], x["k1"], x["q2"], x["k2"], x["value"], lam, causal, g)

        def f(ll):
            return float((att_oracle(x["q1"], x["k1"], x["q2"], x["k2"], x["value"], ll, causal) * g).sum())

        for name in ("q1", "k1", "q2", "k2", "value"):
            flat = x[name].reshape(-1)
            num = torch.empty_like(flat)
            for i in range(flat.numel()):
                old = float(flat[i])
                flat[i] = old + eps
                fp = f(lam)
                flat[i] = old - eps
                fm = f(lam)
                flat[i] = old
                num[i] = (fp - fm) / (2 * eps)
            assert torch.allclose(num, an[name].reshape(-1), atol=1e-6), name
        assert abs((f(lam + eps) - f(lam - eps)) / (2 * eps) - float(an["coefficient"])) < 1e-6
    v = {n: torch.randn(4, generator=gen, dtype=F64) * 0.5 for n in ("q1", "k1", "q2", "k2")}
    an = lam_vjp(v["q1"], v["k1"], v["q2"], v["k2"], -0.9)
    for name in v:
        for i in range(4):
            old = float(v[name][i])
            v[name][i] = old + eps
            fp = lam_oracle(v["q1"], v["k1"], v["q2"], v["k2"], 0.2)[0]
            v[name][i] = old - eps
            fm = lam_oracle(v["q1"], v["k1"], v["q2"], v["k2"], 0.2)[0]
            v[name][i] = old
            assert abs(-0.9 * (fp - fm) / (2 * eps) - float(an[name][i])) < 1e-6, name


# --------------------------------------------------------------------------
# inputs
# --------------------------------------------------------------------------

ATT_NAMES = ("q1", "k1", "q2", "k2", "value")
LAM_NAMES = ("q1", "k1", "q2", "k2")
NUMBER_COEFS = ("float", "int", "neg", "big", "zero", "one")


def _grad_context(mode):
    if mode == "no_grad":
        return torch.no_grad()
    if mode == "inference":
        return torch.inference_mode()
    return contextlib.nullcontext()


def _strided_attention(vals, layout):
    """Put [B, H, T, w] float tensors into strided memory and return views of it."""
    if layout == "fused":  # one [B, T, H, 6D] projection: value | q2 | k1 | q1 | k2 (offsets, permuted)
        b, h, t, d = vals["q1"].shape
        fused = torch.zeros(b, t, h, 6 * d, dtype=vals["q1"].dtype)
        cols = {"value": (0, 2 * d), "q2": (2 * d, 3 * d), "k1": (3 * d, 4 * d), "q1": (4 * d, 5 * d), "k2": (5 * d, 6 * d)}
        for n, (lo, hi) in cols.items():
            fused[..., lo:hi] = vals[n].transpose(1, 2)
        return {n: fused[..., lo:hi].transpose(1, 2) for n, (lo, hi) in cols.items()}
    # token-major: [B, T, H, w] storage seen as [B, H, T, w]
    return {n: x.transpose(1, 2).contiguous().transpose(1, 2) for n, x in vals.items()}


COEF_TABLE = {
    "float": (0.37, None),
    "int": (2, None),
    "neg": (-0.6, None),
    "big": (1.7, None),
    "zero": (0.0, None),
    "one": (1, None),
    "t32": (0.55, F32),
    "t64": (-0.45, F64),
    "t32_grad": (0.62, F32),
    "t64_grad": (1.3, F64),
    "tin_grad": (0.8, "input"),
    "t0_grad": (0.0, "input"),
    "int64_t": (3, torch.int64),
    "int8_t": (-2, torch.int8),
}


def make_coefficient(kind, dtype):
    """Return (coefficient object, its value as a Python float, trainable tensor?)."""
    val, tdt = COEF_TABLE[kind]
    if tdt is None:
        return val, float(val), False
    c = torch.tensor(val, dtype=dtype if tdt == "input" else tdt)
    trainable = kind.endswith("_grad")
    if trainable:
        c.requires_grad_(True)
    return c, float(c.detach().double()), trainable


class AttCase:
    def __init__(self, name, B, H, T, D, dtype=F32, causal=True, coef="float", layout="contig",
                 mode="grad", train=ATT_NAMES, logits="normal", seed=0, call="pos"):
        self.name, self.B, self.H, self.T, self.D = name, B, H, T, D
        self.dtype, self.causal, self.coef, self.layout = dtype, causal, coef, layout
        self.mode, self.train, self.logits, self.seed, self.call = mode, tuple(train), logits, seed, call

    def describe(self):
        return (f"{self.name}: B={self.B} H={self.H} T={self.T} D={self.D} "
                f"{'f32' if self.dtype == F32 else 'f64'} causal={self.causal} coef={self.coef} "
                f"layout={self.layout} mode={self.mode} train={','.join(self.train) or '-'} "
                f"logits={self.logits} call={self.call}")


class LamCase:
    def __init__(self, name, D, dtype=F32, init=0.2, layout="contig", mode="grad", train=LAM_NAMES,
                 kind="small", tied=None, seed=0):
        self.name, self.D, self.dtype, self.init, self.layout = name, D, dtype, init, layout
        self.mode, self.train, self.kind, self.tied, self.seed = mode, tuple(train), kind, tied, seed

    def describe(self):
        return (f"{self.name}: D={self.D} {'f32' if self.dtype == F32 else 'f64'} init={self.init} "
                f"layout={self.layout} mode={self.mode} train={','.join(self.train) or '-'} "
                f"kind={self.kind} tied={self.tied}")


_ATT_CACHE = {}


def build_attention(case):
    gen = torch.Generator().manual_seed(3000 + case.seed)
    b, h, t, d = case.B, case.H, case.T, case.D
    sigma = {"normal": 1.0, "large": math.sqrt(60.0), "huge": math.sqrt(400.0)}[case.logits]
    v64 = {n: torch.randn(b, h, t, d, generator=gen, dtype=F64) * sigma for n in ("q1", "k1", "q2", "k2")}
    v64["value"] = torch.randn(b, h, t, 2 * d, generator=gen, dtype=F64)
    vals = {n: x.to(case.dtype) for n, x in v64.items()}
    tensors = {n: x.clone() for n, x in vals.items()} if case.layout == "contig" else _strided_attention(vals, case.layout)
    if case.mode != "frozen":
        for n in case.train:
            tensors[n].requires_grad_(True)
    coef, lam, coef_trainable = make_coefficient(case.coef, case.dtype)
    if case.mode == "frozen" and coef_trainable:
        coef.requires_grad_(False)
        coef_trainable = False
    exact = {n: tensors[n].detach().to(F64) for n in ATT_NAMES}
    return tensors, coef, lam, coef_trainable, exact


def _vector_with_dot(gen, q, target):
    k = torch.randn(q.shape[0], generator=gen, dtype=F64)
    return k + (target - float(q @ k)) / float(q @ q) * q


def build_lambda(case):
    gen = torch.Generator().manual_seed(7000 + case.seed)
    d = case.D
    v = {n: torch.randn(d, generator=gen, dtype=F64) * 0.1 for n in LAM_NAMES}  # the paper's N(0, 0.1^2)
    if case.kind == "negative":  # exp(q2 . k2) well above exp(q1 . k1) + init
        v["k1"] = _vector_with_dot(gen, v["q1"], -0.4)
        v["k2"] = _vector_with_dot(gen, v["q2"], 1.1)
    elif case.kind == "near_limit":  # float32: e1 near 5e34; float64: near 1e304
        v["q1"] = torch.randn(d, generator=gen, dtype=F64)
        v["k1"] = _vector_with_dot(gen, v["q1"], 80.0 if case.dtype == F32 else 700.0)
        v["k2"] = _vector_with_dot(gen, v["q2"], 3.0)
    vals = {n: x.to(case.dtype) for n, x in v.items()}
    tensors = {}
    for n, x in vals.items():
        if case.layout == "strided":
            y = torch.empty_strided((d,), (3,), dtype=case.dtype)
            y.copy_(x)
        else:
            y = x.clone()
        tensors[n] = y
    if case.tied == "q1k1":  # one tensor passed as q1 and k1
        tensors["k1"] = tensors["q1"]
    elif case.tied == "pairs":  # q2 is q1 and k2 is k1: lambda == lambda_init
        tensors["q2"], tensors["k2"] = tensors["q1"], tensors["k1"]
    if case.mode != "frozen":
        for n in case.train:
            tensors[n].requires_grad_(True)
    exact = {n: tensors[n].detach().to(F64) for n in LAM_NAMES}
    return tensors, exact


# --------------------------------------------------------------------------
# running one case
# --------------------------------------------------------------------------


class Result:
    def __init__(self, stage="ok", kind="", msg=""):
        self.stage, self.kind, self.msg = stage, kind, msg

    def __repr__(self):
        return f"{self.stage}:{self.kind} {self.msg}"


def _snapshot(objs):
    snap = {}
    for n, x in objs.items():
        snap[n] = (x.detach().clone(), x._version, tuple(x.shape), x.stride(), x.storage_offset(),
                   x.requires_grad, None if x.grad is None else x.grad.clone(), x.dtype)
    return snap


def _changed(objs, snap):
    for n, (vals, ver, shape, stride, off, rg, grad, dt) in snap.items():
        x = objs[n]
        if tuple(x.shape) != shape or x.stride() != stride or x.storage_offset() != off or x.dtype != dt:
            return f"{n}: shape/strides/dtype changed"
        if x.requires_grad != rg:
            return f"{n}: requires_grad changed to {x.requires_grad}"
        if x._version != ver:
            return f"{n}: version counter changed ({ver} -> {x._version})"
        if not torch.equal(x.detach(), vals):
            return f"{n}: values changed"
        if (x.grad is None) != (grad is None) or (grad is not None and not torch.equal(x.grad, grad)):
            return f"{n}: .grad changed"
    return None


def _close(got, exp, tol):
    got = got.detach().to(F64)
    if got.shape != exp.shape:
        return False, f"shape {tuple(got.shape)} != {tuple(exp.shape)}"
    if not torch.isfinite(got).all():
        return False, "non-finite values"
    err = (got - exp).abs().max().item() if got.numel() else 0.0
    return err <= tol, f"max abs error {err:.3g} (allowed {tol:.3g})"


def _call_attention(fn, case, t, coef):
    if case.call == "kw_tail":
        return fn(t["q1"], t["k1"], t["q2"], t["k2"], value=t["value"], coefficient=coef, causal=case.causal)
    if case.call == "kw_all":
        return fn(q1=t["q1"], k1=t["k1"], q2=t["q2"], k2=t["k2"], value=t["value"], coefficient=coef,
                  causal=case.causal)
    return fn(t["q1"], t["k1"], t["q2"], t["k2"], t["value"], coef, case.causal)


def run_attention(fn, case):
    tensors, coef, lam, coef_trainable, exact = build_attention(case)
    expected = att_oracle(exact["q1"], exact["k1"], exact["q2"], exact["k2"], exact["value"], lam, case.causal)
    objs = dict(tensors)
    if isinstance(coef, torch.Tensor):
        objs["coefficient"] = coef
    snap = _snapshot(objs)
    trainable = [n for n in ATT_NAMES if tensors[n].requires_grad]
    if coef_trainable:
        trainable.append("coefficient")
    graph_expected = case.mode == "grad" and bool(trainable)
    try:
        with _grad_context(case.mode):
            out = _call_attention(fn, case, tensors, coef)
    except Exception as exc:  # noqa: BLE001
        return Result("T1", "raise", f"{type(exc).__name__}: {str(exc)[:120]}")
    if type(out) is not torch.Tensor:
        return Result("T1", "type", f"returned {type(out).__name__}")
    want_shape = (case.B, case.H, case.T, 2 * case.D)
    if tuple(out.shape) != want_shape:
        return Result("T1", "shape", f"shape {tuple(out.shape)} != {want_shape}")
    if out.dtype != case.dtype:
        return Result("T1", "dtype", f"dtype {out.dtype} != {case.dtype}")
    if out.device != tensors["q1"].device:
        return Result("T1", "device", str(out.device))
    if graph_expected and (not out.requires_grad or out.grad_fn is None):
        return Result("T1", "graph", "output not attached to the autograd graph")
    if not graph_expected and out.requires_grad:
        return Result("T1", "graph", "output requires grad although no graph was expected")
    changed = _changed(objs, snap)
    if changed:
        return Result("T1", "mutation", changed)
    vmax = float(exact["value"].abs().max())
    scale = vmax * (1.0 + abs(lam))
    if case.dtype == F32:
        smax = 1.0 + 3.0 * {"normal": 1.0, "large": 60.0, "huge": 400.0}[case.logits]
        tol = scale * (3e-6 + 2e-6 * smax) * (1 + case.T / 256)
    else:
        tol = scale * 1e-10
    ok, msg = _close(out, expected, tol)
    if not ok:
        return Result("T2", "values", msg)
    if not graph_expected:
        return Result()
    gen = torch.Generator().manual_seed(91 + case.seed)
    g64 = torch.randn(*want_shape, generator=gen, dtype=F64)
    g = g64.to(case.dtype)
    if case.seed % 2:  # a cotangent transposed in memory
        g = g.transpose(-2, -1).contiguous().transpose(-2, -1)
    inputs = [coef if n == "coefficient" else tensors[n] for n in trainable]
    try:
        grads = torch.autograd.grad(out, inputs, g, allow_unused=True)
    except Exception as exc:  # noqa: BLE001
        return Result("T3", "backward-raise", f"{type(exc).__name__}: {str(exc)[:120]}")
    changed = _changed(objs, snap)
    if changed:
        return Result("T1", "mutation-after-backward", changed)
    want = att_vjp(exact["q1"], exact["k1"], exact["q2"], exact["k2"], exact["value"], lam, case.causal,
                   g.detach().to(F64))
    for n, got in zip(trainable, grads):
        if got is None:
            return Result("T3", "missing-grad", f"no gradient for {n}")
        ref = want[n]
        gscale = float(ref.abs().max()) + 1e-3 * (1 + float(g64.abs().max()))
        # float32 gradients of saturated rows lose digits in proportion to the logit size
        spread = {"normal": 1.0, "large": 60.0, "huge": 400.0}[case.logits]
        tolg = gscale * (2e-4 * (1 + spread / 20) if F32 in (case.dtype, got.dtype) else 1e-9) * (1 + case.T / 64)
        ok, msg = _close(got.reshape(ref.shape), ref, tolg)
        if not ok:
            return Result("T3", "grad", f"{n}: {msg}")
    return Result()


def run_lambda(fn, case):
    tensors, exact = build_lambda(case)
    lam, e1, e2 = lam_oracle(exact["q1"], exact["k1"], exact["q2"], exact["k2"], case.init)
    snap = _snapshot(tensors)
    trainable = sorted({n for n in LAM_NAMES if tensors[n].requires_grad})
    graph_expected = case.mode == "grad" and bool(trainable)
    try:
        with _grad_context(case.mode):
            out = fn(tensors["q1"], tensors["k1"], tensors["q2"], tensors["k2"], case.init)
    except Exception as exc:  # noqa: BLE001
        return Result("T1", "raise", f"{type(exc).__name__}: {str(exc)[:120]}")
    if type(out) is not torch.Tensor:
        return Result("T1", "type", f"returned {type(out).__name__}")
    if tuple(out.shape) != ():
        return Result("T1", "shape", f"shape {tuple(out.shape)}")
    if out.dtype != case.dtype:
        return Result("T1", "dtype", f"dtype {out.dtype} != {case.dtype}")
    if graph_expected and (not out.requires_grad or out.grad_fn is None):
        return Result("T1", "graph", "lambda not attached to the autograd graph")
    if not graph_expected and out.requires_grad:
        return Result("T1", "graph", "lambda requires grad although no graph was expected")
    changed = _changed(tensors, snap)
    if changed:
        return Result("T1", "mutation", changed)
    eps = 6e-8 if case.dtype == F32 else 1.2e-16
    err1 = 4 * case.D * eps * float((exact["q1"] * exact["k1"]).abs().sum()) + 4 * eps
    err2 = 4 * case.D * eps * float((exact["q2"] * exact["k2"]).abs().sum()) + 4 * eps
    tol = e1 * err1 + e2 * err2 + 8 * eps * (e1 + e2 + abs(case.init)) + 1e-300
    got = float(out.detach().double())
    if not math.isfinite(got):
        return Result("T2", "values", f"non-finite lambda {got}")
    if abs(got - lam) > tol:
        return Result("T2", "values", f"lambda {got:.10g} != {lam:.10g} (allowed {tol:.2g})")
    if not graph_expected:
        return Result()
    g = 0.7 if case.seed % 2 else -1.3
    uniq = []
    for n in trainable:
        if not any(tensors[n] is tensors[m] for m in uniq):
            uniq.append(n)
    try:
        grads = torch.autograd.grad(out, [tensors[n] for n in uniq], torch.tensor(g, dtype=out.dtype),
                                    allow_unused=True)
    except Exception as exc:  # noqa: BLE001
        return Result("T3", "backward-raise", f"{type(exc).__name__}: {str(exc)[:120]}")
    changed = _changed(tensors, snap)
    if changed:
        return Result("T1", "mutation-after-backward", changed)
    want = lam_vjp(exact["q1"], exact["k1"], exact["q2"], exact["k2"], g)
    for n, got_g in zip(uniq, grads):
        if got_g is None:
            return Result("T3", "missing-grad", f"no gradient for {n}")
        ref = sum(want[m] for m in LAM_NAMES if tensors[m] is tensors[n])
        tolg = abs(g) * (e1 * (err1 + 4 * eps) * float(exact["k1"].abs().max() + exact["q1"].abs().max())
                         + e2 * (err2 + 4 * eps) * float(exact["k2"].abs().max() + exact["q2"].abs().max())) * 4 + 1e-300
        ok, msg = _close(got_g, ref, tolg)
        if not ok:
            return Result("T3", "grad", f"{n}: {msg}")
    return Result()


# --------------------------------------------------------------------------
# the batteries
# --------------------------------------------------------------------------

SHAPES = [
    ("typical", 1, 2, 6, 4),
    ("batch2", 2, 3, 5, 8),
    ("one_head", 1, 1, 7, 3),
    ("one_token", 2, 2, 1, 4),
    ("heads_eq_T", 1, 4, 4, 2),
    ("width1", 3, 2, 3, 1),
    ("width64", 2, 1, 9, 64),
    ("long70", 1, 2, 70, 4),
    ("long130", 1, 3, 130, 8),
    ("long200", 1, 2, 200, 4),
    ("wide_bh", 64, 32, 33, 2),
    ("one_head_t1", 1, 1, 1, 5),
]
COEFS = ["float", "t32_grad", "int", "t64_grad", "neg", "t32", "big", "int64_t", "zero", "tin_grad",
         "int8_t", "t64", "one", "t0_grad"]
MODES = [("grad", ATT_NAMES), ("no_grad", ATT_NAMES), ("grad", ("q1",)), ("inference", ATT_NAMES),
         ("grad", ("value",)), ("frozen", ()), ("grad", ("q2", "k2")), ("grad", ("k1", "value"))]
LAYOUTS = ["contig", "tokens", "contig", "fused"]


def attention_cases():
    cases, i = [], 0
    for name, b, h, t, d in SHAPES:
        for dtype in (F32, F64):
            for causal in (True, False):
                mode, train = MODES[i % len(MODES)]
                cases.append(AttCase(f"grid{i}-{name}", b, h, t, d, dtype, causal, COEFS[i % len(COEFS)],
                                     LAYOUTS[i % len(LAYOUTS)], mode, train, seed=i))
                i += 1
    extra = [
        # the typical small example: forward and backward, Python float coefficient
        AttCase("typical_example", 1, 2, 6, 4, F32, True, "float", "contig", "grad", ATT_NAMES, seed=101),
        # tensor coefficients, every input trainable
        AttCase("all_train_t64", 2, 2, 5, 3, F32, True, "t64_grad", "contig", "grad", ATT_NAMES, seed=102),
        AttCase("all_train_tin_f64", 1, 3, 6, 4, F64, False, "tin_grad", "tokens", "grad", ATT_NAMES, seed=103),
        AttCase("coef_only_t64", 1, 2, 5, 4, F64, True, "t64_grad", "contig", "grad", (), seed=104),
        AttCase("coef_only_t32", 1, 2, 5, 4, F32, False, "t32_grad", "contig", "grad", (), seed=105),
        AttCase("int8_coef_all_train", 1, 2, 6, 4, F32, True, "int8_t", "fused", "grad", ATT_NAMES, seed=106),
        AttCase("int64_coef_qk", 1, 2, 6, 4, F64, True, "int64_t", "contig", "grad", ("q1", "k2"), seed=107),
        # subsets of trainable inputs
        AttCase("qk_only", 1, 2, 6, 4, F32, True, "float", "contig", "grad", ("q1", "k1", "q2", "k2"), seed=108),
        AttCase("value_only", 2, 2, 6, 4, F64, True, "t32", "contig", "grad", ("value",), seed=109),
        AttCase("coef_and_value", 1, 2, 6, 4, F32, True, "t32_grad", "contig", "grad", ("value",), seed=110),
        AttCase("coef_and_q2", 1, 2, 6, 4, F64, False, "tin_grad", "tokens", "grad", ("q2",), seed=111),
        AttCase("t1_causal_grad", 2, 2, 1, 4, F32, True, "float", "contig", "grad", ATT_NAMES, seed=112),
        # zero coefficients
        AttCase("zero_tensor_all_train", 1, 2, 6, 4, F64, True, "t0_grad", "contig", "grad", ATT_NAMES, seed=113),
        AttCase("zero_tensor_coef_only", 1, 2, 6, 4, F32, False, "t0_grad", "contig", "grad", (), seed=114),
        AttCase("zero_number_q2", 1, 2, 6, 4, F32, True, "zero", "contig", "grad", ("q2", "value"), seed=115),
        AttCase("zero_number_value", 1, 2, 6, 4, F64, True, "zero", "contig", "grad", ("value",), seed=116),
        # graph-free calls
        AttCase("nograd_typical", 1, 2, 6, 4, F32, True, "float", "contig", "no_grad", ATT_NAMES, seed=117),
        AttCase("inference_f64", 2, 2, 5, 8, F64, False, "int", "fused", "inference", (), seed=118),
        AttCase("frozen_f64", 1, 2, 6, 4, F64, True, "big", "contig", "frozen", (), seed=119),
        AttCase("nograd_t1", 2, 2, 1, 4, F64, True, "neg", "contig", "no_grad", (), seed=120),
        # keyword calls
        AttCase("kw_value_only", 1, 2, 6, 4, F32, True, "float", "contig", "grad", ("value",), seed=121, call="kw_tail"),
        AttCase("kw_coef_only", 1, 2, 6, 4, F64, False, "tin_grad", "contig", "grad", (), seed=122, call="kw_tail"),
        AttCase("kw_all_train", 1, 2, 6, 4, F32, True, "t32_grad", "contig", "grad", ATT_NAMES, seed=123, call="kw_all"),
        AttCase("kw_q1_positional", 1, 2, 6, 4, F32, True, "float", "contig", "grad", ("q1", "value"), seed=124, call="kw_tail"),
        AttCase("kw_nograd", 1, 2, 6, 4, F64, True, "neg", "tokens", "no_grad", ATT_NAMES, seed=125, call="kw_all"),
        # long rows and multi-block coefficients
        AttCase("long130_all_train", 1, 2, 130, 4, F32, True, "float", "contig", "grad", ATT_NAMES, seed=126),
        AttCase("long200_q2k2", 1, 1, 200, 4, F64, False, "t64_grad", "tokens", "grad", ("q2", "k2"), seed=127),
        AttCase("long200_value_only", 1, 2, 200, 4, F32, True, "neg", "contig", "grad", ("value",), seed=128),
        AttCase("long130_nograd", 1, 2, 130, 4, F64, True, "big", "fused", "no_grad", (), seed=129),
        AttCase("long70_coef_one", 1, 2, 70, 4, F64, True, "one", "contig", "grad", ATT_NAMES, seed=130),
        AttCase("long70_zero", 1, 2, 70, 4, F32, False, "zero", "contig", "frozen", (), seed=131),
        AttCase("long130_zero_tensor", 1, 2, 130, 4, F64, True, "t0_grad", "contig", "grad", ("k1", "value"), seed=145),
        AttCase("long100_neg", 1, 2, 100, 8, F64, True, "neg", "contig", "inference", (), seed=132),
        # H = T, single head, D = 64
        AttCase("h_eq_t_causal", 2, 5, 5, 3, F32, True, "float", "contig", "grad", ATT_NAMES, seed=133),
        AttCase("width64_nc", 1, 2, 6, 64, F32, False, "float", "contig", "grad", ATT_NAMES, seed=134),
        AttCase("width32_causal", 1, 1, 5, 32, F64, True, "int", "contig", "grad", ATT_NAMES, seed=135),
        # wide batch x heads (B * H * T above 2^16), and just at it
        AttCase("wide_bh_grad", 64, 32, 33, 2, F32, True, "t32_grad", "contig", "grad", ("q1", "value"), seed=136),
        AttCase("bh_at_limit", 64, 32, 32, 2, F64, False, "float", "contig", "no_grad", (), seed=137),
        # large and huge logits
        AttCase("large_f32_causal", 1, 2, 6, 4, F32, True, "float", "contig", "no_grad", (), "large", seed=138),
        AttCase("large_f32_nc", 2, 2, 5, 8, F32, False, "t32", "tokens", "no_grad", (), "large", seed=139),
        AttCase("large_f32_long", 1, 2, 70, 4, F32, True, "float", "contig", "inference", (), "large", seed=140),
        AttCase("large_f64", 1, 2, 6, 4, F64, True, "float", "contig", "no_grad", (), "large", seed=141),
        AttCase("huge_f64_causal", 1, 2, 8, 4, F64, True, "neg", "contig", "no_grad", (), "huge", seed=142),
        AttCase("huge_f64_nc", 1, 2, 6, 4, F64, False, "neg", "contig", "no_grad", (), "huge", seed=143),
        AttCase("huge_f32", 1, 1, 4, 2, F32, True, "float", "contig", "inference", (), "huge", seed=144),
    ]
    return cases + extra


LAM_DIMS = (1, 4, 16, 64)
INITS = (0.2, 0.0, -0.3, 1.5, 0.8)
LMODES = [("grad", LAM_NAMES), ("no_grad", LAM_NAMES), ("grad", ("q1",)), ("inference", LAM_NAMES),
          ("frozen", ()), ("grad", ("k2",)), ("no_grad", ()), ("grad", ("q1", "k1", "q2"))]


def lambda_cases():
    cases, i = [], 0
    for d in LAM_DIMS:
        for dtype in (F32, F64):
            for layout in ("contig", "strided"):
                mode, train = LMODES[i % len(LMODES)]
                cases.append(LamCase(f"grid{i}-D{d}", d, dtype, INITS[i % len(INITS)], layout, mode, train,
                                     seed=i))
                i += 1
    extra = [
        LamCase("typical_example", 8, F32, 0.2, "contig", "grad", LAM_NAMES, seed=201),
        LamCase("all_train_f64", 16, F64, 0.2, "strided", "grad", LAM_NAMES, seed=202),
        LamCase("negative_f32", 4, F32, 0.2, "contig", "grad", LAM_NAMES, "negative", seed=203),
        LamCase("negative_f64", 16, F64, 0.1, "strided", "no_grad", (), "negative", seed=204),
        LamCase("near_limit_f32", 8, F32, 0.2, "contig", "grad", LAM_NAMES, "near_limit", seed=205),
        LamCase("near_limit_f64", 8, F64, 0.2, "contig", "no_grad", (), "near_limit", seed=206),
        LamCase("tied_q1k1", 6, F64, 0.3, "contig", "grad", LAM_NAMES, tied="q1k1", seed=207),
        LamCase("tied_pairs", 5, F32, 0.5, "contig", "grad", LAM_NAMES, tied="pairs", seed=208),
        LamCase("tied_pairs_nograd", 5, F64, 0.5, "contig", "no_grad", (), tied="pairs", seed=209),
        LamCase("keys_only", 6, F64, 0.2, "contig", "grad", ("k1", "k2"), seed=210),
        LamCase("queries_only", 6, F32, 0.2, "strided", "grad", ("q1", "q2"), seed=211),
        LamCase("init_zero", 4, F32, 0.0, "contig", "grad", LAM_NAMES, seed=212),
        LamCase("init_big_f64", 64, F64, 2.5, "strided", "grad", LAM_NAMES, seed=213),
        LamCase("frozen_f32", 4, F32, 0.2, "contig", "frozen", (), seed=214),
        LamCase("inference_f64", 4, F64, -0.3, "contig", "inference", (), seed=215),
    ]
    return cases + extra


# --------------------------------------------------------------------------
# WHERE predicates of the wrong files (what labels.json says in words)
# --------------------------------------------------------------------------


def _att_trainable(case):
    """Names that require grad in a grad-mode call (empty when no graph is recorded)."""
    if case.mode != "grad":
        return set()
    s = set(case.train)
    if case.coef.endswith("_grad"):
        s.add("coefficient")
    return s


def _coef_value(case):
    return float(COEF_TABLE[case.coef][0])


def _graph_expected(case):
    return bool(_att_trainable(case))


def _hidden_key_excess(case):
    """Largest (hidden logit - visible row maximum) over the key blocks holding visible keys of a row."""
    _t, _c, _l, _tr, exact = build_attention(case)
    t = case.T
    worst = -math.inf
    rows = torch.arange(t).unsqueeze(-1)
    cols = torch.arange(t)
    for q, k in (("q1", "k1"), ("q2", "k2")):
        s = _logits64(exact[q], exact[k])
        visible_max = s.masked_fill(cols > rows, float("-inf")).amax(dim=-1)
        block_end = torch.clamp((rows // KEY_BLOCK + 1) * KEY_BLOCK, max=t)  # end of the row's diagonal block
        hidden = (cols > rows) & (cols < block_end)
        if bool(hidden.any()):
            hidden_max = s.masked_fill(~hidden, float("-inf")).amax(dim=-1)
            worst = max(worst, float((hidden_max - visible_max).max()))
    return worst


def _lam_graph_expected(case):
    return case.mode == "grad" and bool(case.train)


def _lam_frozen_query(case):
    """q1 or q2 (the vectors the products are formed in) does not require grad at call time."""
    tensors, _e = build_lambda(case)
    return not (tensors["q1"].requires_grad and tensors["q2"].requires_grad)


def _lam_tied_pairs(case):
    return case.tied == "pairs"


# stem: (function, tier, where predicate, stages allowed inside WHERE besides the tier, kinds accepted for the tier)
WHERE = {
    "att_fn_recompute_coefficient_grad_for_numbers": ("differential_attention", "T3",
        lambda c: _graph_expected(c) and c.coef in NUMBER_COEFS, set(), {"backward-raise"}),
    "att_exponentials_released_through_data_long_rows": ("differential_attention", "T3",
        lambda c: c.T > 128 and bool(_att_trainable(c) & {"q1", "k1", "q2", "k2"}), set(), {"backward-raise"}),
    "att_no_graph_decorator_reads_positional_tensors": ("differential_attention", "T1",
        lambda c: c.call != "pos" and _graph_expected(c) and (
            c.call == "kw_all" or not (_att_trainable(c) & {"q1", "k1", "q2", "k2"})), set(), {"graph"}),
    "att_key_blocks_zipped_with_value_feature_splits": ("differential_attention", "T1",
        lambda c: c.T > KEY_BLOCK or 2 * c.D > KEY_BLOCK, set(), {"raise"}),
    "att_query_slabs_sized_from_element_budget": ("differential_attention", "T1",
        lambda c: c.B * c.H * c.T > 1 << 16, set(), {"raise"}),
    "att_key_blocks_hidden_keys_dropped_after_exp": ("differential_attention", "T2",
        lambda c: c.causal and _hidden_key_excess(c) > (40.0 if c.dtype == F32 else 600.0), {"T3"}, {"values"}),
    "att_graph_free_scratch_exponentials_summed_late": ("differential_attention", "T2",
        lambda c: not _graph_expected(c) and c.T > 1, set(), {"values"}),
    "att_key_blocks_coefficient_folded_into_accumulator": ("differential_attention", "T2",
        lambda c: c.T > KEY_BLOCK and (_coef_value(c) not in (0.0, 1.0) or "coefficient" in _att_trainable(c)),
        {"T3"}, {"values"}),
    "att_zero_coefficient_second_branch_skipped": ("differential_attention", "T3",
        lambda c: _coef_value(c) == 0.0 and bool(_att_trainable(c) & {"q2", "k2", "coefficient"}),
        {"T1"}, {"missing-grad"}),
    "att_fn_recompute_score_grad_in_map_buffer": ("differential_attention", "T3",
        lambda c: bool(_att_trainable(c) & {"q1", "k1", "q2", "k2"}) and (
            "value" in _att_trainable(c)
            or ("coefficient" in _att_trainable(c) and bool(_att_trainable(c) & {"q2", "k2"}))),
        set(), {"grad"}),
    "lam_fn_result_built_in_saved_exponential": ("differential_lambda", "T3",
        lambda c: _lam_graph_expected(c) and bool({"q1", "k1"} & set(c.train)
                                                 or (c.tied == "pairs" and {"q2", "k2"} & set(c.train))),
        set(), {"grad"}),
    "lam_products_in_place_unless_trainable": ("differential_lambda", "T1", _lam_frozen_query, set(), {"mutation"}),
    "lam_graph_free_dots_share_one_scratch": ("differential_lambda", "T2",
        lambda c: not _lam_graph_expected(c) and not _lam_tied_pairs(c), set(), {"values"}),
    "lam_fn_key_gradients_written_into_saved_queries": ("differential_lambda", "T1", _lam_graph_expected, {"T3"},
        {"mutation-after-backward"}),
}


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------


def load_module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def evaluate(mod, att_cases, lam_cases):
    att = [(c, run_attention(mod.differential_attention, c)) for c in att_cases]
    lam = [(c, run_lambda(mod.differential_lambda, c)) for c in lam_cases]
    return att, lam


def check_file(stem, label, att, lam):
    """Return (ok, summary)."""
    if label is None or label.get("correct"):
        bad = [(c, r) for c, r in att + lam if r.stage != "ok"]
        if bad:
            c, r = bad[0]
            return False, f"{len(bad)} failing run(s); first: {c.describe()} -> {r}"
        return True, f"passes all {len(att)} attention and {len(lam)} lambda runs"
    if stem not in WHERE:
        return False, "no WHERE entry"
    func, tier, where, also, kinds = WHERE[stem]
    if label["function"] != func or label["tier"] != tier:
        return False, "labels.json disagrees with the WHERE table"
    blamed, other = (att, lam) if func == "differential_attention" else (lam, att)
    other_bad = [(c, r) for c, r in other if r.stage != "ok"]
    if other_bad:
        c, r = other_bad[0]
        return False, f"other function fails: {c.describe()} -> {r}"
    witnesses, problems = [], []
    for c, r in blamed:
        inside = where(c)
        if not inside:
            if r.stage != "ok":
                problems.append(f"outside WHERE but fails: {c.describe()} -> {r}")
            continue
        if tier == "T3" and r.stage == "T2":
            problems.append(f"T3 file with wrong values: {c.describe()} -> {r}")
        if r.stage == "ok":
            continue
        if r.stage == tier and r.kind in kinds:
            witnesses.append((c, r))
        elif r.stage not in also:
            problems.append(f"inside WHERE, unexpected failure: {c.describe()} -> {r}")
    if problems:
        return False, problems[0] + (f" (+{len(problems) - 1} more)" if len(problems) > 1 else "")
    if not witnesses:
        return False, "no run inside WHERE fails at the labelled tier"
    c, r = witnesses[0]
    n_fail = sum(1 for _c, rr in blamed if rr.stage != "ok")
    return True, f"{n_fail} failing {func} run(s), {len(witnesses)} {tier} witness(es), e.g. {c.name}: {r.kind}"


def main(argv):
    stems = [a for a in argv if not a.startswith("-")]
    warnings.filterwarnings("ignore", category=UserWarning)  # the submissions' own warnings
    self_check_oracles()
    with open(os.path.join(HERE, "labels.json"), encoding="utf-8") as f:
        labels = json.load(f)
    files = []
    for sub in ("correct", "wrong"):
        for fn in sorted(os.listdir(os.path.join(HERE, sub))):
            if fn.endswith(".py"):
                stem = fn[:-3]
                if stems and stem not in stems:
                    continue
                files.append((f"{sub}/{stem}", os.path.join(HERE, sub, fn)))
    unlabelled = sorted(set(labels) - {k for k, _p in files}) if not stems else []
    att_cases, lam_cases = attention_cases(), lambda_cases()
    rows, passed, typical_pass = [], 0, []
    for key, path in files:
        label = labels.get(key)
        if label is None:
            rows.append((key, False, "missing from labels.json"))
            continue
        mod = load_module(path, "glaze_" + key.replace("/", "_"))
        att, lam = evaluate(mod, att_cases, lam_cases)
        ok, summary = check_file(key.split("/", 1)[1], label, att, lam)
        passed += ok
        rows.append((key, ok, summary))
        if key.startswith("wrong/"):
            typ = [r for c, r in att + lam if c.name == "typical_example"]
            if all(r.stage == "ok" for r in typ):
                typical_pass.append(key)
    for key in unlabelled:
        rows.append((key, False, "in labels.json but no such file"))
    ref_ok = None
    if not stems:
        mod = load_module(REFERENCE, "glaze_reference")
        att, lam = evaluate(mod, att_cases, lam_cases)
        ref_ok, summary = check_file("reference", None, att, lam)
        rows.append(("reference (sanity)", ref_ok, summary))
    width = max(len(k) for k, _o, _s in rows)
    for key, ok, summary in rows:
        print(f"{'PASS' if ok else 'FAIL'}  {key:<{width}}  {summary}")
    print(f"\n{passed}/{len(files)} corpus files behave as labelled"
          + ("" if ref_ok is None else f"; reference {'passes' if ref_ok else 'FAILS'}")
          + f" ({len(att_cases)} attention runs, {len(lam_cases)} lambda runs per file)")
    n_wrong = sum(k.startswith("wrong/") for k, _p in files)
    if n_wrong:
        print(f"wrong files right on the typical small example (B=1 H=2 T=6 D=4 float32 causal, float "
              f"coefficient, forward and backward; lambda D=8 float32): {len(typical_pass)}/{n_wrong}"
              + (": " + ", ".join(k.split("/", 1)[1] for k in typical_pass) if typical_pass else ""))
    all_ok = passed == len(files) and ref_ok is not False and not unlabelled
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
