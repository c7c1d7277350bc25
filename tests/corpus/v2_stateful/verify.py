"""Check every label of the stateful DIFF V2 corpus against an independent oracle.

Usage (from the project root):   python tests/corpus/v2_stateful/verify.py [-v] [-j N]

Adapted from tests/corpus/v2_sealed/verify.py. The oracle is float64 numpy: a
forward pass for gqa_attention and diff_v2_attention and hand-derived
vector-Jacobian products, checked at start-up against central finite
differences (and the "shared value offset is scaled by 1 - sigmoid(l)"
identity). torch is only used to call the corpus files and to read the
gradients autograd produces.

Every corpus file is checked in its own subprocess (`verify.py --one FILE`),
and inside that process every single run executes the file's code in a NEW
module object, so that no state survives from one run to the next.

(a) Fresh single calls. For 11 shapes x causal True/False x float32/float64
    (plus large-logit and saturated-gate cases), each function is called ONCE
    on a freshly executed module, in grad mode (then backward) and in one of
    no_grad / inference_mode / plain-with-frozen-inputs, with strided layouts
    and some inputs frozen. Every file, wrong ones included, must pass:
    the bugs of this corpus only show in a sequence of calls.

(b) Call sequences. Each sequence runs on a freshly executed module and makes
    two (or more) calls, then re-checks EVERY output it got (so a first result
    that a later call overwrote is caught) and every gradient:
      same_twice[m]        the same tensors twice (m = plain, no_grad,
                           inference, grad with a backward after each call)
      refill_copy[m]       the same tensors, refilled with x.copy_(new) under
                           no_grad between the calls (an optimiser step)
      refill_data[m]       the same, through x.data.copy_(new): the version
                           counter does not move
      refill_one[n,m]      only input n refilled (copy_)
      realloc_new[m]       inputs freed, new tensors of the same shapes
      realloc_same_mem[m]  inputs freed and new tensors made with
                           torch.from_numpy on the SAME numpy buffers refilled
                           in place: same data_ptr, version 0 again
      other_dtype[a>b,m]   new tensors of the same shapes in the other dtype
      other_causal[m]      the same tensors with the other causal flag
      other_causal_new     new tensors with the other causal flag
      false_then_default   causal=False, then new tensors with causal left to
                           its default (True)
      microbatch[flags]    two grad-mode calls on different tensors, then ONE
                           backward through both results (same or mixed flags)
      microbatch_reverse   two grad-mode calls, then backward of the second
                           result and then of the first
      eval_then_train[m]   the same tensors (requiring grad) first under m
                           (no_grad / inference), then in grad mode + backward
      train_then_eval[m]   grad-mode call, a call under m, then backward of
                           the first result
      eval_then_train_new[m] as eval_then_train on different tensors
      large_then_normal[m] scaled logits all near 120 (float32) / 800
                           (float64), then ordinary inputs of the same shape
      layout_change[a>b,m] contiguous inputs then strided ones, and reverse
      shape_change[...]    T, Hkv, D, B changed between two calls
    Generic sequences run for five parameter sets (shape, dtype, causal,
    layouts), shape_change for seven pairs of shapes.

    Tiers, as in v2_sealed: T1 contract (no exception in a forward call, one
    tensor of the right shape and dtype, inputs unchanged in value, version
    counter and requires_grad, output attached to the graph when an input
    requires grad in grad mode); T2 forward values (every call, also re-read
    after the later calls); T3 gradients (an exception in backward or a
    missing .grad where one is due count as errors).

Allowance, elementwise (from v2_sealed): SAFETY * u * n * mag + SAFETY * n * tiny,
with u the unit roundoff, n = G*T + 2*D + L + 10 (L the largest |q|.|k|/sqrt(D)),
mag the same formula evaluated on absolute values.

Static checks: the file starts with the stub's header verbatim (docstring,
imports and supplied validation helpers), imports only torch, math,
functools, typing and __future__, and the first statement of each function
is the supplied validation call.

Labels are confirmed as follows.
  correct/<stem>: every fresh call and every sequence passes, both functions.
  wrong/<stem>:  every fresh call passes (both functions); at least one
     sequence fails; the earliest tier failed by any sequence is the label's
     tier; every WITNESS pattern (the label's "where") matches a sequence of
     the blamed function that fails that tier (T2/T3 by more than CLEAR times
     the allowance); every OUTSIDE pattern matches only passing sequences
     (both functions); a diff_v2_attention label needs gqa_attention to pass
     every sequence, a gqa_attention label needs gqa_attention to fail one.

Prints one row per file and a line starting with "RESULT:"; exits 1 when any
label is not confirmed.
"""

from __future__ import annotations

import ast
import concurrent.futures
import gc
import hashlib
import itertools
import json
import math
import os
import re
import subprocess
import sys
import time
import types
import warnings
import zlib

import numpy as np
import torch

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
REFERENCE = os.path.join(ROOT, "reference", "diff_v2_attention.py")   # sanity row
STUB = os.path.join(ROOT, "exercise", "diff_v2_attention.py")
GQA, DIFF = "gqa_attention", "diff_v2_attention"
SAFETY = 16.0
CLEAR = 10.0
TORCH_DT = {"f32": torch.float32, "f64": torch.float64}
NP_DT = {"f32": np.float32, "f64": np.float64}
UNIT = {"f32": 2.0 ** -24, "f64": 2.0 ** -53}
TINY = {"f32": float(np.finfo(np.float32).tiny), "f64": float(np.finfo(np.float64).tiny)}
COMPONENTS = {"grouping", "pairing", "gate", "layout", "scale", "output", "mask", "softmax",
              "stability", "graph", "dtype", "backward", "mutation"}
TIERS = ("T1", "T2", "T3")
NAMES = ("q", "k", "v", "lambda_logits")
ALLOWED_IMPORTS = {"torch", "math", "functools", "typing", "__future__"}
HEADER_LINES = 177   # the stub up to and including "# Your work starts here." and its rule


# =============================================================== oracle

def np_sigmoid(x):
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def np_gqa(q, k, v, causal):
    _, t, hq, d = q.shape
    hkv = k.shape[2]
    grp = hq // hkv
    heads = np.arange(hq) // grp
    kr, vr = k[:, :, heads], v[:, :, heads]
    s = np.einsum("bqhd,bkhd->bhqk", q, kr) / math.sqrt(d)
    lmax = float(np.einsum("bqhd,bkhd->bhqk", np.abs(q), np.abs(kr)).max()) / math.sqrt(d)
    if causal:
        s = np.where(np.triu(np.ones((t, t), bool), 1), -np.inf, s)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    out = np.einsum("bhqk,bkhd->bqhd", p, vr)
    mag = np.einsum("bhqk,bkhd->bqhd", p, np.abs(vr))
    return dict(q=q, kr=kr, vr=vr, p=p, out=out, mag=mag, grp=grp, hkv=hkv,
                n=grp * t + 2 * d + lmax + 10)


def _fold(x, hkv, grp):
    """Sum the gradients of the G query heads that share one key/value head."""
    b, t, _, d = x.shape
    return x.reshape(b, t, hkv, grp, d).sum(3)


def np_gqa_vjp(f, g, gabs):
    q, kr, vr, p = f["q"], f["kr"], f["vr"], f["p"]
    rd = math.sqrt(q.shape[-1])
    dp = np.einsum("bqhd,bkhd->bhqk", g, vr)
    adp = np.einsum("bqhd,bkhd->bhqk", gabs, np.abs(vr))
    ds = p * (dp - (p * dp).sum(-1, keepdims=True))
    ads = p * (adp + (p * adp).sum(-1, keepdims=True))
    grads = dict(q=np.einsum("bhqk,bkhd->bqhd", ds, kr) / rd,
                 k=_fold(np.einsum("bhqk,bqhd->bkhd", ds, q) / rd, f["hkv"], f["grp"]),
                 v=_fold(np.einsum("bhqk,bqhd->bkhd", p, g), f["hkv"], f["grp"]))
    mags = dict(q=np.einsum("bhqk,bkhd->bqhd", ads, np.abs(kr)) / rd,
                k=_fold(np.einsum("bhqk,bqhd->bkhd", ads, np.abs(q)) / rd, f["hkv"], f["grp"]),
                v=_fold(np.einsum("bhqk,bqhd->bkhd", p, gabs), f["hkv"], f["grp"]))
    return grads, mags


