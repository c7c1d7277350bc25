"""Check every label of the DIFF V2 acceptance corpus (v2_acceptance) against an independent oracle.

Usage (from this folder or anywhere):   python verify.py [-v] [-j N]

Adapted from tests/corpus/v2_practice/verify.py (itself adapted from
v2_sealed's). The oracle is float64 numpy: a
forward pass for gqa_attention and diff_v2_attention and hand-derived
vector-Jacobian products, checked at start-up against central finite
differences and the "shared value offset is scaled by 1 - sigmoid(l)"
identity. torch is only used to call the corpus files and read the gradients.
Neither the instructor reference nor the grader is used.

Every file is checked in its own fresh Python subprocess (python verify.py
--one <key>); inside it, every witness and "outside" case imports the file
afresh. Each (function, case) run makes these calls, in order, each on freshly
built tensors with the case's memory layouts:
  1. under torch.inference_mode(), inputs frozen;
  2. under torch.no_grad(), inputs requiring grad;
  3. plain, inputs frozen;
  4. plain, inputs requiring grad (except the case's "frozen" ones), then
     backward with a fixed cotangent;
  5. plain, inputs frozen; the same tensors halved in place and the function
     called again under torch.no_grad(); then those tensors are deleted, the
     memory released, and fresh tensors (same shapes and layouts, values
     scaled by 0.75) passed under torch.inference_mode() (buffers updated in
     place, memory freed and reused).

  T1 (contract): no exception, one tensor, right shape / dtype / device,
     inputs unchanged (values, version counter and requires_grad flag),
     output attached to the graph in call 4;
  T2 (forward): every call's values within the allowance of the oracle;
  T3 (gradients): gradients of the inputs that required grad within the
     allowance (a missing .grad counts as zeros; an exception in backward or
     a non-finite value is an infinite error).

Allowance, elementwise: SAFETY * u * n * mag + SAFETY * n * tiny (u the unit
roundoff of the case's dtype, n = G*T + 2*D + L + 10 with L the largest
|q|.|k|/sqrt(D), mag the same formula on absolute values).

Memory layouts: contiguous; heads-first storage ("bhtd"); token-major storage
("tbhd"); a slice of a larger junk-filled buffer on the head and feature axes
("sliced", non-zero storage offset); every second token and third feature
("stepped"); and a slice of a fused projection buffer [B, T, heads + 4, D]
("fused", non-zero storage offset, like q / k / v cut from one QKV matmul).

Labels are confirmed as follows.
  correct/<stem>: both functions pass every tier on the battery, every
     witness and every "outside" case.
  wrong/<stem>: on its witness (an input inside its "where") the blamed
     function fails the labelled tier (T1: any contract break; T2/T3: error
     above CLEAR times the allowance) and passes the tiers before it; on the
     whole battery neither function fails a tier earlier than the label; the
     "outside" inputs (outside its "where") pass everything; the function
     that is not blamed is clean in its own behaviour:
       - diff_v2_attention blamed: gqa_attention passes every tier on every
         input;
       - gqa_attention blamed: diff_v2_attention, with the module's
         gqa_attention replaced by a plain torch implementation written here,
         passes every tier on every input.

Prints one row per file and a line starting with "RESULT:"; exits 1 when any
label is not confirmed.
"""

from __future__ import annotations

import concurrent.futures
import gc
import importlib.util
import itertools
import json
import math
import os
import subprocess
import sys
import time
import warnings

import numpy as np
import torch

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
GQA, DIFF = "gqa_attention", "diff_v2_attention"
SAFETY = 16.0
CLEAR = 10.0
TORCH_DT = {"f32": torch.float32, "f64": torch.float64}
NP_DT = {"f32": np.float32, "f64": np.float64}
UNIT = {"f32": 2.0 ** -24, "f64": 2.0 ** -53}
TINY = {"f32": float(np.finfo(np.float32).tiny), "f64": float(np.finfo(np.float64).tiny)}
COMPONENTS = {"grouping", "pairing", "gate", "layout", "scale", "output", "mask", "softmax",
              "stability", "graph", "dtype", "backward", "mutation"}
_ids = itertools.count()