def oracle(fn, a, causal, g=None):
    f = np_gqa(a["q"], a["k"], a["v"], causal)
    if fn == GQA:
        res = dict(out=f["out"], mag=f["mag"], n=f["n"])
        if g is not None:
            res["grads"], res["mags"] = np_gqa_vjp(f, g, np.abs(g))
        return res
    lam = np_sigmoid(a["lambda_logits"])
    even, odd = f["out"][:, :, 0::2], f["out"][:, :, 1::2]
    res = dict(out=even - lam[..., None] * odd,
               mag=f["mag"][:, :, 0::2] + f["mag"][:, :, 1::2], n=f["n"] + 4)
    if g is not None:
        ga = np.empty_like(f["out"])
        ga[:, :, 0::2] = g
        ga[:, :, 1::2] = -lam[..., None] * g
        grads, mags = np_gqa_vjp(f, ga, np.repeat(np.abs(g), 2, axis=2))
        grads["lambda_logits"] = -(g * odd).sum(-1) * lam * np_sigmoid(-a["lambda_logits"])
        mags["lambda_logits"] = (np.abs(g) * f["mag"][:, :, 1::2]).sum(-1)
        res["grads"], res["mags"] = grads, mags
    return res


def self_check():
    """Oracle VJPs against central finite differences; the offset identity."""
    rng = np.random.default_rng(11)
    worst, eps = 0.0, 1e-6
    for fn, shape, causal in itertools.product((GQA, DIFF), ((1, 3, 4, 2, 2), (2, 2, 4, 1, 3),
                                                             (1, 4, 6, 3, 2)), (True, False)):
        b, t, hq, hkv, d = shape
        a = {"q": rng.standard_normal((b, t, hq, d)), "k": rng.standard_normal((b, t, hkv, d)),
             "v": rng.standard_normal((b, t, hkv, d))}
        if fn == DIFF:
            a["lambda_logits"] = 2.0 * rng.standard_normal((b, t, hq // 2))
        g = rng.standard_normal(oracle(fn, a, causal)["out"].shape)
        grads = oracle(fn, a, causal, g)["grads"]
        for name, x in a.items():
            fd = np.empty_like(x)
            for i in np.ndindex(x.shape):
                x0 = x[i]
                x[i] = x0 + eps
                up = float((g * oracle(fn, a, causal)["out"]).sum())
                x[i] = x0 - eps
                dn = float((g * oracle(fn, a, causal)["out"]).sum())
                x[i] = x0
                fd[i] = (up - dn) / (2 * eps)
            worst = max(worst, float(np.abs(fd - grads[name]).max() / max(np.abs(fd).max(), 1e-3)))
    b, t, hq, hkv, d = 2, 5, 8, 2, 3
    a = {"q": rng.standard_normal((b, t, hq, d)), "k": rng.standard_normal((b, t, hkv, d)),
         "v": rng.standard_normal((b, t, hkv, d)), "lambda_logits": 3 * rng.standard_normal((b, t, 4))}
    off = rng.standard_normal(d)
    base = oracle(DIFF, a, True)["out"]
    a["v"] = a["v"] + off
    shifted = oracle(DIFF, a, True)["out"]
    ident = float(np.abs(shifted - base - (1 - np_sigmoid(a["lambda_logits"]))[..., None] * off).max())
    if worst > 1e-6 or ident > 1e-12:
        raise SystemExit(f"oracle self-check failed: finite differences {worst:.2e}, identity {ident:.2e}")
    return worst, ident


def compare(got, ref, mag, n, dt):
    got = np.asarray(got, dtype=np.float64)
    if got.shape != ref.shape:
        return math.inf, f"shape {got.shape} vs {ref.shape}"
    if not np.isfinite(got).all():
        return math.inf, "non-finite value"
    allow = SAFETY * UNIT[dt] * n * mag + SAFETY * n * TINY[dt]
    r = np.abs(got - ref) / allow
    i = np.unravel_index(int(np.argmax(r)), r.shape)
    return float(r[i]), f"at {tuple(int(j) for j in i)} got {got[i]:.6g} want {ref[i]:.6g}"


# =============================================================== inputs

L4 = ("contig", "bhtd", "sliced", "stepped", "tbhd")
L3 = ("contig", "bht", "sliced", "stepped", "tbh")
SATURATED = (-1000.0, -100.0, -30.0, -20.0, 0.0, 20.0, 30.0, 100.0, 1000.0)


def seed_of(*parts):
    return zlib.crc32(repr(parts).encode()) & 0x7FFFFFFF


def names_for(fn):
    return NAMES if fn == DIFF else NAMES[:3]


def diff_ok(shape):
    return (shape[2] // shape[3]) % 2 == 0


def gen_arrays(shape, dtype, seed, level=None, lam="normal", logit_max=None):
    """float64 arrays, already rounded to `dtype`."""
    rng = np.random.default_rng(seed)
    b, t, hq, hkv, d = shape
    if level is not None:
        # every query and key points along x: every scaled logit is close to `level`
        q = 0.1 * rng.standard_normal((b, t, hq, d))
        k = 0.1 * rng.standard_normal((b, t, hkv, d))
        amp = math.sqrt(abs(level) * math.sqrt(d))
        q[..., 0] += amp
        k[..., 0] += amp if level > 0 else -amp
    else:
        q, k = rng.standard_normal((b, t, hq, d)), rng.standard_normal((b, t, hkv, d))
        if logit_max:
            idx = np.arange(hq) // (hq // hkv)
            s = np.abs(np.einsum("bqhd,bkhd->bhqk", q, k[:, :, idx])).max() / math.sqrt(d)
            f = math.sqrt(logit_max / s)
            q, k = q * f, k * f
    a = {"q": q, "k": k, "v": rng.standard_normal((b, t, hkv, d))}
    if lam == "normal":
        a["lambda_logits"] = 2.0 * rng.standard_normal((b, t, hq // 2))
    elif lam == "saturated":
        a["lambda_logits"] = rng.choice(SATURATED, size=(b, t, hq // 2))
    else:
        a["lambda_logits"] = np.full((b, t, hq // 2), float(lam))
    return {n: x.astype(NP_DT[dtype]).astype(np.float64) for n, x in a.items()}


def tensor(x, dtype, layout, rng):
    """A leaf tensor holding x with the requested memory layout (from v2_sealed)."""
    base = torch.tensor(x, dtype=dtype)
    junk = lambda *s: torch.tensor(rng.uniform(-500, 500, s), dtype=dtype)  # noqa: E731
    if layout == "contig":
        out = base.clone()
    elif layout in ("bhtd", "bht"):
        out = base.transpose(1, 2).contiguous().transpose(1, 2)
    elif layout in ("tbhd", "tbh"):
        out = base.transpose(0, 1).contiguous().transpose(0, 1)
    elif layout == "sliced":
        if x.ndim == 4:
            buf = junk(x.shape[0], x.shape[1], x.shape[2] + 3, x.shape[3] + 2)
            buf[:, :, 2:-1, 1:-1] = base
            out = buf[:, :, 2:-1, 1:-1]
        else:
            buf = junk(x.shape[0], x.shape[1], x.shape[2] + 2)
            buf[:, :, 1:-1] = base
            out = buf[:, :, 1:-1]
    elif layout == "stepped":
        if x.ndim == 4:
            buf = junk(x.shape[0], 2 * x.shape[1], x.shape[2], 3 * x.shape[3])
            buf[:, 1::2, :, ::3] = base
            out = buf[:, 1::2, :, ::3]
        else:
            buf = junk(x.shape[0], 2 * x.shape[1], 2 * x.shape[2])
            buf[:, ::2, 1::2] = base
            out = buf[:, ::2, 1::2]
    else:
        raise ValueError(layout)
    assert torch.equal(out, base)
    return out.detach()


def layouts_for(spec, names, i=0):
    """spec: 'contig', one 4-D layout name for all, or 'mixed' (rotating, as in v2_sealed)."""
    if spec == "mixed":
        return {n: (L3 if n == "lambda_logits" else L4)[(i + 2 * j) % 5] for j, n in enumerate(names)}
    if spec in ("bhtd", "tbhd"):
        return {n: (spec[:3] if n == "lambda_logits" else spec) for n in names}
    return {n: spec for n in names}


# =============================================================== module loading

def compile_file(path):
    with open(path) as fh:
        src = fh.read()
    return compile(src, path, "exec")


_mod_ids = itertools.count()


def fresh_module(code, path):
    """Execute the file's code in a brand-new module object (no state shared with earlier runs)."""
    name = f"_stateful_v2_{next(_mod_ids)}"
    mod = types.ModuleType(name)
    mod.__file__ = path
    exec(code, mod.__dict__)
    return mod


def static_problems(path):
    """Header verbatim, allowed imports only, validation call first in each function."""
    problems = []
    with open(path) as fh:
        src = fh.read()
    if os.path.exists(STUB):
        with open(STUB) as fh:
            head = "".join(fh.readlines()[:HEADER_LINES])
        if not src.startswith(head):
            problems.append("does not start with the stub's header verbatim")
    tree = ast.parse(src)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods = [a.name.split(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mods = [(node.module or "").split(".")[0]]
        else:
            continue
        bad = [m for m in mods if m not in ALLOWED_IMPORTS]
        if bad:
            problems.append(f"imports {bad}")
    wanted = {GQA: "check_gqa_inputs", DIFF: "check_diff_v2_inputs"}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in wanted:
            body = [s for s in node.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
            first = body[0] if body else None
            ok = (isinstance(first, ast.Expr) and isinstance(first.value, ast.Call)
                  and isinstance(first.value.func, ast.Name) and first.value.func.id == wanted[node.name])
            if not ok:
                problems.append(f"{node.name} does not start with {wanted[node.name]}(...)")
    return problems


# =============================================================== running

_ORACLE = {}


class Abort(Exception):
    """A forward call broke the contract: the rest of the sequence is meaningless."""


class Run:
    """One run (a fresh call or a sequence) of one function on one fresh module."""

    def __init__(self, mod, fn, dtype_default="f64"):
        self.mod, self.fn = mod, fn
        self.t1 = None
        self.err = {"T2": (0.0, ""), "T3": (0.0, "")}
        self.outs = []          # (tag, out, arrays, causal, dtype) re-checked at the end
        self.names = names_for(fn)

    # ---- bookkeeping
    def note(self, tier, ratio, msg):
        if tier == "T1":
            if self.t1 is None:
                self.t1 = msg
            return
        if ratio > self.err[tier][0] or (ratio == math.inf and not self.err[tier][1]):
            self.err[tier] = (ratio, msg)

    def ref(self, arrays, causal, g=None):
        """Oracle result, memoised on the arrays' contents (many runs share their inputs)."""
        h = hashlib.sha1()
        for n in sorted(arrays):
            h.update(n.encode())
            h.update(np.ascontiguousarray(arrays[n]).tobytes())
        if g is not None:
            h.update(b"g")
            h.update(np.ascontiguousarray(g).tobytes())
        key = (self.fn, bool(causal), h.hexdigest())
        if key not in _ORACLE:
            _ORACLE[key] = oracle(self.fn, arrays, causal, g)
        return _ORACLE[key]

    def result(self):
        return {"t1": self.t1, "T2": list(self.err["T2"]), "T3": list(self.err["T3"])}

    # ---- inputs
    def arrays(self, shape, dtype, *seed_parts, **kw):
        return gen_arrays(shape, dtype, seed_of(self.fn, *seed_parts), **kw)

    def tensors(self, arrays, dtype, layouts, grad=False, frozen=(), seed=0):
        rng = np.random.default_rng(seed + 5)
        ts = {n: tensor(arrays[n], TORCH_DT[dtype], layouts[n], rng) for n in self.names}
        if grad:
            for n, x in ts.items():
                if n not in frozen:
                    x.requires_grad_(True)
        return ts

    def cotangent(self, arrays, dtype, *seed_parts):
        b, t, hq, d = arrays["q"].shape
        shape = (b, t, hq // 2 if self.fn == DIFF else hq, d)
        g = np.random.default_rng(seed_of("g", self.fn, *seed_parts)).standard_normal(shape)
        return g.astype(NP_DT[dtype]).astype(np.float64)

    # ---- calls
    def call(self, tag, ts, causal, mode="plain", how="kw", arrays=None, dtype=None):
        args = [ts[n] for n in self.names]
        kwargs = {}
        if how == "pos":
            args.append(causal)
        elif how == "kw":
            kwargs["causal"] = causal
        elif how == "default":
            assert causal is True
        snap = {n: (x.detach().clone(), x._version, x.requires_grad) for n, x in ts.items()}
        f = getattr(self.mod, self.fn)
        try:
            if mode == "inference":
                with torch.inference_mode():
                    out = f(*args, **kwargs)
            elif mode == "no_grad":
                with torch.no_grad():
                    out = f(*args, **kwargs)
            else:
                out = f(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001
            self.note("T1", 0, f"[{tag}] raised {type(exc).__name__}: {str(exc)[:90]}")
            raise Abort from None
        for n, x in ts.items():
            if x._version != snap[n][1] or not torch.equal(x.detach(), snap[n][0]):
                self.note("T1", 0, f"[{tag}] modified input '{n}'")
                raise Abort
            if x.requires_grad != snap[n][2]:
                self.note("T1", 0, f"[{tag}] changed requires_grad of input '{n}'")
                raise Abort
        if not isinstance(out, torch.Tensor):
            self.note("T1", 0, f"[{tag}] returned {type(out).__name__}")
            raise Abort
        b, t, hq, d = ts["q"].shape
        oshape = (b, t, hq // 2 if self.fn == DIFF else hq, d)
        if tuple(out.shape) != oshape:
            self.note("T1", 0, f"[{tag}] shape {list(out.shape)} instead of {list(oshape)}")
            raise Abort
        if out.dtype != ts["q"].dtype or out.device.type != "cpu":
            self.note("T1", 0, f"[{tag}] returned {out.dtype}/{out.device} for {ts['q'].dtype}")
            raise Abort
        if mode == "plain" and any(x.requires_grad for x in ts.values()) and not out.requires_grad:
            self.note("T1", 0, f"[{tag}] output detached from the autograd graph")
            raise Abort
        if arrays is not None:
            self.outs.append((tag, out, arrays, causal, dtype))
            self.check_values(tag, out, arrays, causal, dtype)
        return out

    def check_values(self, tag, out, arrays, causal, dtype):
        ref = self.ref(arrays, causal)
        r, m = compare(out.detach().numpy(), ref["out"], ref["mag"], ref["n"], dtype)
        self.note("T2", r, f"[{tag}] values {m}")

    def recheck(self):
        """Every output of the sequence, read again after all the later calls."""
        for tag, out, arrays, causal, dtype in self.outs:
            self.check_values(f"{tag}, re-read at the end", out, arrays, causal, dtype)

    def backward(self, tag, outs, gs, dtype):
        try:
            torch.autograd.backward([o for o in outs],
                                    [torch.tensor(g, dtype=TORCH_DT[dtype]) for g in gs])
        except Exception as exc:  # noqa: BLE001
            self.note("T3", math.inf, f"[{tag}] backward raised {type(exc).__name__}: {str(exc)[:80]}")
            return False
        return True

    def check_grads(self, tag, ts, arrays, causal, g, dtype, frozen=()):
        ref = self.ref(arrays, causal, g)
        for n, x in ts.items():
            if n in frozen or not x.requires_grad:
                continue
            got = np.zeros(x.shape) if x.grad is None else x.grad.numpy()
            r, m = compare(got, ref["grads"][n], ref["mags"][n], ref["n"], dtype)
            self.note("T3", r, f"[{tag}] d{n}{' (None)' if x.grad is None else ''} {m}")

    @staticmethod
    def zero(ts):
        for x in ts.values():
            x.grad = None

    def refill(self, ts, arrays, dtype, how="copy", only=None):
        with torch.no_grad():
            for n, x in ts.items():
                if only is not None and n not in only:
                    continue
                new = torch.tensor(arrays[n], dtype=TORCH_DT[dtype])
                if how == "copy":
                    x.copy_(new)
                else:
                    x.data.copy_(new)


def fails(res, tier, clear=1.0):
    return res["t1"] is not None if tier == "T1" else res[tier][0] > clear


def failing_tiers(res, clear=1.0):
    return [t for t in TIERS if fails(res, t, clear)]


# =============================================================== (a) fresh single calls

FRESH_SHAPES = (  # B, T, Hq, Hkv, D
    (2, 5, 4, 2, 3),    # G = 2, H = 2
    (1, 1, 2, 1, 4),    # one token
    (2, 6, 8, 2, 4),    # G = 4
    (1, 7, 3, 3, 5),    # Hkv = Hq, gqa only
    (2, 4, 6, 3, 2),    # H = 3
    (1, 9, 4, 1, 1),    # D = 1, Hkv = 1
    (1, 3, 1, 1, 2),    # one head, gqa only
    (1, 5, 8, 1, 2),    # G = 8, multi-query
    (2, 5, 8, 1, 2),    # multi-query with B = 2
    (1, 1, 8, 2, 2),    # one token, G = 4
    (2, 6, 4, 2, 1),    # D = 1 with two kv heads
)
FROZEN_SETS = (("q", "k"), ("v",), ("q", "k", "v"), ("lambda_logits",))


def fresh_cases():
    out, i = [], 0
    for shape, causal, dtype in itertools.product(FRESH_SHAPES, (True, False), ("f32", "f64")):
        out.append(dict(shape=shape, dtype=dtype, causal=causal, i=i, gen={}))
        i += 1
    for shape, dtype, causal, gen in (
            ((1, 40, 4, 2, 8), "f32", True, dict(logit_max=100.0)),
            ((1, 64, 8, 2, 4), "f64", False, {}),
            ((1, 100, 4, 2, 3), "f64", True, dict(lam="saturated")),
            ((2, 6, 8, 2, 4), "f32", False, dict(lam="saturated", logit_max=100.0)),
            ((2, 5, 4, 2, 3), "f32", True, dict(level=120.0)),
            ((2, 5, 4, 2, 3), "f64", True, dict(level=800.0)),
            ((1, 6, 8, 2, 2), "f32", False, dict(level=120.0)),
            ((1, 6, 8, 2, 2), "f64", False, dict(level=800.0)),
            ((2, 1, 4, 2, 3), "f32", True, dict(level=120.0)),
            ((2, 1, 4, 2, 3), "f64", True, dict(level=800.0)),
            ((1, 7, 3, 3, 5), "f32", True, dict(level=120.0)),
            ((1, 7, 3, 3, 5), "f64", True, dict(level=800.0)),
            ((2, 4, 6, 3, 2), "f64", True, dict(lam="saturated"))):
        out.append(dict(shape=shape, dtype=dtype, causal=causal, i=i, gen=gen))
        i += 1
    return out


def fresh_runs(code, path):
    """[(case id, fn, result)] for every single fresh call."""
    results = []
    for c in fresh_cases():
        i, shape, dtype, causal = c["i"], c["shape"], c["dtype"], c["causal"]
        how = ("pos", "kw", "default")[i % 3]
        if how == "default" and not causal:
            how = "kw"
        for fn in (GQA, DIFF):
            if fn == DIFF and not diff_ok(shape):
                continue
            names = names_for(fn)
            layouts = layouts_for("contig" if i % 4 == 0 else "mixed", names, i)
            frozen = FROZEN_SETS[i % 4] if i % 2 else ()
            if fn == GQA and set(frozen) >= {"q", "k", "v"}:
                frozen = ()
            if fn == GQA and frozen == ("lambda_logits",):
                frozen = ("k",)
            other = ("no_grad", "inference", "plain")[i % 3]
            for mode in ("grad", other):
                mod = fresh_module(code, path)
                r = Run(mod, fn)
                cid = f"fresh#{i}:{shape}:{dtype}:causal={causal}:{how}:{mode}" + (f":frozen={frozen}" if mode == "grad" and frozen else "")
                try:
                    a = r.arrays(shape, dtype, "fresh", i, **c["gen"])
                    ts = r.tensors(a, dtype, layouts, grad=(mode == "grad"), frozen=frozen, seed=i)
                    out = r.call("single", ts, causal, "plain" if mode == "grad" else mode, how,
                                 arrays=a, dtype=dtype)
                    if mode == "grad" and out.requires_grad:
                        g = r.cotangent(a, dtype, "fresh", i)
                        if r.backward("single", [out], [g], dtype):
                            r.check_grads("single", ts, a, causal, g, dtype, frozen)
                except Abort:
                    pass
                results.append((cid, fn, r.result()))
    return results


# =============================================================== (b) sequences

# parameter sets of the generic sequences: (shape, dtype, causal, layout spec)
PARAMS = (
    ((2, 5, 4, 2, 3), "f64", True, "contig"),
    ((2, 5, 4, 2, 3), "f32", False, "mixed"),
    ((1, 6, 8, 2, 2), "f64", False, "bhtd"),    # G = 4
    ((2, 1, 4, 2, 3), "f64", True, "contig"),   # a single token
    ((1, 7, 3, 3, 5), "f64", True, "mixed"),    # G = 1: gqa_attention only
)
MODES = ("plain", "no_grad", "inference", "grad")
OTHER = {"f32": "f64", "f64": "f32"}


class P:
    def __init__(self, k, shape, dtype, causal, layout):
        self.k, self.shape, self.dtype, self.causal, self.layout = k, shape, dtype, causal, layout


def _mode(m):
    """Call mode and whether the tensors require grad, for a sequence mode m."""
    return ("plain", True) if m == "grad" else (m, False)


def seq_same_twice(r, p, m):
    cm, grad = _mode(m)
    a = r.arrays(p.shape, p.dtype, "same", p.k)
    ts = r.tensors(a, p.dtype, layouts_for(p.layout, r.names, p.k), grad=grad, seed=1)
    for step in (1, 2):
        out = r.call(f"call {step}", ts, p.causal, cm, arrays=a, dtype=p.dtype)
        if grad:
            g = r.cotangent(a, p.dtype, "same", p.k, step)
            if r.backward(f"call {step}", [out], [g], p.dtype):
                r.check_grads(f"call {step}", ts, a, p.causal, g, p.dtype)
            r.zero(ts)


def seq_refill(r, p, m, how, only=None):
    cm, grad = _mode(m)
    a1 = r.arrays(p.shape, p.dtype, "refill", p.k, 1)
    a2 = r.arrays(p.shape, p.dtype, "refill", p.k, 2)
    if only is not None:
        a2 = {n: (a2[n] if n in only else a1[n]) for n in a1}
    ts = r.tensors(a1, p.dtype, layouts_for(p.layout, r.names, p.k), grad=grad, seed=2)
    for step, a in ((1, a1), (2, a2)):
        if step == 2:
            r.refill(ts, a2, p.dtype, how, only)
        out = r.call(f"call {step}", ts, p.causal, cm, arrays=a, dtype=p.dtype)
        if grad:
            g = r.cotangent(a, p.dtype, "refill", p.k, step)
            if r.backward(f"call {step}", [out], [g], p.dtype):
                r.check_grads(f"call {step}", ts, a, p.causal, g, p.dtype)
            r.zero(ts)


def seq_realloc_new(r, p, m):
    cm, grad = _mode(m)
    lay = layouts_for(p.layout, r.names, p.k)
    for step in (1, 2):
        a = r.arrays(p.shape, p.dtype, "realloc", p.k, step)
        ts = r.tensors(a, p.dtype, lay, grad=grad, seed=3)
        out = r.call(f"call {step}", ts, p.causal, cm, arrays=a, dtype=p.dtype)
        if grad:
            g = r.cotangent(a, p.dtype, "realloc", p.k, step)
            if r.backward(f"call {step}", [out], [g], p.dtype):
                r.check_grads(f"call {step}", ts, a, p.causal, g, p.dtype)
        del ts, out
        gc.collect(0)   # young generation only: a full collection is slow with torch loaded


def seq_realloc_same_memory(r, p, m):
    """torch.from_numpy on the same numpy buffers, refilled in place: same data_ptr, version 0."""
    cm, grad = _mode(m)
    transposed = p.layout != "contig"
    bufs, ptrs = {}, {}
    for step in (1, 2):
        a = r.arrays(p.shape, p.dtype, "samemem", p.k, step)
        ts = {}
        for n in r.names:
            x = a[n].astype(NP_DT[p.dtype])
            if n not in bufs:
                # a transposed layout: heads-major storage seen through a [B, T, H, ...] view
                bufs[n] = np.ascontiguousarray(np.swapaxes(x, 1, 2)) if transposed else np.empty_like(x)
            view = np.swapaxes(bufs[n], 1, 2) if transposed else bufs[n]
            np.copyto(view, x)
            ts[n] = torch.from_numpy(view)
            if grad:
                ts[n].requires_grad_(True)
        if step == 2:
            assert all(ts[n].data_ptr() == ptrs[n] and ts[n]._version == 0 for n in r.names)
        ptrs = {n: ts[n].data_ptr() for n in r.names}
        out = r.call(f"call {step}", ts, p.causal, cm, arrays=a, dtype=p.dtype)
        if grad:
            g = r.cotangent(a, p.dtype, "samemem", p.k, step)
            if r.backward(f"call {step}", [out], [g], p.dtype):
                r.check_grads(f"call {step}", ts, a, p.causal, g, p.dtype)
        del ts, out
        gc.collect(0)   # young generation only: a full collection is slow with torch loaded


def seq_other_dtype(r, p, m, first):
    cm, grad = _mode(m)
    lay = layouts_for(p.layout, r.names, p.k)
    for step, dt in ((1, first), (2, OTHER[first])):
        a = r.arrays(p.shape, dt, "dtype", p.k, step)
        ts = r.tensors(a, dt, lay, grad=grad, seed=4)
        out = r.call(f"call {step} ({dt})", ts, p.causal, cm, arrays=a, dtype=dt)
        if grad:
            g = r.cotangent(a, dt, "dtype", p.k, step)
            if r.backward(f"call {step}", [out], [g], dt):
                r.check_grads(f"call {step}", ts, a, p.causal, g, dt)


def seq_other_causal(r, p, m, new_tensors=False):
    cm, grad = _mode(m)
    lay = layouts_for(p.layout, r.names, p.k)
    a1 = r.arrays(p.shape, p.dtype, "causal", p.k, 1)
    a2 = r.arrays(p.shape, p.dtype, "causal", p.k, 2) if new_tensors else a1
    ts = r.tensors(a1, p.dtype, lay, grad=grad, seed=5)
    for step, a, causal in ((1, a1, p.causal), (2, a2, not p.causal)):
        if step == 2 and new_tensors:
            ts = r.tensors(a2, p.dtype, lay, grad=grad, seed=6)
        out = r.call(f"call {step} (causal={causal})", ts, causal, cm, arrays=a, dtype=p.dtype)
        if grad:
            g = r.cotangent(a, p.dtype, "causal", p.k, step)
            if r.backward(f"call {step}", [out], [g], p.dtype):
                r.check_grads(f"call {step}", ts, a, causal, g, p.dtype)
            r.zero(ts)


def seq_false_then_default(r, p):
    lay = layouts_for(p.layout, r.names, p.k)
    for step, causal, how in ((1, False, "kw"), (2, True, "default")):
        a = r.arrays(p.shape, p.dtype, "default", p.k, step)
        ts = r.tensors(a, p.dtype, lay, seed=7)
        r.call(f"call {step} ({'causal=False' if step == 1 else 'causal left to its default'})",
               ts, causal, "no_grad", how, arrays=a, dtype=p.dtype)


def seq_microbatch(r, p, mixed=False, reverse=False):
    lay = layouts_for(p.layout, r.names, p.k)
    flags = (p.causal, (not p.causal) if mixed else p.causal)
    runs = []
    for step, causal in zip((1, 2), flags):
        a = r.arrays(p.shape, p.dtype, "micro", p.k, step)
        ts = r.tensors(a, p.dtype, lay, grad=True, seed=8 + step)
        out = r.call(f"micro-batch {step} (causal={causal})", ts, causal, "plain", arrays=a, dtype=p.dtype)
        runs.append((ts, a, causal, out, r.cotangent(a, p.dtype, "micro", p.k, step)))
    if reverse:
        ok = all([r.backward(f"backward of micro-batch {s}", [runs[s - 1][3]], [runs[s - 1][4]], p.dtype)
                  for s in (2, 1)])
    else:
        ok = r.backward("one backward through both micro-batches", [x[3] for x in runs],
                        [x[4] for x in runs], p.dtype)
    if ok:
        for step, (ts, a, causal, _, g) in enumerate(runs, 1):
            r.check_grads(f"micro-batch {step}", ts, a, causal, g, p.dtype)


def seq_eval_then_train(r, p, m, new_tensors=False):
    lay = layouts_for(p.layout, r.names, p.k)
    a1 = r.arrays(p.shape, p.dtype, "evaltrain", p.k, 1)
    a2 = r.arrays(p.shape, p.dtype, "evaltrain", p.k, 2) if new_tensors else a1
    ts = r.tensors(a1, p.dtype, lay, grad=True, seed=10)
    r.call(f"call 1 ({m})", ts, p.causal, m, arrays=a1, dtype=p.dtype)
    if new_tensors:
        ts = r.tensors(a2, p.dtype, lay, grad=True, seed=11)
    out = r.call("call 2 (grad)", ts, p.causal, "plain", arrays=a2, dtype=p.dtype)
    g = r.cotangent(a2, p.dtype, "evaltrain", p.k)
    if r.backward("call 2", [out], [g], p.dtype):
        r.check_grads("call 2", ts, a2, p.causal, g, p.dtype)


def seq_train_then_eval(r, p, m):
    lay = layouts_for(p.layout, r.names, p.k)
    a = r.arrays(p.shape, p.dtype, "traineval", p.k)
    ts = r.tensors(a, p.dtype, lay, grad=True, seed=12)
    out = r.call("call 1 (grad)", ts, p.causal, "plain", arrays=a, dtype=p.dtype)
    r.call(f"call 2 ({m})", ts, p.causal, m, arrays=a, dtype=p.dtype)
    g = r.cotangent(a, p.dtype, "traineval", p.k)
    if r.backward("call 1, after call 2", [out], [g], p.dtype):
        r.check_grads("call 1", ts, a, p.causal, g, p.dtype)


def seq_large_then_normal(r, p, m):
    cm, grad = _mode(m)
    lay = layouts_for(p.layout, r.names, p.k)
    level = 120.0 if p.dtype == "f32" else 800.0
    for step in (1, 2):
        a = r.arrays(p.shape, p.dtype, "large", p.k, step, **({"level": level} if step == 1 else {}))
        ts = r.tensors(a, p.dtype, lay, grad=grad, seed=13)
        out = r.call(f"call {step} ({'logits near %g' % level if step == 1 else 'ordinary logits'})",
                     ts, p.causal, cm, arrays=a, dtype=p.dtype)
        if grad:
            g = r.cotangent(a, p.dtype, "large", p.k, step)
            if r.backward(f"call {step}", [out], [g], p.dtype):
                r.check_grads(f"call {step}", ts, a, p.causal, g, p.dtype)


def seq_layout_change(r, p, m, strided_first):
    cm, grad = _mode(m)
    specs = ("mixed", "contig") if strided_first else ("contig", "mixed")
    for step, spec in zip((1, 2), specs):
        a = r.arrays(p.shape, p.dtype, "layout", p.k, step)
        ts = r.tensors(a, p.dtype, layouts_for(spec, r.names, p.k + 1), grad=grad, seed=14)
        out = r.call(f"call {step} ({spec})", ts, p.causal, cm, arrays=a, dtype=p.dtype)
        if grad:
            g = r.cotangent(a, p.dtype, "layout", p.k, step)
            if r.backward(f"call {step}", [out], [g], p.dtype):
                r.check_grads(f"call {step}", ts, a, p.causal, g, p.dtype)


SHAPE_PAIRS = {
    "T7>T4": ((2, 7, 4, 2, 3), (2, 4, 4, 2, 3)),
    "T4>T7": ((2, 4, 4, 2, 3), (2, 7, 4, 2, 3)),
    "Hkv2>Hkv4": ((1, 5, 8, 2, 3), (1, 5, 8, 4, 3)),
    "Hkv4>Hkv2": ((1, 5, 8, 4, 3), (1, 5, 8, 2, 3)),
    "D3>D5": ((2, 5, 4, 2, 3), (2, 5, 4, 2, 5)),
    "B1>B3": ((1, 5, 4, 2, 3), (3, 5, 4, 2, 3)),
    "T5>T1": ((2, 5, 4, 2, 3), (2, 1, 4, 2, 3)),
}


def seq_shape_change(r, pair, m):
    cm, grad = _mode(m)
    for step, shape in zip((1, 2), SHAPE_PAIRS[pair]):
        a = r.arrays(shape, "f64", "shape", pair, step)
        ts = r.tensors(a, "f64", layouts_for("contig", r.names), grad=grad, seed=15)
        out = r.call(f"call {step} {shape}", ts, True, cm, arrays=a, dtype="f64")
        if grad:
            g = r.cotangent(a, "f64", "shape", pair, step)
            if r.backward(f"call {step}", [out], [g], "f64"):
                r.check_grads(f"call {step}", ts, a, True, g, "f64")


def sequences():
    """[(name, fn_filter or None, runner(r))]"""
    out = []
    for k, (shape, dtype, causal, layout) in enumerate(PARAMS):
        p = P(k, shape, dtype, causal, layout)
        tag = f"@P{k}"
        for m in MODES:
            out.append((f"same_twice[{m}]{tag}", p, lambda r, p=p, m=m: seq_same_twice(r, p, m)))
            out.append((f"refill_copy[{m}]{tag}", p, lambda r, p=p, m=m: seq_refill(r, p, m, "copy")))
            out.append((f"refill_data[{m}]{tag}", p, lambda r, p=p, m=m: seq_refill(r, p, m, "data")))
            out.append((f"realloc_new[{m}]{tag}", p, lambda r, p=p, m=m: seq_realloc_new(r, p, m)))
            out.append((f"realloc_same_mem[{m}]{tag}", p,
                        lambda r, p=p, m=m: seq_realloc_same_memory(r, p, m)))
        for n in NAMES:
            for m in ("no_grad", "grad"):
                out.append((f"refill_one[{n},{m}]{tag}", p,
                            lambda r, p=p, m=m, n=n: seq_refill(r, p, m, "copy", only=(n,))))
        for first in ("f32", "f64"):
            for m in ("no_grad", "grad"):
                out.append((f"other_dtype[{first}>{OTHER[first]},{m}]{tag}", p,
                            lambda r, p=p, m=m, first=first: seq_other_dtype(r, p, m, first)))
        for m in ("no_grad", "inference", "grad"):
            out.append((f"other_causal[{m}]{tag}", p, lambda r, p=p, m=m: seq_other_causal(r, p, m)))
        out.append((f"other_causal_new{tag}", p, lambda r, p=p: seq_other_causal(r, p, "no_grad", True)))
        out.append((f"false_then_default{tag}", p, lambda r, p=p: seq_false_then_default(r, p)))
        out.append((f"microbatch[same_flag]{tag}", p, lambda r, p=p: seq_microbatch(r, p)))
        out.append((f"microbatch[mixed_flags]{tag}", p, lambda r, p=p: seq_microbatch(r, p, mixed=True)))
        out.append((f"microbatch_reverse{tag}", p, lambda r, p=p: seq_microbatch(r, p, reverse=True)))
        for m in ("no_grad", "inference"):
            out.append((f"eval_then_train[{m}]{tag}", p, lambda r, p=p, m=m: seq_eval_then_train(r, p, m)))
            out.append((f"train_then_eval[{m}]{tag}", p, lambda r, p=p, m=m: seq_train_then_eval(r, p, m)))
            out.append((f"eval_then_train_new[{m}]{tag}", p,
                        lambda r, p=p, m=m: seq_eval_then_train(r, p, m, True)))
        for m in ("no_grad", "grad"):
            out.append((f"large_then_normal[{m}]{tag}", p, lambda r, p=p, m=m: seq_large_then_normal(r, p, m)))
            for sf in (False, True):
                out.append((f"layout_change[{'strided>contig' if sf else 'contig>strided'},{m}]{tag}", p,
                            lambda r, p=p, m=m, sf=sf: seq_layout_change(r, p, m, sf)))
    for pair in SHAPE_PAIRS:
        for m in ("no_grad", "grad"):
            out.append((f"shape_change[{pair},{m}]", None, lambda r, pair=pair, m=m: seq_shape_change(r, pair, m)))
    return out


def applicable(fn, name, p):
    if fn == GQA and name.startswith("refill_one[lambda_logits"):
        return False
    if fn == DIFF:
        if p is not None and not diff_ok(p.shape):
            return False
        if p is None:
            pair = name[len("shape_change["):].split(",")[0]
            return all(diff_ok(s) for s in SHAPE_PAIRS[pair])
    return True


def sequence_runs(code, path):
    """{sequence name: {fn: result}}"""
    results = {}
    for name, p, runner in sequences():
        for fn in (GQA, DIFF):
            if not applicable(fn, name, p):
                continue
            mod = fresh_module(code, path)
            r = Run(mod, fn)
            try:
                runner(r)
            except Abort:
                pass
            else:
                r.recheck()
            results.setdefault(name, {})[fn] = r.result()
            del mod, r
    return results


def check_one(path):
    """Everything for one file, in this (fresh) process; returns a JSON-able dict."""
    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    code = compile_file(path)
    t0 = time.time()
    fresh = fresh_runs(code, path)
    seqs = sequence_runs(code, path)
    return {"fresh": fresh, "seqs": seqs, "seconds": time.time() - t0}


# =============================================================== witnesses

# For every wrong file: the sequences (patterns on the names above, '*' the only wildcard) that
# its label's "where" says must expose the bug at the label's tier, and the
# sequences outside its "where", which must pass for both functions.
WITNESS = {
    "wrong/eval_output_memo_keyed_by_id": ["refill_copy[no_grad]@*", "refill_data[inference]@*"],
    "wrong/eval_output_memo_keyed_by_data_ptr": ["refill_copy[no_grad]@*", "realloc_same_mem[inference]@*"],
    "wrong/eval_output_memo_keyed_by_ptr_and_version": ["refill_data[no_grad]@*", "realloc_same_mem[no_grad]@*"],
    "wrong/lru_cache_on_diff_v2_attention": ["eval_then_train[no_grad]@*", "eval_then_train[inference]@*"],
    "wrong/mask_bias_cache_key_misses_causal": ["other_causal[no_grad]@*", "other_causal_new@*"],
    "wrong/cached_lower_triangle_flipped_in_place": ["same_twice[plain]@P0", "realloc_new[no_grad]@P0"],
    "wrong/softmax_eps_taken_from_first_call_dtype": ["other_dtype[f32>f64,no_grad]@*"],
    "wrong/eval_gate_memo_keyed_by_shape": ["refill_one[lambda_logits,no_grad]@*", "realloc_new[inference]@*"],
    "wrong/gate_memo_on_lambda_tensor_checked_by_version": ["refill_data[no_grad]@*", "refill_data[inference]@*"],
    "wrong/autograd_fn_backward_reads_module_stash": ["microbatch[same_flag]@*", "microbatch_reverse@*"],
    "wrong/ctx_keeps_reused_odd_head_workspace": ["microbatch[same_flag]@*", "microbatch_reverse@*"],
    "wrong/checkpoint_recompute_reads_global_causal": ["microbatch[mixed_flags]@*"],
    "wrong/expanded_kv_copied_into_shared_workspace": ["microbatch[same_flag]@*", "microbatch_reverse@*"],
    "wrong/single_token_calls_append_to_kv_cache": ["realloc_new[no_grad]@P3", "realloc_new[grad]@P3",
                                                    "shape_change[T5>T1,no_grad]"],
    "wrong/bias_buffer_sliced_from_bottom_rows": ["shape_change[T7>T4,no_grad]", "shape_change[T7>T4,grad]"],
    "wrong/kv_index_memo_keyed_by_query_heads_only": ["shape_change[Hkv4>Hkv2,no_grad]",
                                                      "shape_change[Hkv4>Hkv2,grad]"],
    "wrong/eval_weights_memo_reused_by_training_call": ["eval_then_train[no_grad]@*",
                                                        "eval_then_train[inference]@*"],
    "wrong/grad_mode_sampled_once_at_first_call": ["eval_then_train[no_grad]@*", "eval_then_train_new[inference]@*"],
    "wrong/causal_mask_lru_cached_as_inference_tensor": ["eval_then_train_new[inference]@P0",
                                                         "eval_then_train[inference]@P0"],
    "wrong/inference_output_buffer_reused_across_calls": ["realloc_new[inference]@*", "refill_copy[inference]@*"],
    "wrong/online_softmax_row_max_not_reset": ["large_then_normal[no_grad]@*", "large_then_normal[grad]@*"],
    "wrong/contiguity_checked_on_first_call_only": ["layout_change[contig>strided,no_grad]@*",
                                                    "layout_change[contig>strided,grad]@*"],
    "wrong/gate_compute_dtype_pinned_at_first_call": ["other_dtype[f32>f64,no_grad]@*",
                                                      "other_dtype[f32>f64,grad]@*"],
    "wrong/default_causal_remembers_last_flag": ["false_then_default@*"],
}

OUTSIDE = {
    "wrong/eval_output_memo_keyed_by_id": ["*[grad]@*", "*[plain]@*", "microbatch*", "other_dtype*"],
    "wrong/eval_output_memo_keyed_by_data_ptr": ["*[grad]@*", "*[plain]@*", "microbatch*", "same_twice*",
                                                 "other_causal*"],
    "wrong/eval_output_memo_keyed_by_ptr_and_version": ["refill_copy*", "*[grad]@*", "*[plain]@*",
                                                        "same_twice*", "microbatch*"],
    "wrong/lru_cache_on_diff_v2_attention": ["realloc_new*", "realloc_same_mem*", "microbatch*", "other_dtype*",
                                             "eval_then_train_new*", "same_twice[no_grad]@*", "shape_change*"],
    "wrong/mask_bias_cache_key_misses_causal": ["same_twice*", "refill_*", "realloc_*", "microbatch[same_flag]*",
                                                "other_dtype*", "eval_then_train*"],
    "wrong/cached_lower_triangle_flipped_in_place": ["*@P1", "*@P2", "shape_change[T7>T4*",
                                                   "shape_change[T5>T1*"],
    "wrong/softmax_eps_taken_from_first_call_dtype": ["other_dtype[f64>f32*", "same_twice*", "refill_*",
                                                      "realloc_*", "microbatch*", "eval_then_train*"],
    "wrong/eval_gate_memo_keyed_by_shape": ["*[grad]@*", "*[plain]@*", "microbatch*",
                                            "refill_one[q,*", "refill_one[k,*", "refill_one[v,*"],
    "wrong/gate_memo_on_lambda_tensor_checked_by_version": ["refill_copy*", "realloc_*", "*[grad]@*",
                                                            "*[plain]@*", "refill_one*"],
    "wrong/autograd_fn_backward_reads_module_stash": ["same_twice*", "refill_*", "realloc_*", "other_dtype*",
                                                      "eval_then_train*"],
    "wrong/ctx_keeps_reused_odd_head_workspace": ["same_twice*", "refill_*", "realloc_*", "other_dtype*",
                                                  "eval_then_train*", "train_then_eval*"],
    "wrong/checkpoint_recompute_reads_global_causal": ["microbatch[same_flag]*", "same_twice*", "refill_*",
                                                       "realloc_*", "other_causal*"],
    "wrong/expanded_kv_copied_into_shared_workspace": ["same_twice*", "refill_*", "realloc_*", "other_causal*",
                                                       "eval_then_train*", "train_then_eval*"],
    "wrong/single_token_calls_append_to_kv_cache": ["*@P0", "*@P1", "*@P2", "*@P4", "same_twice[no_grad]*",
                                                    "refill_copy[no_grad]*", "realloc_same_mem[no_grad]*",
                                                    "other_dtype*", "shape_change[T7>T4*"],
    "wrong/bias_buffer_sliced_from_bottom_rows": ["*@P*", "shape_change[T4>T7*"],
    "wrong/kv_index_memo_keyed_by_query_heads_only": ["*@P*", "shape_change[T*", "shape_change[D*"],
    "wrong/eval_weights_memo_reused_by_training_call": ["eval_then_train_new*", "train_then_eval*", "refill_*",
                                                        "same_twice*", "microbatch*"],
    "wrong/grad_mode_sampled_once_at_first_call": ["train_then_eval*", "*[grad]@*", "microbatch*"],
    "wrong/causal_mask_lru_cached_as_inference_tensor": ["eval_then_train[no_grad]*", "train_then_eval*",
                                                         "same_twice*", "refill_*", "microbatch*", "*@P2"],
    "wrong/inference_output_buffer_reused_across_calls": ["*[no_grad]@*", "*[grad]@*", "*[plain]@*",
                                                          "same_twice[inference]*", "microbatch*"],
    "wrong/online_softmax_row_max_not_reset": ["same_twice*", "refill_*", "realloc_*", "microbatch*",
                                               "other_dtype*"],
    "wrong/contiguity_checked_on_first_call_only": ["layout_change[strided>contig*", "same_twice*", "refill_*",
                                                    "microbatch*", "other_dtype*"],
    "wrong/gate_compute_dtype_pinned_at_first_call": ["other_dtype[f64>f32*", "same_twice*", "refill_*",
                                                      "microbatch*", "realloc_*"],
    "wrong/default_causal_remembers_last_flag": ["other_causal*", "same_twice*", "refill_*", "microbatch*"],
}


# =============================================================== verdicts

def summarize(data):
    """Per function: fresh failures and failing sequences (name -> failing tiers, detail)."""
    fresh_fail = [(cid, fn, res) for cid, fn, res in data["fresh"] if failing_tiers(res)]
    seq_fail = {}
    for name, per_fn in data["seqs"].items():
        for fn, res in per_fn.items():
            tiers = failing_tiers(res)
            if tiers:
                seq_fail.setdefault(fn, {})[name] = (tiers, res)
    return fresh_fail, seq_fail


def describe(res):
    parts = []
    if res["t1"]:
        parts.append(f"T1 {res['t1']}")
    for t in ("T2", "T3"):
        if res[t][0] > 1:
            parts.append(f"{t} x{res[t][0]:.3g} {res[t][1]}")
    return "; ".join(parts) or "passes"


def judge(key, label, data):
    fresh_fail, seq_fail = summarize(data)
    n_fresh = len(data["fresh"])
    n_seq = sum(len(v) for v in data["seqs"].values())
    problems = []
    for cid, fn, res in fresh_fail[:3]:
        problems.append(f"fresh single call fails ({fn} {cid}): {describe(res)}")
    if label.get("correct") is True:
        for fn, fails_ in seq_fail.items():
            for name, (_, res) in list(fails_.items())[:3]:
                problems.append(f"sequence {name} fails ({fn}): {describe(res)}")
        return problems, f"{n_fresh} fresh calls and {n_seq} sequence runs pass", []
    fn, tier = label["function"], label["tier"]
    all_fail = [(f, name, tiers, res) for f, d in seq_fail.items() for name, (tiers, res) in d.items()]
    if not all_fail:
        problems.append("no sequence fails")
        return problems, "", []
    earliest = min(min(TIERS.index(t) for t in tiers) for _, _, tiers, _ in all_fail)
    if TIERS[earliest] != tier:
        ex = next((f, n, r) for f, n, tiers, r in all_fail if TIERS.index(tiers[0]) == earliest)
        problems.append(f"earliest failing tier is {TIERS[earliest]}, label says {tier} "
                        f"(e.g. {ex[1]} {ex[0]}: {describe(ex[2])})")
    if fn not in seq_fail:
        problems.append(f"{fn} fails no sequence")
    if fn == DIFF and GQA in seq_fail:
        name, (_, res) = next(iter(seq_fail[GQA].items()))
        problems.append(f"gqa_attention fails {name} although diff_v2_attention is blamed: {describe(res)}")
    clear = 1.0 if tier == "T1" else CLEAR
    for pat in WITNESS.get(key, []):
        hits = [n for n, (tiers, res) in seq_fail.get(fn, {}).items()
                if match(n, pat) and fails(res, tier, clear)]
        if not hits:
            problems.append(f"witness {pat} does not fail {tier} for {fn}")
    if not WITNESS.get(key):
        problems.append("no witness listed")
    for pat in OUTSIDE.get(key, []):
        for f, name, tiers, res in all_fail:
            if match(name, pat):
                problems.append(f"fails outside its where ({pat}): {name} {f}: {describe(res)}")
                break
    names = sorted({n for f, n, _, _ in all_fail if f == fn})
    detail = (f"{len(names)}/{len(data['seqs'])} sequences fail, e.g. "
              + ", ".join(names[:3]))
    return problems, detail, names


def match(name, pattern):
    """'*' is the only wildcard (brackets in sequence names are literal)."""
    return re.fullmatch(re.escape(pattern).replace(r"\*", ".*"), name) is not None


def run_child(path):
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", path],
                         capture_output=True, text=True)
    if out.returncode != 0:
        return {"error": (out.stderr or out.stdout)[-2000:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    verbose = "-v" in sys.argv
    jobs = int(sys.argv[sys.argv.index("-j") + 1]) if "-j" in sys.argv else (os.cpu_count() or 2)
    t0 = time.time()
    fd, ident = self_check()
    print(f"oracle self-check: VJP vs central differences {fd:.1e}, offset identity {ident:.1e}")
    with open(os.path.join(HERE, "labels.json")) as fh:
        labels = json.load(fh)
    files = sorted(f"{d}/{f[:-3]}" for d in ("correct", "wrong")
                   for f in os.listdir(os.path.join(HERE, d)) if f.endswith(".py"))
    failures = []
    if set(files) != set(labels):
        failures.append(("labels.json", f"files and labels differ: {sorted(set(files) ^ set(labels))}"))
    todo = [(key, os.path.join(HERE, key + ".py")) for key in files if key in labels]
    if os.path.exists(REFERENCE):
        todo.append(("(reference)", REFERENCE))
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as ex:
        datas = dict(zip([k for k, _ in todo], ex.map(lambda kp: run_child(kp[1]), todo)))
    rows, n_fresh, n_seq, seq_names = [], 0, 0, set()
    for key, path in todo:
        data = datas[key]
        label = labels.get(key, {"correct": True})
        problems = [] if key == "(reference)" else static_problems(path)
        if "error" in data:
            problems.append(f"checker crashed: {data['error'][-300:]}")
            detail, names = "", []
        else:
            n_fresh = max(n_fresh, len(data["fresh"]))
            n_seq = max(n_seq, sum(len(v) for v in data["seqs"].values()))
            seq_names |= set(data["seqs"])
            if label.get("correct") is not True:
                missing = [f for f in ("function", "tier", "component", "bug", "where") if not label.get(f)]
                if (missing or label["function"] not in (GQA, DIFF) or label["tier"] not in TIERS
                        or label["component"] not in COMPONENTS or not key.startswith("wrong/")):
                    problems.append(f"malformed label (missing {missing})")
                    detail, names = "", []
                else:
                    p2, detail, names = judge(key, label, data)
                    problems += p2
            else:
                if key != "(reference)" and not key.startswith("correct/"):
                    problems.append("labelled correct but not in correct/")
                p2, detail, names = judge(key, label, data)
                problems += p2
        fn = {GQA: "gqa", DIFF: "diff_v2"}.get(label.get("function"), "-")
        rows.append((key, label.get("tier", "-"), fn, label.get("component", "-"),
                     "NOT CONFIRMED" if problems else "confirmed", "; ".join(problems) or detail,
                     data.get("seconds", 0.0)))
        if problems:
            failures.append((key, "; ".join(problems)))
        if verbose and names:
            print(f"  {key}: failing sequences: {', '.join(names)}")
    width = max(len(r[0]) for r in rows)
    print(f"{'file':<{width}}  tier  function  component  verdict        detail")
    for key, tier, fn, comp, verdict, detail, _ in rows:
        print(f"{key:<{width}}  {tier:<4}  {fn:<8}  {comp:<9}  {verdict:<13}  "
              f"{detail if verbose else detail[:110]}")
    n_c = sum(r[0].startswith("correct/") for r in rows)
    n_w = sum(r[0].startswith("wrong/") for r in rows)
    n_ok = sum(1 for r in rows if r[0] != "(reference)" and r[4] == "confirmed")
    print(f"RESULT: {n_ok}/{n_c + n_w} labels confirmed ({n_c} correct, {n_w} wrong; "
          f"{n_fresh} fresh single calls and {n_seq} sequence runs ({len(seq_names)} sequences) per file) "
          f"in {time.time() - t0:.1f} s")
    for key, why in failures:
        print(f"FAILED {key}: {why}")
    return 1 if failures else 0


if __name__ == "__main__":
    warnings.simplefilter("ignore")  # deprecation notes and checkpoint hints from torch are not verdicts
    if len(sys.argv) >= 3 and sys.argv[1] == "--one":
        print(json.dumps(check_one(sys.argv[2])))
        sys.exit(0)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    sys.exit(main())