def load(path):
    spec = importlib.util.spec_from_file_location(f"_acceptance_v2_{next(_ids)}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


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


# =============================================================== inputs

L4 = ("contig", "bhtd", "sliced", "stepped", "tbhd", "fused")
L3 = ("contig", "bht", "sliced", "stepped", "tbh", "fused")
NAMES = ("q", "k", "v", "lambda_logits")
SATURATED = (-1000.0, -100.0, -30.0, -20.0, 0.0, 20.0, 30.0, 100.0, 1000.0)


def case(shape, dtype, causal, i, **extra):
    b, t, hq, hkv, d = shape
    fns = [GQA] + ([DIFF] if (hq // hkv) % 2 == 0 else [])
    names = NAMES if (hq // hkv) % 2 == 0 else NAMES[:3]
    if extra.pop("contig", False) or i % 4 == 0:
        layouts = {n: "contig" for n in names}
    else:
        layouts = {n: (L3 if n == "lambda_logits" else L4)[(i + 2 * j) % 6] for j, n in enumerate(names)}
    layouts.update(extra.pop("layouts", {}))
    mode = ("pos", "kw", "default")[i % 3]
    if mode == "default" and not causal:
        mode = "kw"
    c = dict(shape=shape, dtype=dtype, causal=causal, seed=3000 + 31 * i, layouts=layouts,
             mode=mode, fns=fns, id=f"c{i}")
    c.update(extra)
    return c


def arrays(c):
    rng = np.random.default_rng(c["seed"])
    b, t, hq, hkv, d = c["shape"]
    if "arrays" in c:
        a = c["arrays"](rng, c)
    else:
        a = {"q": rng.standard_normal((b, t, hq, d)), "k": rng.standard_normal((b, t, hkv, d)),
             "v": rng.standard_normal((b, t, hkv, d))}
        if c.get("logit_max"):
            idx = np.arange(hq) // (hq // hkv)
            s = np.abs(np.einsum("bqhd,bkhd->bhqk", a["q"], a["k"][:, :, idx])).max() / math.sqrt(d)
            f = math.sqrt(c["logit_max"] / s)
            a["q"], a["k"] = a["q"] * f, a["k"] * f
    if (hq // hkv) % 2 == 0 and "lambda_logits" not in a:
        lam = c.get("lam", "normal")
        if lam == "normal":
            a["lambda_logits"] = 2.0 * rng.standard_normal((b, t, hq // 2))
        elif lam == "saturated":
            a["lambda_logits"] = rng.choice(SATURATED, size=(b, t, hq // 2))
        else:
            a["lambda_logits"] = np.full((b, t, hq // 2), float(lam))
    return {n: x.astype(NP_DT[c["dtype"]]).astype(np.float64) for n, x in a.items()}


def tensor(x, dtype, layout, rng):
    """A leaf tensor holding x with the requested memory layout."""
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
    elif layout == "fused":
        if x.ndim == 4:
            buf = junk(x.shape[0], x.shape[1], x.shape[2] + 4, x.shape[3])
            buf[:, :, 4:] = base
            out = buf[:, :, 4:]
        else:
            buf = junk(x.shape[0], x.shape[1], x.shape[2] + 3)
            buf[:, :, 3:] = base
            out = buf[:, :, 3:]
    else:
        raise ValueError(layout)
    assert torch.equal(out, base)
    return out.detach()


# =============================================================== running

class Result:
    def __init__(self):
        self.t1 = None
        self.err = {"T2": (0.0, ""), "T3": (0.0, "")}

    def note(self, tier, ratio, msg):
        if ratio > self.err[tier][0]:
            self.err[tier] = (ratio, msg)

    def ratio(self, tier):
        return self.err[tier][0]


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


_CACHE = {}


def ref_for(fn, c, a, g, tag):
    key = (fn, c["id"], tag)
    if key not in _CACHE:
        _CACHE[key] = oracle(fn, a, c["causal"], g)
    return _CACHE[key]


CALLS = ("inference", "no_grad", "plain", "grad", "reused")
GRAD_CALLS = ("no_grad", "grad")


def _call(mod, fn, c, ts, names, mode):
    args, kwargs = [ts[n] for n in names], {}
    if c["mode"] == "pos":
        args.append(c["causal"])
    elif c["mode"] == "kw":
        kwargs["causal"] = c["causal"]
    if mode == "inference":
        with torch.inference_mode():
            return getattr(mod, fn)(*args, **kwargs)
    if mode == "no_grad":
        with torch.no_grad():
            return getattr(mod, fn)(*args, **kwargs)
    return getattr(mod, fn)(*args, **kwargs)


def _prime(mod, fn, c, dt):
    """Earlier calls a training or decoding loop might have made (no_grad, keyword causal)."""
    rng = np.random.default_rng(c["seed"] + 11)
    for shape, causal in c.get("prime", ()):
        b, t, hq, hkv, d = shape
        a = [rng.standard_normal((b, t, hq, d)), rng.standard_normal((b, t, hkv, d)),
             rng.standard_normal((b, t, hkv, d))]
        if fn == DIFF:
            a.append(2.0 * rng.standard_normal((b, t, hq // 2)))
        with torch.no_grad():
            getattr(mod, fn)(*[torch.tensor(x, dtype=dt) for x in a], causal=causal)


def run(mod, fn, c):
    """Run one function on one case (see the module docstring for the calls)."""
    res = Result()
    dt, dtk = TORCH_DT[c["dtype"]], c["dtype"]
    if c.get("prime"):
        try:
            _prime(mod, fn, c, dt)
        except Exception as exc:  # noqa: BLE001
            res.t1 = f"[prime] raised {type(exc).__name__}: {str(exc)[:90]}"
            return res
    a = arrays(c)
    names = NAMES if fn == DIFF else NAMES[:3]
    b, t, hq, _, d = c["shape"]
    oshape = (b, t, hq // 2 if fn == DIFF else hq, d)
    g = np.random.default_rng(c["seed"] + 7).standard_normal(oshape).astype(NP_DT[dtk]).astype(np.float64)
    base = ref_for(fn, c, a, g, "base")
    for call in CALLS:
        lrng = np.random.default_rng(c["seed"] + 3)
        ts = {n: tensor(a[n], dt, c["layouts"][n], lrng) for n in names}
        if call in GRAD_CALLS:
            for n, x in ts.items():
                if n not in c.get("frozen", ()):
                    x.requires_grad_(True)
        # "reused": call, halve the same tensors in place, call again under no_grad
        steps = [(call, base)] if call != "reused" else [
            ("plain", base), ("no_grad", ref_for(fn, c, {n: 0.5 * x for n, x in a.items()}, None, "halved")),
            ("inference", ref_for(fn, c, {n: (0.75 * x).astype(NP_DT[dtk]).astype(np.float64)
                                          for n, x in a.items()}, None, "fresh"))]
        for step, (mode, ref) in enumerate(steps):
            tag = call if call != "reused" else f"reused{step}"
            if call == "reused" and step == 1:
                with torch.no_grad():
                    for x in ts.values():
                        x.mul_(0.5)
            if call == "reused" and step == 2:
                del ts, out
                # tensors are reference counted: their memory is released here and reused below
                frng = np.random.default_rng(c["seed"] + 5)
                ts = {n: tensor((0.75 * a[n]).astype(NP_DT[dtk]).astype(np.float64), dt, c["layouts"][n], frng)
                      for n in names}
            snap = {n: (x.detach().clone(), x._version, x.requires_grad) for n, x in ts.items()}
            try:
                out = _call(mod, fn, c, ts, names, mode)
            except Exception as exc:  # noqa: BLE001
                res.t1 = f"[{tag}] raised {type(exc).__name__}: {str(exc)[:90]}"
                return res
            for n, x in ts.items():
                if x._version != snap[n][1] or not torch.equal(x.detach(), snap[n][0]):
                    res.t1 = f"[{tag}] modified input '{n}'"
                    return res
                if x.requires_grad != snap[n][2]:
                    res.t1 = f"[{tag}] changed requires_grad of input '{n}'"
                    return res
            if not isinstance(out, torch.Tensor):
                res.t1 = f"[{tag}] returned {type(out).__name__}"
                return res
            if tuple(out.shape) != oshape:
                res.t1 = f"[{tag}] shape {list(out.shape)} instead of {list(oshape)}"
                return res
            if out.dtype != dt or out.device.type != "cpu":
                res.t1 = f"[{tag}] returned {out.dtype}/{out.device} for {dt}"
                return res
            if call == "grad" and not out.requires_grad:
                res.t1 = "[grad] output detached from the autograd graph"
                return res
            r, m = compare(out.detach().numpy(), ref["out"], ref["mag"], ref["n"], dtk)
            res.note("T2", r, f"[{tag}] values {m}")
        if call != "grad":
            continue
        try:
            out.backward(torch.tensor(g, dtype=dt))
        except Exception as exc:  # noqa: BLE001
            res.note("T3", math.inf, f"backward raised {type(exc).__name__}: {str(exc)[:80]}")
            continue
        for n, x in ts.items():
            if n in c.get("frozen", ()):
                continue
            got = np.zeros(x.shape) if x.grad is None else x.grad.numpy()
            r, m = compare(got, base["grads"][n], base["mags"][n], base["n"], dtk)
            res.note("T3", r, f"d{n}{' (None)' if x.grad is None else ''} {m}")
    return res


def fails(res, tier, clear=1.0):
    return res.t1 is not None if tier == "T1" else res.ratio(tier) > clear


def earlier(tier):
    return {"T1": [], "T2": ["T1"], "T3": ["T1", "T2"]}[tier]


def describe(res):
    return f"T1 {res.t1 or 'ok'}, T2 x{res.ratio('T2'):.3g} {res.err['T2'][1]}, T3 x{res.ratio('T3'):.3g} {res.err['T3'][1]}"


# =============================================================== cases

SHAPES = (  # B, T, Hq, Hkv, D
    (2, 5, 4, 2, 3),    # G = 2, H = 2
    (1, 1, 2, 1, 4),    # one token, one pair (B = T = H = 1)
    (2, 6, 8, 2, 4),    # G = 4
    (1, 7, 3, 3, 5),    # Hkv = Hq, gqa only
    (2, 4, 6, 3, 2),    # H = 3
    (1, 9, 4, 1, 1),    # D = 1, Hkv = 1
    (1, 3, 1, 1, 2),    # one head, gqa only
    (1, 5, 8, 1, 2),    # G = 8, multi-query
    (2, 5, 8, 1, 2),    # multi-query with B = 2
    (1, 1, 8, 2, 2),    # one token, G = 4
    (2, 6, 4, 2, 1),    # D = 1 with two kv heads
    (3, 4, 8, 4, 3),    # B = 3, Hkv = 4, G = 2, T == H
)


def level_arrays(level):
    """Input generator: every query and key points along x, so that every scaled logit is close to `level`."""
    def make(rng, c):
        b, t, hq, hkv, d = c["shape"]
        q = 0.1 * rng.standard_normal((b, t, hq, d))
        k = 0.1 * rng.standard_normal((b, t, hkv, d))
        amp = math.sqrt(abs(level) * math.sqrt(d))
        q[..., 0] += amp
        k[..., 0] += amp if level > 0 else -amp
        return {"q": q, "k": k, "v": rng.standard_normal((b, t, hkv, d))}
    make.__name__ = f"level_arrays({level:g})"
    return make


def ramp_arrays(span):
    """Input generator: scaled logits rise along the key axis from about 0 (key 0) to about `span` (last key)."""
    def make(rng, c):
        b, t, hq, hkv, d = c["shape"]
        q = 0.1 * rng.standard_normal((b, t, hq, d))
        k = 0.1 * rng.standard_normal((b, t, hkv, d))
        amp = math.sqrt(span * math.sqrt(d))
        q[..., 0] += amp
        k[..., 0] += amp * np.arange(t)[None, :, None] / max(t - 1, 1)
        return {"q": q, "k": k, "v": rng.standard_normal((b, t, hkv, d))}
    make.__name__ = f"ramp_arrays({span:g})"
    return make


HIGH, LOW, RAMP = level_arrays(120.0), level_arrays(-120.0), ramp_arrays(150.0)
ALL_QKV = ("q", "k", "v")  # only lambda_logits trains: run on diff_v2_attention alone (fns=[DIFF])
FUSED = {n: "fused" for n in NAMES}


def battery():
    out, i = [], 0
    for shape, causal, dtype in itertools.product(SHAPES, (True, False), ("f32", "f64")):
        out.append(case(shape, dtype, causal, i))
        i += 1
    for shape, dtype, causal, extra in (
            # long sequences, around the usual block sizes 16 / 32 / 64 / 128 / 256
            ((1, 16, 4, 2, 8), "f32", True, {}),
            ((1, 17, 4, 2, 4), "f64", False, {}),
            ((1, 31, 8, 2, 2), "f32", True, {}),
            ((1, 32, 4, 1, 16), "f64", True, {}),
            ((1, 33, 4, 2, 3), "f32", False, {}),
            ((1, 63, 4, 2, 2), "f64", True, {}),
            ((1, 64, 4, 2, 5), "f32", True, {}),
            ((1, 65, 4, 2, 2), "f64", True, {}),
            ((1, 100, 4, 2, 3), "f64", True, dict(lam="saturated")),
            ((1, 127, 2, 1, 4), "f32", True, {}),
            ((1, 128, 4, 2, 2), "f64", False, {}),
            ((1, 129, 4, 2, 2), "f32", True, dict(logit_max=100.0)),
            ((2, 150, 8, 2, 2), "f64", True, {}),
            ((1, 200, 4, 2, 4), "f32", True, {}),
            ((1, 255, 2, 1, 2), "f64", True, {}),
            ((1, 256, 4, 2, 2), "f32", False, {}),
            ((1, 257, 2, 1, 3), "f64", True, {}),
            ((1, 300, 4, 2, 2), "f32", True, {}),
            ((1, 300, 2, 1, 2), "f64", False, {}),
            # wide heads
            ((1, 6, 4, 2, 32), "f32", True, {}),
            ((2, 7, 4, 1, 64), "f64", False, {}),
            ((1, 3, 8, 2, 16), "f32", True, {}),
            ((1, 20, 4, 2, 64), "f32", True, dict(logit_max=120.0)),
            # large logits, in float32
            ((1, 80, 4, 2, 8), "f32", True, dict(logit_max=100.0)),
            ((1, 130, 4, 1, 3), "f32", True, dict(logit_max=100.0)),
            ((2, 5, 4, 2, 3), "f32", True, dict(logit_max=150.0)),
            ((2, 6, 8, 2, 4), "f32", False, dict(logit_max=120.0)),
            ((2, 4, 6, 3, 2), "f64", True, dict(logit_max=400.0)),
            ((1, 4, 4, 2, 4), "f32", True, dict(arrays=HIGH)),
            ((1, 4, 4, 2, 2), "f32", False, dict(arrays=LOW)),
            ((1, 40, 4, 2, 3), "f32", True, dict(arrays=LOW)),
            ((1, 100, 4, 2, 3), "f32", True, dict(arrays=RAMP)),
            ((1, 70, 4, 1, 2), "f32", False, dict(arrays=RAMP)),
            # gates
            ((2, 5, 4, 2, 3), "f32", True, dict(lam="saturated")),
            ((2, 6, 8, 2, 4), "f32", False, dict(lam="saturated", logit_max=100.0)),
            ((2, 4, 6, 3, 2), "f64", True, dict(lam="saturated")),
            ((1, 9, 4, 1, 1), "f32", True, dict(lam=-1000.0)),
            ((1, 9, 4, 1, 1), "f32", False, dict(lam=1000.0)),
            ((2, 5, 4, 2, 3), "f32", True, dict(lam=-100.0)),
            ((2, 5, 4, 2, 3), "f64", True, dict(lam=100.0)),
            ((1, 1, 2, 1, 4), "f64", True, dict(lam=-1000.0)),
            ((2, 5, 4, 2, 3), "f64", True, dict(lam=0.0)),
            # frozen subsets (a training loop with fixed parts)
            ((2, 5, 4, 2, 3), "f64", True, dict(frozen=("q",))),
            ((2, 6, 8, 2, 4), "f32", False, dict(frozen=("k", "lambda_logits"))),
            ((1, 5, 8, 1, 2), "f64", True, dict(frozen=("v",))),
            ((2, 5, 4, 2, 3), "f64", True, dict(frozen=("lambda_logits",))),
            ((2, 4, 6, 3, 2), "f32", True, dict(frozen=ALL_QKV, fns=[DIFF])),
            ((1, 1, 4, 2, 3), "f64", True, dict(frozen=("v",))),
            # fused-projection slices, a call following other calls
            ((2, 5, 4, 2, 3), "f64", True, dict(layouts=FUSED)),
            ((1, 40, 8, 2, 4), "f32", False, dict(layouts=FUSED)),
            ((2, 5, 4, 2, 3), "f64", True, dict(prime=[((1, 7, 2, 1, 3), False), ((2, 3, 4, 2, 2), True)])),
            ((1, 6, 8, 2, 2), "f32", False, dict(prime=[((1, 6, 8, 2, 2), True)], mode="kw")),
            # this corpus's tile sizes (24, 37, 40, 48, 256) and domain edges
            ((1, 24, 4, 2, 3), "f64", True, {}),
            ((1, 50, 4, 2, 3), "f32", True, dict(arrays=LOW)),
            ((1, 50, 4, 2, 3), "f32", True, dict(arrays=HIGH)),
            ((2, 48, 8, 2, 3), "f64", False, {}),
            ((1, 75, 4, 1, 2), "f64", True, dict(lam=25.0)),
            ((1, 320, 4, 2, 2), "f32", True, {}),
            ((2, 5, 8, 4, 2), "f64", True, {}),
    ):
        out.append(case(shape, dtype, causal, i, **extra))
        i += 1
    return out


BASE = (2, 5, 4, 2, 3)   # B, T, Hq, Hkv, D: G = 2, H = 2
B1 = (1, 5, 4, 2, 3)     # BASE with a single sequence
G4 = (2, 6, 8, 2, 4)     # G = 4, Hkv = 2, H = 4
T1_ = (2, 1, 4, 2, 3)    # a single token, Hkv = 2, G = 2
T1MQA = (1, 1, 8, 1, 2)  # a single token, Hkv = 1
SINGLE = (1, 1, 2, 1, 4)  # B == T == H == 1
MHA = (1, 7, 3, 3, 5)    # Hkv = Hq (G = 1), gqa only
D1 = (1, 9, 4, 1, 1)     # D = 1, Hkv = 1
T16 = (1, 16, 4, 2, 3)
T32 = (1, 32, 4, 2, 3)
T48 = (1, 48, 4, 2, 3)
T50 = (1, 50, 4, 2, 3)
T100 = (1, 100, 4, 2, 3)
T256 = (1, 256, 4, 1, 2)
T280 = (1, 280, 4, 1, 2)
QKV_ONLY_GATE = dict(frozen=ALL_QKV, fns=[DIFF])
GQA_ONLY = dict(fns=[GQA])

WITNESS = {
    # gqa_attention
    "wrong/lse_empty_tile_normaliser_clamped": (T50, "f64", True, dict(arrays=LOW)),
    "wrong/lse_merge_log_of_exp_sum": (T50, "f32", True, dict(arrays=HIGH)),
    "wrong/split_padding_mask_off_by_one": (BASE, "f64", False, {}),
    "wrong/split_max_detached_after_combine_weights": (T50, "f64", True, {}),
    "wrong/lse_empty_tile_max_not_guarded": (T50, "f64", True, {}),
    "wrong/kv_index_from_linspace": (BASE, "f64", True, {}),
    "wrong/block_size_buffer_without_fallback": (T280, "f64", True, {}),
    "wrong/heads_major_query_fold": (BASE, "f64", True, {}),
    "wrong/backward_dq_scaled_twice": (BASE, "f64", True, {}),
    "wrong/backward_weights_overwritten_before_dv": (BASE, "f64", True, {}),
    "wrong/eval_branch_keeps_forward_tuple": (BASE, "f64", True, {}),
    "wrong/backward_recompute_default_causal": (BASE, "f64", False, {}),
    "wrong/chunk_keys_cut_at_chunk_end": (T50, "f64", False, {}),
    "wrong/mha_branch_values_not_transposed": (MHA, "f64", True, {}),
    "wrong/backward_weights_as_exp_ratio": (T16, "f32", True, dict(arrays=HIGH)),
    "wrong/eval_path_relies_on_kv_broadcast": (G4, "f64", True, {}),
    # diff_v2_attention
    "wrong/gate_unflattened_pair_rank_major": (G4, "f64", True, {}),
    "wrong/gate_multiplied_into_saved_output": (BASE, "f64", True, {}),
    "wrong/pair_weights_gate_negated_in_place": (BASE, "f64", True, {}),
    "wrong/positional_only_parameters": (BASE, "f64", True, dict(mode="kw")),
    "wrong/stable_sigmoid_maximum_tie": (BASE, "f64", True, dict(lam=0.0)),
    "wrong/gate_grad_buffer_default_dtype": (BASE, "f64", True, {}),
    "wrong/odd_map_rebuilt_from_output": (BASE, "f32", True, dict(lam=-1000.0)),
    "wrong/backward_grad_negated_in_place": (BASE, "f64", True, {}),
    "wrong/eval_path_drops_causal": (BASE, "f64", False, {}),
    "wrong/eval_path_returns_whole_buffer": (BASE, "f64", True, {}),
    "wrong/signed_map_gate_on_key_axis": (BASE, "f64", True, {}),
    "wrong/pair_kv_head_divided_by_hkv": (G4, "f64", True, {}),
    "wrong/sequence_first_gate_batch_major": (BASE, "f64", True, {}),
    "wrong/gate_log_sigmoid_via_softplus_threshold": (BASE, "f64", True, dict(lam=25.0)),
    "wrong/clamped_sigmoid_denominator_unclamped": (BASE, "f32", True, dict(lam=100.0)),
    "wrong/graph_check_ignores_gate": (BASE, "f64", True, QKV_ONLY_GATE),
}

# Inputs outside a label's "where": every function the case applies to must
# pass every tier there (labels whose "where" covers every input have none).
OUTSIDE = {
    "wrong/lse_empty_tile_normaliser_clamped": [(T50, "f64", True, {}), (T32, "f32", True, dict(arrays=LOW)),
                                                (T50, "f32", False, dict(arrays=LOW))],
    "wrong/lse_merge_log_of_exp_sum": [(T32, "f32", True, dict(arrays=HIGH)), (T50, "f64", True, dict(arrays=HIGH)),
                                       (T100, "f32", False, {})],
    "wrong/split_padding_mask_off_by_one": [(BASE, "f64", True, {}), (T48, "f64", False, {}), (T100, "f32", True, {})],
    "wrong/split_max_detached_after_combine_weights": [(T16, "f64", True, {}), (BASE, "f32", False, {}),
                                                       (T50, "f64", True, dict(frozen=("q", "k")))],
    "wrong/lse_empty_tile_max_not_guarded": [(T32, "f64", True, {}), (T50, "f32", False, {}), (T16, "f32", True, {})],
    "wrong/kv_index_from_linspace": [(MHA, "f64", True, {}), (D1, "f32", True, {}), (T1MQA, "f64", False, {})],
    "wrong/block_size_buffer_without_fallback": [(T256, "f64", True, {}), (T280, "f32", False, {})],
    "wrong/heads_major_query_fold": [(B1, "f64", True, {}), (MHA, "f32", False, {})],
    "wrong/backward_dq_scaled_twice": [(D1, "f64", True, {}), (BASE, "f64", True, dict(frozen=("q",)))],
    "wrong/backward_weights_overwritten_before_dv": [(BASE, "f64", True, dict(frozen=("v",)))],
    "wrong/backward_recompute_default_causal": [(BASE, "f64", True, {}), (T1_, "f64", False, {})],
    "wrong/chunk_keys_cut_at_chunk_end": [(T100, "f64", True, {}), (T32, "f32", False, {})],
    "wrong/mha_branch_values_not_transposed": [(G4, "f64", True, {}), (D1, "f32", False, {}),
                                               (BASE, "f64", True, GQA_ONLY)],
    "wrong/backward_weights_as_exp_ratio": [(T16, "f64", True, dict(arrays=HIGH)), (BASE, "f32", True, {})],
    "wrong/eval_path_relies_on_kv_broadcast": [(MHA, "f64", True, {}), (D1, "f32", True, {})],
    "wrong/gate_unflattened_pair_rank_major": [(BASE, "f64", True, {}), (D1, "f32", True, {})],
    "wrong/gate_multiplied_into_saved_output": [(BASE, "f64", True, QKV_ONLY_GATE)],
    "wrong/pair_weights_gate_negated_in_place": [(BASE, "f64", True, dict(frozen=("lambda_logits",)))],
    "wrong/positional_only_parameters": [(BASE, "f64", True, dict(mode="pos")), (BASE, "f64", True, dict(mode="default"))],
    "wrong/stable_sigmoid_maximum_tie": [(BASE, "f64", True, {}), (BASE, "f32", True, dict(lam=100.0))],
    "wrong/gate_grad_buffer_default_dtype": [(BASE, "f32", True, {}), (G4, "f32", False, {})],
    "wrong/odd_map_rebuilt_from_output": [(BASE, "f64", True, dict(lam=0.0)), (BASE, "f32", True, dict(lam=3.0))],
    "wrong/backward_grad_negated_in_place": [(BASE, "f64", True, QKV_ONLY_GATE)],
    "wrong/eval_path_drops_causal": [(BASE, "f64", True, {}), (T1_, "f64", False, {})],
    "wrong/signed_map_gate_on_key_axis": [(T1_, "f64", True, {}), (SINGLE, "f32", False, {})],
    "wrong/pair_kv_head_divided_by_hkv": [(BASE, "f64", True, {}), (BASE, "f32", False, {})],
    "wrong/sequence_first_gate_batch_major": [(B1, "f64", True, {}), (T1_, "f64", True, {})],
    "wrong/gate_log_sigmoid_via_softplus_threshold": [(BASE, "f32", True, dict(lam=25.0)),
                                                      (BASE, "f64", True, dict(lam=-25.0)), (BASE, "f64", True, {})],
    "wrong/clamped_sigmoid_denominator_unclamped": [(BASE, "f64", True, dict(lam=100.0)),
                                                    (BASE, "f32", True, dict(lam=-1000.0))],
    "wrong/graph_check_ignores_gate": [(BASE, "f64", True, {}), (BASE, "f64", True, dict(frozen=("lambda_logits",)))],
}


def build(table, base):
    out = {}
    for j, (key, items) in enumerate(sorted(table.items())):
        if isinstance(items, tuple):
            items = [items]
        out[key] = []
        for m, (shape, dtype, causal, extra) in enumerate(items):
            c = case(shape, dtype, causal, base + 7 * j + m, **dict(extra))
            c["id"] = f"{'w' if base < 2000 else 'o'}:{key}:{m}"
            out[key].append(c)
    return out


# =============================================================== a plain gqa_attention for the "other function" check

def plain_gqa(q, k, v, causal=True):
    """Written here (not the instructor's reference): used to isolate diff_v2_attention's own code."""
    g = q.shape[2] // k.shape[2]
    qh = q.transpose(1, 2)
    kh = k.transpose(1, 2).repeat_interleave(g, dim=1)
    vh = v.transpose(1, 2).repeat_interleave(g, dim=1)
    s = qh @ kh.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        t = q.shape[1]
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    return (torch.softmax(s, dim=-1) @ vh).transpose(1, 2)


def load_isolated_diff(path):
    mod = load(path)
    mod.gqa_attention = plain_gqa
    return mod


# =============================================================== verdicts

def run_all(mod, cases, fns=None):
    """{fn: Result-like worst of all cases} plus the failing case id per tier."""
    worst = {}
    for c in cases:
        for fn in c["fns"]:
            if fns and fn not in fns:
                continue
            r = run(mod, fn, c)
            w = worst.setdefault(fn, Result())
            if r.t1 and not w.t1:
                w.t1 = f"{c['id']} {r.t1}"
            for tier in ("T2", "T3"):
                w.note(tier, r.ratio(tier), f"{c['id']} {r.err[tier][1]}")
    return worst


def check_correct(path, bat, extra):
    problems = []
    worst = run_all(load(path), bat)
    for c in extra:  # witnesses and outside inputs: each on a fresh import
        for fn in c["fns"]:
            r = run(load(path), fn, c)
            w = worst.setdefault(fn, Result())
            if r.t1 and not w.t1:
                w.t1 = f"{c['id']} {r.t1}"
            for tier in ("T2", "T3"):
                w.note(tier, r.ratio(tier), f"{c['id']} {r.err[tier][1]}")
    for fn, w in worst.items():
        for tier in ("T1", "T2", "T3"):
            if fails(w, tier):
                problems.append(f"{fn} fails {tier}: " + (w.t1 if tier == "T1" else
                                                           f"x{w.ratio(tier):.3g} {w.err[tier][1]}"))
    return problems, "passes all tiers"


def _clean_everywhere(loader, path, fn, cases):
    w = Result()
    for c in cases:
        if fn not in c["fns"]:
            continue
        r = run(loader(path), fn, c) if c["id"].startswith(("w:", "o:")) else None
        if r is None:
            continue
        if r.t1 and not w.t1:
            w.t1 = f"{c['id']} {r.t1}"
        for t in ("T2", "T3"):
            w.note(t, r.ratio(t), f"{c['id']} {r.err[t][1]}")
    return w


def check_wrong(label, path, bat, witness, outside):
    """Each witness / outside run imports the file afresh (no state carried over)."""
    tier, fn = label["tier"], label["function"]
    problems = []
    for c in outside:
        for f in c["fns"]:
            r = run(load(path), f, c)
            if any(fails(r, t) for t in ("T1", "T2", "T3")):
                problems.append(f"fails outside its where ({c['id']}, {f}): {describe(r)}")
    r = run(load(path), fn, witness)
    for t in earlier(tier):
        if fails(r, t):
            problems.append(f"witness fails {t} before {tier}: {describe(r)}")
    if tier == "T1":
        if not r.t1:
            problems.append(f"witness passes T1: {describe(r)}")
        detail = r.t1 or ""
    else:
        if not fails(r, tier, CLEAR):
            problems.append(f"witness only x{r.ratio(tier):.3g} of the allowance at {tier}")
        detail = f"x{r.ratio(tier):.3g} {r.err[tier][1]}"
    for f, w in run_all(load(path), bat).items():
        for t in earlier(tier):
            if fails(w, t):
                problems.append(f"battery: {f} fails {t} before {tier}: " +
                                (w.t1 if t == "T1" else f"x{w.ratio(t):.3g} {w.err[t][1]}"))
    other, loader = (GQA, load) if fn == DIFF else (DIFF, load_isolated_diff)
    w = run_all(loader(path), bat, fns=[other]).get(other, Result())
    w2 = _clean_everywhere(loader, path, other, [witness] + outside)
    if w2.t1 and not w.t1:
        w.t1 = w2.t1
    for t in ("T2", "T3"):
        w.note(t, w2.ratio(t), w2.err[t][1])
    if any(fails(w, t) for t in ("T1", "T2", "T3")):
        what = "gqa_attention" if other == GQA else "diff_v2_attention (with a plain gqa_attention)"
        problems.append(f"{what} not clean although {fn} is blamed: {describe(w)}")
    return problems, detail


def tables():
    bat = battery()
    wit = {k: v[0] for k, v in build(WITNESS, 1000).items()}
    out = build(OUTSIDE, 5000)
    return bat, wit, out


def check_one(key):
    """Run in a fresh subprocess: verdict for one file."""
    with open(os.path.join(HERE, "labels.json")) as fh:
        label = json.load(fh)[key]
    bat, wit, out = tables()
    path = os.path.join(HERE, key + ".py")
    try:
        load(path)
    except Exception as exc:  # noqa: BLE001
        return [f"import failed: {exc}"], ""
    if label.get("correct") is True:
        if not key.startswith("correct/"):
            return ["labelled correct but not in correct/"], ""
        everything = list(wit.values()) + [c for cs in out.values() for c in cs]
        return check_correct(path, bat, everything)
    missing = [f for f in ("function", "tier", "component", "bug", "where", "names") if not label.get(f)]
    names = label.get("names")
    if (missing or label["function"] not in (GQA, DIFF) or label["tier"] not in ("T1", "T2", "T3")
            or label["component"] not in COMPONENTS or key not in wit or not key.startswith("wrong/")
            or not isinstance(names, list) or not 3 <= len(names) <= 6):
        return [f"malformed label / no witness (missing {missing})"], ""
    return check_wrong(label, path, bat, wit[key], out.get(key, []))


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
    bat, wit, _ = tables()

    def one(key):
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", key],
                              capture_output=True, text=True)
        try:
            return json.loads(proc.stdout.strip().splitlines()[-1])
        except Exception:  # noqa: BLE001
            return {"problems": [f"worker crashed (rc {proc.returncode}): {proc.stderr[-300:]}"], "detail": ""}

    keys = [k for k in files if k in labels]
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        results = dict(zip(keys, pool.map(one, keys)))
    rows = []
    for key in keys:
        label, res = labels[key], results[key]
        problems, detail = res["problems"], res["detail"]
        fn = {GQA: "gqa", DIFF: "diff_v2"}.get(label.get("function"), "-")
        rows.append((key, label.get("tier", "-"), fn, label.get("component", "-"),
                     "NOT CONFIRMED" if problems else "confirmed", "; ".join(problems) or detail))
        if problems:
            failures.append((key, "; ".join(problems)))
    width = max(len(r[0]) for r in rows)
    print(f"{'file':<{width}}  tier  function  component  verdict        detail")
    for key, tier, fn, comp, verdict, detail in rows:
        print(f"{key:<{width}}  {tier:<4}  {fn:<8}  {comp:<9}  {verdict:<13}  "
              f"{detail if verbose else detail[:110]}")
    n_c = sum(r[0].startswith("correct/") for r in rows)
    n_w = sum(r[0].startswith("wrong/") for r in rows)
    n_ok = sum(1 for r in rows if r[4] == "confirmed")
    print(f"RESULT: {n_ok}/{n_c + n_w} labels confirmed ({n_c} correct, {n_w} wrong; "
          f"{len(bat)} battery cases, {len(wit)} witnesses) in {time.time() - t0:.1f} s")
    for key, why in failures:
        print(f"FAILED {key}: {why}")
    return 1 if failures else 0


if __name__ == "__main__":
    warnings.simplefilter("ignore")  # deprecation notes from torch are not verdicts
    torch.manual_seed(0)
    torch.set_num_threads(1)
    if "--one" in sys.argv:
        problems, detail = check_one(sys.argv[sys.argv.index("--one") + 1])
        print(json.dumps({"problems": problems, "detail": detail}))
        sys.exit(0)
    sys.exit(main())
