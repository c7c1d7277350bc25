"""Check every label of the haze DIFF V2 corpus against an independent oracle.

Usage (from the project root):   python tests/corpus/v2_haze/verify.py [-v] [-jN] [--typical] [--reference] [NAME ...]
(or `python verify.py` from inside the folder). With NAME arguments only the files whose
key contains one of them are checked; -jN runs N worker processes (default 1, to keep the
CPU use modest); --typical only measures, for every file, the typical small example
(see TYPICAL below) and prints which files get it right. The instructor reference is judged
as a correct file (a sanity row) whenever every file is checked; --reference forces that row.

Adapted from the squall corpus's verifier (itself adapted from rime's, sleet's, fog's, ...):
the float64 numpy oracle, the allowance, the calls per case, the layouts, the "alias" /
"kvpack" / "prime" options, non-leaf inputs, torch.autograd.grad, the "calls" filter and
the 98-case battery are unchanged. What changed: the seeds of the inputs, the witness
(WITNESS) and "outside" (OUTSIDE) tables, and the explicit WHERE predicate of every wrong
file (all of them functions of the case's shape, dtype, causal flag, training pattern and,
for one file, its gate logits), used by the judging code (see below).

The oracle is float64 numpy: a forward pass for gqa_attention and diff_v2_attention
and hand-derived vector-Jacobian products. Before anything else the VJPs are compared
with central finite differences of the numpy forward pass (and the forward with the
"shared value offset is scaled by 1 - sigmoid(l)" identity). torch is only used to
call the corpus files and to read the gradients autograd produces; no corpus file
and not the instructor reference is used to compute an expected value (the reference
is only run as a sanity row).

Every (function, case) run makes these calls, each on freshly built tensors with the
case's memory layouts:
  1. under torch.inference_mode(), inputs frozen;
  2. under torch.no_grad(), inputs requiring grad;
  3. plain, inputs frozen;
  4. plain, inputs requiring grad (except the case's "frozen" ones), then backward
     with a fixed cotangent (with "pregrad", inputs already hold a .grad of 0.25 that
     must be accumulated into; with "agrad", torch.autograd.grad is used instead of
     .backward(); with "nonleaf", the named inputs are passed as views of the leaves);
  5. plain, inputs frozen; then the same tensors are halved in place (through the
     buffer that owns their storage) and the function is called again under
     torch.no_grad() (nothing cached from one call may leak into the next);
  6. ("sum", unless the case sets "nosum") plain, inputs requiring grad, then
     out.sum().backward() (a broadcast, stride-0 cotangent of ones);
  7. ("twice") plain, inputs requiring grad, then out.backward(g, retain_graph=True) and
     out.backward(g): the leaves must hold twice the gradient;
  8. ("tcot") plain, inputs requiring grad, then backward with the same cotangent values
     laid out heads-first and transposed (a loss that reads the output as [B, H, T, D]);
  9. ("accum") two plain calls on two sets of leaves (the second with half the values),
     each followed by its own backward; both sets' gradients are read only afterwards;
 10. ("interleave") the same two plain calls, both made before either backward; then the
     first graph's backward, then the second's; both sets' gradients are read afterwards.
A case may also set "alias" ("kv": v is the very tensor object passed as k, the shared
leaf must receive dk + dv; "qk": k is the very tensor object passed as q, the shared leaf
must receive dq + dk), "swapv", "kvpack", "prime", "prime_mode", "prime_from", "mode",
"frozen", "lam", "arrays" and "calls" (a subset of the calls above).

  T1 (contract): no exception, one tensor, right shape / dtype / device, inputs
     unchanged (values, version counter, requires_grad flag, storage pointer, offset,
     strides and .grad), output attached to the graph in the graph-building calls, no inference
     tensor returned outside inference_mode;
  T2 (forward): every call's values within the allowance of the oracle;
  T3 (gradients): gradients of the inputs that required grad within the allowance (a
     missing gradient counts as zeros; an exception in backward, a non-finite value or
     torch.autograd.grad changing an existing .grad is an infinite error).

Allowance, elementwise: SAFETY * u * n * mag + SAFETY * n * tiny (u the unit roundoff
of the dtype, n a size factor, mag the magnitude of the terms summed).

WHERE: every wrong file has a predicate WHERE[key](case, fn) that is True when the run of
function fn on that case is inside the label's "where" (shape, causal flag and which inputs
train in a graph-building call). For a file blamed on gqa_attention the predicate also
covers diff_v2_attention, which computes A = gqa_attention(q, k, v, causal) as the contract
defines it and therefore inherits the bug on the same inputs; a predicate of a file blamed
on diff_v2_attention is False for every gqa_attention run.

Labels are confirmed as follows.
  correct/<stem> (and the reference): both functions pass every tier on the battery, every
     witness and every "outside" case (one module instance for all of them, so state kept
     between calls is exercised).
  wrong/<stem>: the witness is inside WHERE and every "outside" input is outside it; on the
     witness (fresh import) the blamed function fails the labelled tier (T1: any contract
     break; T2/T3: error above CLEAR times the allowance) and passes the tiers before it;
     on every run of the battery (one module instance), of every witness and of the file's
     "outside" inputs (fresh imports), each function (a) passes every tier when the run is
     outside WHERE (so the function not blamed passes everything it does not inherit) and
     (b) fails no tier earlier than the labelled one when it is inside.

Prints one row per file and a line starting with "RESULT:"; exits 1 when any label is
not confirmed.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import math
import os
import sys
import time
import warnings

import numpy as np
import torch

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
REFERENCE = os.path.join(HERE, "..", "..", "..", "reference", "diff_v2_attention.py")  # sanity row
GQA, DIFF = "gqa_attention", "diff_v2_attention"
SAFETY = 16.0
PREGRAD = 0.25
CLEAR = 10.0
TORCH_DT = {"f32": torch.float32, "f64": torch.float64}
NP_DT = {"f32": np.float32, "f64": np.float64}
UNIT = {"f32": 2.0 ** -24, "f64": 2.0 ** -53}
TINY = {"f32": float(np.finfo(np.float32).tiny), "f64": float(np.finfo(np.float64).tiny)}
COMPONENTS = {"load", "type", "shape", "dtype", "mutation", "graph", "mask", "scale", "softmax",
              "heads", "grouping", "gate", "value", "backward", "randomness", "state", "stability",
              "strided", "layout", "output", "pairing"}
_ids = itertools.count()


def load(path):
    spec = importlib.util.spec_from_file_location(f"_haze_v2_{next(_ids)}", path)
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
    rng = np.random.default_rng(41)
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

L4 = ("contig", "bhtd", "sliced", "stepped", "tbhd", "bexp", "hexp")
L3 = ("contig", "bht", "sliced", "stepped", "tbh", "bexp", "hexp")
NAMES = ("q", "k", "v", "lambda_logits")
SATURATED = (-1000.0, -100.0, -30.0, -20.0, 0.0, 20.0, 30.0, 100.0, 1000.0)


def case(shape, dtype, causal, i, **extra):
    b, t, hq, hkv, d = shape
    fns = [GQA] + ([DIFF] if (hq // hkv) % 2 == 0 else [])
    names = NAMES if (hq // hkv) % 2 == 0 else NAMES[:3]
    if extra.pop("contig", False) or i % 4 == 0:
        layouts = {n: "contig" for n in names}
    else:
        layouts = {n: (L3 if n == "lambda_logits" else L4)[(i + 2 * j) % 7] for j, n in enumerate(names)}
    layouts.update(extra.pop("layouts", {}))
    mode = ("pos", "kw", "default")[i % 3]
    if mode == "default" and not causal:
        mode = "kw"
    c = dict(shape=shape, dtype=dtype, causal=causal, seed=9500 + 43 * i, layouts=layouts,
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
    # broadcast (expanded) layouts hold one value along the broadcast axis
    for n, x in a.items():
        lay = c["layouts"].get(n, "contig")
        if lay == "bexp":
            x[:] = x[:1]
        elif lay == "hexp":
            x[:] = x[:, :, :1]
        elif lay == "texp":
            x[:] = x[:, :1]
    if c.get("alias") == "kv":  # one tensor object passed as keys and values
        a["v"] = a["k"].copy()
    elif c.get("alias") == "qk":  # one tensor object passed as queries and keys (Hq == Hkv)
        a["k"] = a["q"].copy()
    return {n: x.astype(NP_DT[c["dtype"]]).astype(np.float64) for n, x in a.items()}


def tensor(x, dtype, layout, rng):
    """A leaf tensor holding x with the requested memory layout, and the buffer that owns its storage.

    bexp / hexp / texp are expanded views (stride 0 along the batch / head / token axis) of a
    buffer holding one batch element / head / token; x must already be constant along that axis."""
    base = torch.tensor(x, dtype=dtype)
    junk = lambda *s: torch.tensor(rng.uniform(-500, 500, s), dtype=dtype)  # noqa: E731
    if layout == "contig":
        buf = base.clone()
        out = buf
    elif layout in ("bhtd", "bht"):
        buf = base.transpose(1, 2).contiguous()
        out = buf.transpose(1, 2)
    elif layout in ("tbhd", "tbh"):
        buf = base.transpose(0, 1).contiguous()
        out = buf.transpose(0, 1)
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
    elif layout == "bexp":
        buf = base[:1].clone()
        out = buf.expand(base.shape)
    elif layout == "hexp":
        buf = base[:, :, :1].clone()
        out = buf.expand(base.shape)
    elif layout == "texp":
        buf = base[:, :1].clone()
        out = buf.expand(base.shape)
    else:
        raise ValueError(layout)
    assert torch.equal(out, base), layout
    return out.detach(), buf


def packed_kv(k, v, dtype):
    """k and v as two views of one [B, T, Hkv, 2, D] buffer (a fused kv projection's output)."""
    buf = torch.empty(k.shape[:3] + (2,) + k.shape[3:], dtype=dtype)
    buf[..., 0, :] = torch.tensor(k, dtype=dtype)
    buf[..., 1, :] = torch.tensor(v, dtype=dtype)
    return {"k": (buf[..., 0, :].detach(), buf), "v": (buf[..., 1, :].detach(), buf)}


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


CALLS = ("inference", "no_grad", "plain", "grad", "reused", "sum", "twice", "tcot", "accum", "interleave")
GRAD_CALLS = ("no_grad", "grad", "sum", "twice", "tcot", "accum", "interleave")


def _call(mod, fn, c, ts, names, mode):
    args, kwargs = [ts[n] for n in names], {}
    if c["mode"] == "pos":
        args.append(c["causal"])
    elif c["mode"] == "kw":
        kwargs["causal"] = c["causal"]
    elif c["mode"] == "allkw":
        args, kwargs = [], dict({n: ts[n] for n in names}, causal=c["causal"])
    if mode == "inference":
        with torch.inference_mode():
            return getattr(mod, fn)(*args, **kwargs)
    if mode == "no_grad":
        with torch.no_grad():
            return getattr(mod, fn)(*args, **kwargs)
    return getattr(mod, fn)(*args, **kwargs)


def _prime(mod, fn, c, dt):
    """Earlier calls a training or decoding loop might have made (keyword causal; under no_grad
    unless the case sets prime_mode to "inference" or "plain")."""
    rng = np.random.default_rng(c["seed"] + 11)
    for shape, causal in c.get("prime", ()):
        b, t, hq, hkv, d = shape
        a = [rng.standard_normal((b, t, hq, d)), rng.standard_normal((b, t, hkv, d)),
             rng.standard_normal((b, t, hkv, d))]
        if fn == DIFF:
            a.append(2.0 * rng.standard_normal((b, t, hq // 2)))
        ts = [torch.tensor(x, dtype=TORCH_DT[c.get("prime_dtype", c["dtype"])]) for x in a]
        mode = c.get("prime_mode", "no_grad")
        if mode == "inference":
            with torch.inference_mode():
                getattr(mod, fn)(*ts, causal=causal)
        elif mode == "plain":
            getattr(mod, fn)(*ts, causal=causal)
        else:
            with torch.no_grad():
                getattr(mod, fn)(*ts, causal=causal)
    if c.get("prime_from"):
        # one earlier graph-free call on inputs derived from the case's own inputs
        a = c["prime_from"](arrays(c))
        names = NAMES if fn == DIFF else NAMES[:3]
        ts = [torch.tensor(a[n], dtype=dt) for n in names]
        with torch.no_grad():
            getattr(mod, fn)(*ts, causal=c["causal"])


def _contract(out, ts, snap, oshape, dt, mode, tag):
    """None, or the first contract break of one call."""
    for n, x in ts.items():
        grad = x.grad if x.is_leaf else None
        if grad is not snap[n][4] or (grad is not None and not torch.equal(grad, snap[n][5])):
            return f"[{tag}] changed the .grad of input '{n}'"
        if x._version != snap[n][1] or not torch.equal(x.detach(), snap[n][0]):
            return f"[{tag}] modified input '{n}'"
        if x.requires_grad != snap[n][2]:
            return f"[{tag}] changed requires_grad of input '{n}'"
        if (x.data_ptr(), x.storage_offset(), tuple(x.stride())) != snap[n][3]:
            return f"[{tag}] rebound the storage / strides of input '{n}'"
    if not isinstance(out, torch.Tensor):
        return f"[{tag}] returned {type(out).__name__}"
    if tuple(out.shape) != oshape:
        return f"[{tag}] shape {list(out.shape)} instead of {list(oshape)}"
    if out.dtype != dt or out.device.type != "cpu":
        return f"[{tag}] returned {out.dtype}/{out.device} for {dt}"
    if mode != "inference" and out.is_inference():
        return f"[{tag}] returned an inference tensor outside inference_mode"
    return None


def _snap(ts):
    snap = {}
    for n, x in ts.items():
        grad = x.grad if x.is_leaf else None
        snap[n] = (x.detach().clone(), x._version, x.requires_grad,
                   (x.data_ptr(), x.storage_offset(), tuple(x.stride())), grad,
                   None if grad is None else grad.clone())
    return snap


ALIAS = {"kv": ("k", "v"), "qk": ("q", "k")}  # (the leaf kept, the argument that reuses its object)


def _grad_ref(ref, names, alias, factor=1.0):
    """Expected gradients (and magnitudes) per leaf name; with alias, the reusing argument's share
    goes to the kept leaf (kv: v's share to k; qk: k's share to q)."""
    grads = {n: factor * ref["grads"][n] for n in names}
    mags = {n: factor * ref["mags"][n] for n in names}
    if alias and ALIAS[alias][0] in names:
        keep, dup = ALIAS[alias]
        grads[keep] = grads[keep] + factor * ref["grads"][dup]
        mags[keep] = mags[keep] + factor * ref["mags"][dup]
    return grads, mags


def _make(c, a, names, dt):
    """Fresh leaves with the case's layouts: {name: (leaf, owning buffer)}; with alias the reusing
    argument gets the kept leaf's object (kv: v is k; qk: k is q)."""
    lrng = np.random.default_rng(c["seed"] + 3)
    alias = c.get("alias")
    dup = ALIAS[alias][1] if alias else None
    made = {n: tensor(a[n], dt, c["layouts"][n], lrng) for n in names if n != dup}
    if alias:
        made[dup] = made[ALIAS[alias][0]]
    elif c.get("kvpack"):
        made.update(packed_kv(a["k"], a["v"], dt))
    return made


def run(mod, fn, c):
    """Run one function on one case (see the module docstring for the calls)."""
    res = Result()
    torch.set_default_dtype(torch.float32)  # undo what an earlier call may have changed
    dt, dtk = TORCH_DT[c["dtype"]], c["dtype"]
    if c.get("prime") or c.get("prime_from"):
        try:
            _prime(mod, fn, c, dt)
        except Exception as exc:  # noqa: BLE001
            res.t1 = f"[prime] raised {type(exc).__name__}: {str(exc)[:90]}"
            return res
    a = arrays(c)
    alias = c.get("alias")
    names = NAMES if fn == DIFF else NAMES[:3]
    b, t, hq, _, d = c["shape"]
    oshape = (b, t, hq // 2 if fn == DIFF else hq, d)
    g = np.random.default_rng(c["seed"] + 7).standard_normal(oshape).astype(NP_DT[dtk]).astype(np.float64)
    base = ref_for(fn, c, a, g, "base")
    frozen = set(c.get("frozen", ()))
    if alias and set(ALIAS[alias]) & frozen:
        frozen |= set(ALIAS[alias])
    nonleaf = set(c.get("nonleaf", ()))
    calls = [x for x in CALLS if not (x == "sum" and c.get("nosum")) and x in c.get("calls", CALLS)]
    half = {n: 0.5 * x for n, x in a.items()}
    for call in calls:
        if call == "interleave":
            continue  # handled by _interleave after the other calls
        # "accum": two graph-building calls on two sets of leaves (the second set holds half the
        # values), each followed by its own backward; afterwards BOTH sets must hold their gradients
        rounds = [(a, base, "")] if call != "accum" else [(a, base, "accum0"),
                                                          (half, ref_for(fn, c, half, g, "halvedg"), "accum1")]
        kept = []
        for vals, rref, rtag in rounds:
            made = _make(c, vals, names, dt)
            leaves = {n: m[0] for n, m in made.items()}
            if call in GRAD_CALLS:
                for n, x in leaves.items():
                    if n not in frozen:
                        x.requires_grad_(True)
            pre = PREGRAD if (call == "grad" and c.get("pregrad")) else 0.0
            if pre:
                for n, x in leaves.items():
                    if x.requires_grad and x.grad is None:
                        x.grad = torch.full(tuple(x.shape), pre, dtype=dt)
            ts = dict(leaves)
            if call in ("grad", "sum", "twice", "tcot"):
                for n in nonleaf & set(ts):
                    ts[n] = leaves[n].view_as(leaves[n])  # a non-leaf view; gradients go to the leaf
                if alias:
                    ts[ALIAS[alias][1]] = ts[ALIAS[alias][0]]
            trains = call in ("grad", "sum", "twice", "tcot", "accum") and any(
                x.requires_grad for x in ts.values())
            # "reused": call, halve the same tensors in place (through the buffers that own their
            # storage, which also works for expanded views), call again under no_grad
            steps = [("grad" if call in ("sum", "twice", "tcot", "accum") else call, rref)] if call != "reused" else [
                ("plain", base), ("no_grad", ref_for(fn, c, half, None, "halved"))]
            out = None
            for step, (mode, ref) in enumerate(steps):
                tag = rtag or (call if call != "reused" else f"reused{step}")
                if call == "reused" and step == 1:
                    with torch.no_grad():
                        for buf in {id(m[1]): m[1] for m in made.values()}.values():
                            buf.mul_(0.5)
                snap = _snap(ts)
                try:
                    out = _call(mod, fn, c, ts, names, mode if mode != "grad" else "plain")
                except Exception as exc:  # noqa: BLE001
                    res.t1 = f"[{tag}] raised {type(exc).__name__}: {str(exc)[:90]}"
                    return res
                bad = _contract(out, ts, snap, oshape, dt, mode, tag)
                if bad:
                    res.t1 = bad
                    return res
                if trains and not out.requires_grad:
                    res.t1 = f"[{tag}] output detached from the autograd graph"
                    return res
                r, m = compare(out.detach().numpy(), ref["out"], ref["mag"], ref["n"], dtk)
                res.note("T2", r, f"[{tag}] values {m}")
            if not trains:
                continue
            want = [n for n in names if n not in frozen and not (alias and n == ALIAS[alias][1])]
            factor = 2.0 if call == "twice" else 1.0
            if call == "sum":
                gref = ref_for(fn, c, a, np.ones(oshape), "sum")
                cot = None
            else:
                gref, cot = rref, torch.tensor(g, dtype=dt)
            if call == "tcot":
                # the caller's loss reads the output heads-first: the cotangent arrives transposed
                cot = torch.tensor(np.ascontiguousarray(g.transpose(0, 2, 1, 3)), dtype=dt).transpose(1, 2)
            try:
                if call == "grad" and c.get("agrad"):
                    got = torch.autograd.grad(out, [leaves[n] for n in want], cot, allow_unused=True)
                    got = dict(zip(want, got))
                    for n in want:  # torch.autograd.grad must leave every .grad alone
                        held = leaves[n].grad
                        if (held is None) != (not pre) or (pre and not torch.equal(
                                held, torch.full(tuple(held.shape), pre, dtype=dt))):
                            res.note("T3", math.inf, f"[{call}] torch.autograd.grad changed the .grad of {n}")
                    pre_sub = 0.0
                else:
                    if call == "twice":
                        out.backward(cot, retain_graph=True)  # a second backward through the same graph
                    if cot is None:
                        out.sum().backward()
                    else:
                        out.backward(cot)
                    got = {n: leaves[n].grad for n in want}
                    pre_sub = pre
            except Exception as exc:  # noqa: BLE001
                res.note("T3", math.inf, f"[{rtag or call}] backward raised {type(exc).__name__}: {str(exc)[:80]}")
                continue
            if call == "accum":
                kept.append((leaves, want, gref))
                continue
            grads, mags = _grad_ref(gref, want, alias, factor)
            for n in want:
                x = got[n]
                arr = np.zeros(leaves[n].shape) if x is None else x.detach().numpy() - pre_sub
                r, m = compare(arr, grads[n], mags[n], gref["n"], dtk)
                res.note("T3", r, f"[{call}] d{n}{' (None)' if x is None else ''} {m}")
        for j, (leaves, want, gref) in enumerate(kept):
            grads, mags = _grad_ref(gref, want, alias)
            for n in want:
                x = leaves[n].grad
                arr = np.zeros(leaves[n].shape) if x is None else x.detach().numpy()
                r, m = compare(arr, grads[n], mags[n], gref["n"], dtk)
                res.note("T3", r, f"[accum{j}, read after both backwards] d{n}{' (None)' if x is None else ''} {m}")
    if "interleave" in calls:
        _interleave(res, mod, fn, c, a, half, names, dt, g, base, frozen, alias)
        if res.t1:
            return res
    if c.get("swapv") and not c.get("kvpack") and not alias:
        # same q, k (and lambda_logits) objects, a new value tensor: nothing computed from the
        # old values may be reused
        lrng = np.random.default_rng(c["seed"] + 3)
        ts = {n: tensor(a[n], dt, c["layouts"][n], lrng)[0] for n in names}
        swapped = dict(a, v=-0.5 * a["v"])
        ref2 = ref_for(fn, c, swapped, None, "swapv")
        for tag, mode, ref in (("swapv0", "plain", base), ("swapv1", "no_grad", ref2)):
            if tag == "swapv1":
                ts = dict(ts, v=tensor(swapped["v"], dt, c["layouts"]["v"], lrng)[0])
            snap = _snap(ts)
            try:
                out = _call(mod, fn, c, ts, names, mode)
            except Exception as exc:  # noqa: BLE001
                res.t1 = f"[{tag}] raised {type(exc).__name__}: {str(exc)[:90]}"
                return res
            bad = _contract(out, ts, snap, oshape, dt, mode, tag)
            if bad:
                res.t1 = bad
                return res
            r, m = compare(out.detach().numpy(), ref["out"], ref["mag"], ref["n"], dtk)
            res.note("T2", r, f"[{tag}] values {m}")
    return res


def _interleave(res, mod, fn, c, a, half, names, dt, g, base, frozen, alias):
    """Call 10: forward on two sets of leaves (the second holds half the values), then the first
    graph's backward, then the second's; both sets' gradients are compared afterwards."""
    dtk = c["dtype"]
    sets = []
    for vals, rref, tag in ((a, base, "interleave0"),
                            (half, ref_for(fn, c, half, g, "halvedg"), "interleave1")):
        made = _make(c, vals, names, dt)
        leaves = {n: m[0] for n, m in made.items()}
        for n, x in leaves.items():
            if n not in frozen:
                x.requires_grad_(True)
        ts = dict(leaves)
        if alias:
            ts[ALIAS[alias][1]] = ts[ALIAS[alias][0]]
        snap = _snap(ts)
        try:
            out = _call(mod, fn, c, ts, names, "plain")
        except Exception as exc:  # noqa: BLE001
            res.t1 = f"[{tag}] raised {type(exc).__name__}: {str(exc)[:90]}"
            return
        bad = _contract(out, ts, snap, tuple(base["out"].shape), dt, "plain", tag)
        if bad:
            res.t1 = bad
            return
        trains = any(x.requires_grad for x in ts.values())
        if trains and not out.requires_grad:
            res.t1 = f"[{tag}] output detached from the autograd graph"
            return
        r, m = compare(out.detach().numpy(), rref["out"], rref["mag"], rref["n"], dtk)
        res.note("T2", r, f"[{tag}] values {m}")
        sets.append((leaves, out, rref, trains, tag))
    want = [n for n in names if n not in frozen and not (alias and n == ALIAS[alias][1])]
    done = []
    for leaves, out, rref, trains, tag in sets:
        if not trains:
            continue
        try:
            out.backward(torch.tensor(g, dtype=dt))
        except Exception as exc:  # noqa: BLE001
            res.note("T3", math.inf, f"[{tag}] backward raised {type(exc).__name__}: {str(exc)[:80]}")
            continue
        done.append((leaves, rref, tag))
    for leaves, rref, tag in done:
        grads, mags = _grad_ref(rref, want, alias)
        for n in want:
            x = leaves[n].grad
            arr = np.zeros(leaves[n].shape) if x is None else x.detach().numpy()
            r, m = compare(arr, grads[n], mags[n], rref["n"], dtk)
            res.note("T3", r, f"[{tag}, read after both backwards] d{n}{' (None)' if x is None else ''} {m}")


def fails(res, tier, clear=1.0):
    return res.t1 is not None if tier == "T1" else res.ratio(tier) > clear


def earlier(tier):
    return {"T1": [], "T2": ["T1"], "T3": ["T1", "T2"]}[tier]


def describe(res):
    return (f"T1 {res.t1 or 'ok'}, T2 x{res.ratio('T2'):.3g} {res.err['T2'][1]}, "
            f"T3 x{res.ratio('T3'):.3g} {res.err['T3'][1]}")
# =============================================================== input generators

def level_arrays(level):
    """Every query and key points along x, so that every scaled logit is close to `level`."""
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


def dominant_future_arrays(level):
    """Every scaled logit is close to +level, except those of key 0, close to -level.

    Row 0 of a causal call sees only key 0, which lies about 2 * level below its future keys."""
    def make(rng, c):
        b, t, hq, hkv, d = c["shape"]
        q = 0.1 * rng.standard_normal((b, t, hq, d))
        k = 0.1 * rng.standard_normal((b, t, hkv, d))
        amp = math.sqrt(level * math.sqrt(d))
        q[..., 0] += amp
        k[..., 0] += amp
        k[:, 0, :, 0] -= 2 * amp
        return {"q": q, "k": k, "v": rng.standard_normal((b, t, hkv, d))}
    make.__name__ = f"dominant_future_arrays({level:g})"
    return make


def buried_block_arrays(rng, c):
    """Keys 64..127 (one whole 64-key block) score about 20 below every other key of every row.

    Their weights are ~1e-10 to 1e-11: tiny, but far from zero at float32 or float64 precision."""
    b, t, hq, hkv, d = c["shape"]
    q = 0.3 * rng.standard_normal((b, t, hq, d))
    k = 0.3 * rng.standard_normal((b, t, hkv, d))
    q[..., 0] += 4.0
    k[:, 64:128, :, 0] -= 10.0 * math.sqrt(d) / 2.0
    return {"q": q, "k": k, "v": rng.standard_normal((b, t, hkv, d))}


def zero_key_arrays(rng, c):
    """Random inputs, except that key 1 of kv head 0 is the zero vector (its scores are exactly 0)."""
    b, t, hq, hkv, d = c["shape"]
    a = {"q": rng.standard_normal((b, t, hq, d)), "k": rng.standard_normal((b, t, hkv, d)),
         "v": rng.standard_normal((b, t, hkv, d))}
    a["k"][:, 1, 0, :] = 0.0
    return a


def paired_query_arrays(rng, c):
    """Random inputs, except that the two query heads of every pair (2i, 2i + 1) are identical."""
    b, t, hq, hkv, d = c["shape"]
    q = rng.standard_normal((b, t, hq, d))
    q[:, :, 1::2] = q[:, :, 0::2]
    return {"q": q, "k": rng.standard_normal((b, t, hkv, d)), "v": rng.standard_normal((b, t, hkv, d))}


def zero_query_arrays(rng, c):
    """Random keys and values, every query the zero vector: every logit of every row is exactly 0."""
    b, t, hq, hkv, d = c["shape"]
    return {"q": np.zeros((b, t, hq, d)), "k": rng.standard_normal((b, t, hkv, d)),
            "v": rng.standard_normal((b, t, hkv, d))}


def repeated_key_arrays(rng, c):
    """Random inputs, except that key 2 repeats key 0 (every row sees a tie wherever key 0 is its maximum)."""
    b, t, hq, hkv, d = c["shape"]
    a = {"q": rng.standard_normal((b, t, hq, d)), "k": rng.standard_normal((b, t, hkv, d)),
         "v": rng.standard_normal((b, t, hkv, d))}
    a["q"][..., 0] += 3.0
    a["k"][:, 0, :, 0] += 3.0
    a["k"][:, 2] = a["k"][:, 0]
    return a


def swap_value_features(a):
    """The case's inputs with the features of every value vector reversed (same per-vector sums
    for D = 2, where a + b and b + a round identically)."""
    b = dict(a)
    b["v"] = np.ascontiguousarray(a["v"][..., ::-1])
    return b


def shift_values(a):
    """The case's inputs with 1 added to every value (new per-vector sums)."""
    b = dict(a)
    b["v"] = a["v"] + 1.0
    return b


ZERO_Q = zero_query_arrays
REPEATED_KEY = repeated_key_arrays
HIGH, LOW, FAR = level_arrays(120.0), level_arrays(-120.0), level_arrays(-12000.0)
DOM = dominant_future_arrays(120.0)
BURIED = buried_block_arrays
ZERO_KEY = zero_key_arrays
PAIRED = paired_query_arrays

ALL_BEXP = {"q": "bexp", "k": "bexp", "v": "bexp", "lambda_logits": "bexp"}
ALL_STEPPED = {"q": "stepped", "k": "stepped", "v": "stepped", "lambda_logits": "stepped"}
ALL_SLICED = {"q": "sliced", "k": "sliced", "v": "sliced", "lambda_logits": "sliced"}
ALL_BHTD = {"q": "bhtd", "k": "bhtd", "v": "bhtd", "lambda_logits": "bht"}
KV_TEXP = {"k": "texp", "v": "texp"}
LAM_TEXP = {"lambda_logits": "texp"}
QKV = ("q", "k", "v")
C = dict(contig=True)

def same_qk_arrays(rng, c):
    """Random inputs with the keys equal in value to the queries (Hq == Hkv), as separate objects."""
    b, t, hq, hkv, d = c["shape"]
    q = rng.standard_normal((b, t, hq, d))
    return {"q": q, "k": q.copy(), "v": rng.standard_normal((b, t, hkv, d))}


SAME_QK = same_qk_arrays
DOM1 = dominant_future_arrays(120.0)

# =============================================================== battery

SHAPES = (  # B, T, Hq, Hkv, D
    (2, 5, 4, 2, 3),    # G = 2, H = 2
    (1, 1, 2, 1, 4),    # one token
    (2, 6, 8, 2, 4),    # G = 4
    (1, 7, 3, 3, 5),    # Hkv = Hq, gqa only
    (2, 4, 6, 3, 2),    # H = 3, D = 2
    (1, 9, 4, 1, 1),    # D = 1, Hkv = 1
    (1, 3, 1, 1, 2),    # one head, gqa only
    (1, 5, 8, 1, 2),    # G = 8, multi-query
    (1, 6, 6, 2, 4),    # G = 3 (not a power of two), gqa only
    (1, 4, 10, 5, 3),   # H = 5, Hkv = 5
    (2, 4, 6, 1, 3),    # G = 6 multi-query, H = 3
    (3, 2, 2, 1, 2),    # H = 1 with B = 3
    (2, 5, 4, 2, 8),    # D = 8
    (1, 4, 4, 4, 16),   # D = 16, Hkv = Hq
)


def battery():
    out, i = [], 0
    for shape, causal in itertools.product(SHAPES, (True, False)):
        out.append(case(shape, ("f32", "f64")[i % 2], causal, i))
        i += 1
    extras = [
        # large logits, far-apart logits, saturated gates
        ((1, 40, 4, 2, 8), "f32", True, dict(logit_max=100.0)),
        ((2, 6, 8, 2, 4), "f32", False, dict(logit_max=120.0, lam="saturated")),
        ((2, 4, 6, 3, 2), "f64", True, dict(logit_max=400.0)),
        ((1, 4, 4, 2, 4), "f32", True, dict(arrays=HIGH)),
        ((1, 4, 4, 2, 4), "f32", False, dict(arrays=LOW)),
        ((1, 4, 4, 2, 4), "f32", True, dict(arrays=FAR)),
        ((1, 4, 4, 2, 4), "f32", True, dict(arrays=DOM)),
        ((1, 4, 4, 2, 4), "f64", True, dict(arrays=dominant_future_arrays(800.0))),
        ((2, 5, 4, 2, 1), "f32", True, dict(arrays=DOM1)),
        ((1, 6, 2, 1, 1), "f64", True, dict(arrays=dominant_future_arrays(800.0))),
        ((2, 5, 4, 2, 3), "f32", True, dict(lam="saturated")),
        ((1, 9, 4, 1, 1), "f32", True, dict(lam=-1000.0)),
        ((2, 5, 4, 2, 3), "f64", False, dict(lam=1000.0)),
        ((2, 5, 4, 2, 3), "f64", True, dict(lam=0.0)),
        # memory layouts: broadcast over batch, heads or tokens, packed kv, strided, heads-first
        ((2, 5, 4, 2, 3), "f64", True, dict(layouts={"q": "bexp", "k": "hexp", "v": "tbhd", "lambda_logits": "bexp"})),
        ((2, 6, 8, 2, 4), "f32", False, dict(layouts={"q": "hexp", "k": "bexp", "v": "bexp", "lambda_logits": "hexp"})),
        ((2, 5, 4, 2, 3), "f64", True, dict(layouts=ALL_STEPPED)),
        ((2, 6, 8, 2, 4), "f32", False, dict(layouts=ALL_SLICED)),
        ((2, 6, 8, 2, 4), "f64", True, dict(layouts=ALL_BHTD)),
        ((2, 5, 4, 2, 3), "f64", True, dict(contig=True, layouts=KV_TEXP)),
        ((1, 6, 4, 2, 3), "f32", False, dict(contig=True, layouts={"v": "texp"})),
        ((2, 5, 4, 2, 3), "f64", True, dict(contig=True, layouts={"k": "hexp", "v": "hexp"})),
        ((2, 5, 4, 2, 3), "f64", True, dict(contig=True, layouts={"q": "bhtd"})),
        ((1, 5, 4, 2, 3), "f32", False, dict(layouts={"q": "texp", "lambda_logits": "texp"})),
        ((2, 5, 4, 2, 3), "f64", True, dict(kvpack=True)),
        ((1, 6, 3, 3, 2), "f32", False, dict(kvpack=True)),
        ((1, 5, 8, 1, 2), "f64", True, dict(contig=True, kvpack=True, frozen=("v",))),
        # many heads, several sequences, longer rows
        ((1, 4, 12, 4, 2), "f64", True, {}),
        ((2, 3, 24, 2, 2), "f32", True, {}),
        ((5, 3, 4, 2, 2), "f64", True, {}),
        ((1, 7, 4, 2, 64), "f64", True, {}),
        ((2, 5, 4, 2, 80), "f32", False, {}),
        ((1, 70, 4, 2, 3), "f64", True, dict(contig=True, layouts={"q": "bhtd"})),
        ((1, 130, 2, 1, 4), "f32", False, dict(arrays=BURIED)),
        ((1, 140, 2, 1, 2), "f32", True, {}),
        # autograd: non-leaf inputs, torch.autograd.grad, gradient accumulation, frozen inputs
        ((2, 5, 4, 2, 3), "f64", True, dict(nonleaf=NAMES)),
        ((2, 5, 4, 2, 3), "f64", True, dict(agrad=True)),
        ((2, 6, 8, 2, 4), "f32", False, dict(pregrad=True, layouts=ALL_SLICED)),
        ((2, 5, 4, 2, 3), "f64", True, dict(agrad=True, pregrad=True)),
        # call sequences, new values for the same q and k objects, zero keys, identical pair heads
        ((2, 5, 4, 2, 3), "f64", True, dict(prime=[((2, 5, 4, 2, 3), False), ((1, 3, 4, 2, 3), True)])),
        ((2, 5, 4, 2, 3), "f64", True, dict(prime=[((2, 3, 4, 2, 3), True)], prime_mode="inference")),
        ((2, 5, 4, 2, 3), "f64", True, dict(swapv=True)),
        ((2, 5, 4, 2, 3), "f64", True, dict(arrays=ZERO_KEY)),
        ((2, 5, 4, 2, 3), "f64", True, dict(arrays=PAIRED)),
        # hail: one object for keys and values, all-equal logits
        ((2, 5, 4, 2, 3), "f64", True, dict(alias="kv")),
        ((2, 5, 4, 4, 3), "f64", False, dict(alias="kv", frozen=("q",))),
        ((2, 5, 4, 2, 3), "f64", False, dict(arrays=ZERO_Q)),
        ((1, 6, 8, 2, 2), "f32", True, dict(arrays=ZERO_Q)),
        ((2, 5, 4, 2, 3), "f64", True, dict(arrays=REPEATED_KEY)),
        # thaw: one object for queries and keys, keys equal to the queries, constant gates,
        # frozen attention with a trainable gate, strided gate logits, one sequence
        ((2, 5, 4, 4, 3), "f64", True, dict(alias="qk")),
        ((1, 6, 2, 2, 4), "f32", False, dict(alias="qk", layouts=ALL_BHTD)),
        ((2, 5, 4, 4, 3), "f64", False, dict(alias="qk", frozen=("v",))),
        ((2, 5, 3, 3, 2), "f64", True, dict(arrays=SAME_QK)),
        ((2, 5, 4, 2, 3), "f64", True, dict(lam=0.5, layouts={"lambda_logits": "sliced"})),
        ((2, 6, 8, 2, 4), "f32", False, dict(lam=-2.0)),
        ((2, 5, 4, 2, 3), "f64", True, dict(frozen=("q", "k", "v"))),
        ((2, 6, 8, 2, 4), "f32", False, dict(frozen=("q", "k", "v"), layouts=ALL_BHTD)),
        ((2, 5, 4, 2, 3), "f64", True, dict(frozen=("q", "k"))),
        ((2, 5, 4, 2, 3), "f64", False, dict(frozen=("lambda_logits",), layouts={"lambda_logits": "stepped"})),
        ((1, 5, 4, 2, 3), "f64", True, dict(contig=True, layouts={"lambda_logits": "sliced"})),
        # dawn: every argument by keyword; an earlier graph-free call on derived (different) inputs
        ((2, 5, 4, 2, 3), "f64", True, dict(mode="allkw")),
        ((1, 6, 6, 2, 4), "f32", False, dict(mode="allkw", layouts=ALL_BHTD)),
        ((1, 5, 4, 2, 2), "f64", True, dict(prime_from=shift_values)),
        # breeze: many heads (18 query heads, G = 6), a bidirectional call whose first key lies far
        # below the later ones, a first call for its configuration made in grad mode, B == T,
        # a long non-causal row of several key blocks, multi-query with T == 1
        ((1, 4, 18, 3, 2), "f64", True, {}),
        ((1, 4, 4, 2, 4), "f32", False, dict(arrays=DOM)),
        ((2, 3, 4, 2, 5), "f64", True, dict(calls=("grad", "sum"))),
        ((3, 3, 4, 2, 2), "f64", True, {}),
        ((1, 37, 4, 2, 3), "f64", False, dict(contig=True)),
        ((2, 1, 6, 1, 3), "f32", True, {}),
        # fog: a float32 causal call after float64 calls in the same process
        ((2, 5, 4, 2, 3), "f32", True, dict(prime=[((2, 3, 4, 2, 3), True)], prime_dtype="f64")),
    ]
    for shape, dtype, causal, extra in extras:
        out.append(case(shape, dtype, causal, i, **extra))
        i += 1
    return out


# =============================================================== witnesses and outside inputs

BASE = (2, 5, 4, 2, 3)    # B, T, Hq, Hkv, D: G = 2, H = 2 (the typical small example's shape)
MHA = (2, 5, 4, 4, 3)     # Hkv = Hq (gqa only)
WIDE = (2, 6, 8, 2, 4)    # G = 4, H = 4
MQA = (1, 5, 8, 1, 2)     # Hkv = 1, G = 8
H3 = (2, 4, 6, 3, 2)      # H = 3 output heads
H1 = (3, 2, 2, 1, 2)      # H = 1 output head
MANY = (1, 4, 18, 3, 2)   # Hq = 18 (H = 9), G = 6
LONG = (1, 40, 4, 2, 8)   # three key blocks of 16
C = dict(contig=True)
ALL_FROZEN = ("q", "k", "v", "lambda_logits")
GRAPH_FREE = ("inference", "no_grad", "plain", "reused")
NO_TWICE = tuple(x for x in CALLS if x != "twice")
NO_INTERLEAVE = tuple(x for x in CALLS if x != "interleave")
PLAIN_COTANGENT = tuple(x for x in CALLS if x not in ("sum", "tcot"))

LAM_FROZEN = ("lambda_logits",)
TRAINING = ("grad", "sum", "twice", "tcot", "accum", "interleave")
T1_MQA = (2, 1, 6, 1, 3)  # one token, multi-query
T1_ONE = (1, 1, 2, 1, 4)  # one token, one pair

GRAPH_CALLS = ("grad", "sum", "twice", "tcot", "accum", "interleave")
QKV_FROZEN = ("q", "k", "v")
KV_FROZEN = ("k", "v")
MQA6 = (2, 4, 6, 1, 3)    # Hkv = 1, G = 6, H = 3
D1 = (2, 5, 4, 2, 1)      # head_dim 1
D1_MQA = (1, 9, 4, 1, 1)  # head_dim 1, Hkv = 1
MHA_ONE = (2, 1, 1, 1, 3)  # T = 1, Hq = Hkv = 1 (gqa only)
B1 = (1, 6, 8, 2, 4)      # one sequence, G = 4


def _dims(c):
    b, t, hq, hkv, d = c["shape"]
    return b, t, hq, hkv, d, hq // hkv, hq // 2


def _trains(c, names):
    """Does a graph-building call of this case have one of `names` requiring grad?"""
    if not set(c.get("calls", CALLS)) & set(GRAPH_CALLS):
        return False
    frozen = set(c.get("frozen", ()))
    alias = c.get("alias")
    if alias and set(ALIAS[alias]) & frozen:
        frozen |= set(ALIAS[alias])
    return any(n not in frozen for n in names)


def _gqa_shape_where(test):
    """A gqa_attention bug seen by both functions (diff_v2_attention calls gqa_attention)."""
    return lambda c, fn: test(c)


# --------------------------------------------------------------- haze: WHERE helpers

_ACACHE = {}


def _arr(c):
    """The case's input arrays (float64 copies of the dtype-rounded values), cached per case id."""
    if c["id"] not in _ACACHE:
        _ACACHE[c["id"]] = arrays(c)
    return _ACACHE[c["id"]]


def _value_sets(c):
    """The input values a run uses: the case's own and the halved ones (calls accum, interleave,
    reused); swapv scales v by -0.5, which leaves the gate logits alone."""
    a = _arr(c)
    return [a, {n: 0.5 * x for n, x in a.items()}]


def _rms_gate_visible(c):
    """Some gate large enough that 1 / sqrt(1 + lam^2) differs from 1 beyond the dtype's allowance
    (over both value sets): a logit above -7 in float32, above -18 in float64."""
    thr = -7.0 if c["dtype"] == "f32" else -18.0
    return any(bool((a["lambda_logits"] > thr).any()) for a in _value_sets(c))


def _both(test):
    """A gqa_attention bug seen by both functions (diff_v2_attention calls gqa_attention)."""
    return lambda c, fn: bool(test(c))


def _diff_only(test):
    return lambda c, fn: fn == DIFF and bool(test(c))


WHERE = {
    # gqa_attention (diff_v2_attention inherits the same inputs)
    "wrong/query_heads_required_even":
        _both(lambda c: _dims(c)[2] % 2 == 1),
    "wrong/flash_row_term_from_row_sums":
        _both(lambda c: _dims(c)[4] >= 2 and _trains(c, ("q", "k"))),
    "wrong/exponentials_normalised_in_place":
        _both(lambda c: _trains(c, ("q", "k"))),
    "wrong/batch_fold_group_size_from_merged_heads":
        _both(lambda c: _dims(c)[0] >= 2),
    "wrong/scale_from_key_projection_width":
        _both(lambda c: _dims(c)[3] >= 2),
    "wrong/value_head_modulo_group":
        _both(lambda c: _dims(c)[2] >= 2),
    "wrong/logsumexp_saved_in_base_two":
        _both(lambda c: _dims(c)[1] >= 2 and _trains(c, ("q", "k", "v"))),
    "wrong/log_normaliser_before_scaling":
        _both(lambda c: _dims(c)[4] >= 2 and _dims(c)[1] >= 2),
    # diff_v2_attention only
    "wrong/v1_gate_logits_summed_over_heads":
        _diff_only(lambda c: _dims(c)[6] >= 2),
    "wrong/context_rms_rescaled_by_gate":
        _diff_only(_rms_gate_visible),
    "wrong/shared_kv_detached_in_odd_call":
        _diff_only(lambda c: _trains(c, ("k", "v"))),
    "wrong/batch_folded_into_heads_head_major":
        _diff_only(lambda c: _dims(c)[0] >= 2),
    "wrong/bidirectional_calls_refused":   # the case's own flag, or that of an earlier (priming) call
        _diff_only(lambda c: not c["causal"] or any(not causal for _, causal in c.get("prime", ()))),
    "wrong/gate_grad_summed_over_tokens":
        _diff_only(lambda c: _dims(c)[1] >= 2 and _trains(c, ("lambda_logits",))),
}

ODD_MHA = (1, 7, 3, 3, 5)   # Hq = Hkv = 3 (gqa only)
G3 = (1, 6, 6, 2, 4)        # G = 3 (gqa only), B = 1
HQ1 = (1, 3, 1, 1, 2)       # one query head (gqa only)
T1_B2 = (2, 1, 6, 1, 3)     # one token, B = 2, H = 3

WITNESS = {
    # gqa_attention
    "wrong/query_heads_required_even": (ODD_MHA, "f64", True, C),
    "wrong/flash_row_term_from_row_sums": (BASE, "f64", True, C),
    "wrong/exponentials_normalised_in_place": (BASE, "f64", True, C),
    "wrong/batch_fold_group_size_from_merged_heads": (BASE, "f64", True, C),
    "wrong/scale_from_key_projection_width": (BASE, "f64", True, C),
    "wrong/value_head_modulo_group": (WIDE, "f64", True, C),
    "wrong/logsumexp_saved_in_base_two": (BASE, "f64", True, C),
    "wrong/log_normaliser_before_scaling": (BASE, "f64", True, C),
    # diff_v2_attention
    "wrong/v1_gate_logits_summed_over_heads": (BASE, "f64", True, C),
    "wrong/context_rms_rescaled_by_gate": (BASE, "f64", True, C),
    "wrong/shared_kv_detached_in_odd_call": (BASE, "f64", True, C),
    "wrong/batch_folded_into_heads_head_major": (BASE, "f64", True, C),
    "wrong/bidirectional_calls_refused": (BASE, "f64", False, C),
    "wrong/gate_grad_summed_over_tokens": (BASE, "f64", True, C),
}

# Inputs outside a label's WHERE: every function the case applies to must pass every tier
# there (each run on a fresh import). verify.py checks that each of them is outside WHERE.
OUTSIDE = {
    "wrong/query_heads_required_even": [(BASE, "f64", True, {}),
                                        (MQA, "f32", False, dict(layouts=ALL_STEPPED)),
                                        (G3, "f64", True, {})],
    "wrong/flash_row_term_from_row_sums": [((1, 9, 4, 1, 1), "f64", True, {}),
                                           (D1, "f32", False, dict(layouts=ALL_BHTD)),
                                           (BASE, "f64", True, dict(frozen=("q", "k")))],
    "wrong/exponentials_normalised_in_place": [(BASE, "f64", True, dict(frozen=("q", "k"))),
                                               (BASE, "f32", False, dict(calls=GRAPH_FREE)),
                                               (WIDE, "f64", True, dict(frozen=("q", "k"), layouts=ALL_SLICED))],
    "wrong/batch_fold_group_size_from_merged_heads": [(MQA, "f64", True, dict(layouts=ALL_STEPPED)),
                                                      (G3, "f32", False, {}),
                                                      ((1, 4, 12, 4, 2), "f64", True, {})],
    "wrong/scale_from_key_projection_width": [(MQA, "f64", True, {}),
                                              (MQA6, "f32", False, dict(layouts=ALL_BHTD)),
                                              ((1, 9, 4, 1, 1), "f64", True, {})],
    "wrong/value_head_modulo_group": [(HQ1, "f64", True, {}),
                                      (MHA_ONE, "f32", False, {}),
                                      ((2, 4, 1, 1, 5), "f64", True, dict(layouts=ALL_SLICED))],
    "wrong/logsumexp_saved_in_base_two": [(T1_B2, "f64", True, {}),
                                          (T1_ONE, "f32", False, {}),
                                          (BASE, "f64", True, dict(frozen=("q", "k", "v")))],
    "wrong/log_normaliser_before_scaling": [((1, 9, 4, 1, 1), "f64", True, {}),
                                            (T1_B2, "f32", False, {}),
                                            (D1, "f64", False, {})],
    "wrong/v1_gate_logits_summed_over_heads": [(H1, "f64", True, {}),
                                               (T1_ONE, "f32", False, {}),
                                               ((1, 6, 2, 1, 1), "f64", True, dict(lam="saturated"))],
    "wrong/context_rms_rescaled_by_gate": [(BASE, "f64", True, dict(lam=-100.0)),
                                           (WIDE, "f32", False, dict(lam=-30.0)),
                                           (MQA, "f64", True, dict(lam=-1000.0, layouts=ALL_STEPPED))],
    "wrong/shared_kv_detached_in_odd_call": [(BASE, "f64", True, dict(frozen=("k", "v"))),
                                             (WIDE, "f32", False, dict(frozen=("k", "v"), layouts=ALL_BHTD)),
                                             (BASE, "f64", False, dict(calls=GRAPH_FREE))],
    "wrong/batch_folded_into_heads_head_major": [(MQA, "f64", True, dict(layouts=ALL_STEPPED)),
                                                 (B1, "f32", False, {}),
                                                 (MANY, "f64", True, {})],
    "wrong/bidirectional_calls_refused": [(BASE, "f64", True, {}),
                                          (WIDE, "f32", True, dict(layouts=ALL_SLICED)),
                                          (MQA, "f64", True, {})],
    "wrong/gate_grad_summed_over_tokens": [(BASE, "f64", True, dict(frozen=("lambda_logits",))),
                                           (T1_B2, "f64", True, {}),
                                           (WIDE, "f32", False, dict(frozen=("lambda_logits",)))],
}


# The typical small example: B = 2, T = 5, Hq = 4, Hkv = 2, D = 3, float32, contiguous, causal,
# moderate logits, every input requiring grad, arguments (causal included) passed positionally,
# one call in grad mode on a fresh import followed by a backward with a random cotangent.
TYPICAL = (BASE, "f32", True)


def typical(path):
    """{fn: (values right, gradients right)} for the typical small example (fresh import)."""
    torch.set_default_dtype(torch.float32)
    mod = load(path)
    shape, dtk, causal = TYPICAL
    c = case(shape, dtk, causal, 0, contig=True)
    a = arrays(c)
    dt = TORCH_DT[dtk]
    result = {}
    for fn in (GQA, DIFF):
        names = NAMES if fn == DIFF else NAMES[:3]
        b, t, hq, _, d = shape
        oshape = (b, t, hq // 2 if fn == DIFF else hq, d)
        g = np.random.default_rng(123).standard_normal(oshape).astype(NP_DT[dtk]).astype(np.float64)
        ref = oracle(fn, a, causal, g)
        leaves = [torch.tensor(a[n], dtype=dt, requires_grad=True) for n in names]
        vals = grads = False
        try:
            out = getattr(mod, fn)(*leaves, causal)
            vals = compare(out.detach().numpy(), ref["out"], ref["mag"], ref["n"], dtk)[0] <= 1.0
            out.backward(torch.tensor(g, dtype=dt))
            grads = all(x.grad is not None and compare(x.grad.numpy(), ref["grads"][n], ref["mags"][n],
                                                       ref["n"], dtk)[0] <= 1.0 for n, x in zip(names, leaves))
        except Exception:  # noqa: BLE001
            pass
        result[fn] = (bool(vals), bool(grads))
    return result


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


# =============================================================== verdicts

def run_all(mod, cases, fns=None):
    """{fn: Result-like worst of all cases}, the failing case id noted per tier."""
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


def check_correct(mod, cases):
    problems = []
    for fn, w in run_all(mod, cases).items():
        for tier in ("T1", "T2", "T3"):
            if fails(w, tier):
                problems.append(f"{fn} fails {tier}: " + (w.t1 if tier == "T1" else
                                                           f"x{w.ratio(tier):.3g} {w.err[tier][1]}"))
    return problems, "passes all tiers"


def check_wrong(key, label, path, bat, wit, outside):
    """Witness and outside runs import the file afresh; the battery shares one module instance."""
    tier, fn = label["tier"], label["function"]
    inside = WHERE[key]
    witness = wit[key]
    problems = []
    if not inside(witness, fn):
        problems.append(f"witness {witness['id']} is not inside WHERE")
    for c in outside:
        for f in c["fns"]:
            if inside(c, f):
                problems.append(f"outside input {c['id']} ({f}) is inside WHERE")
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
    mod = load(path)
    runs = [(c, f, run(mod, f, c)) for c in bat for f in c["fns"]]
    runs += [(c, f, run(load(path), f, c)) for c in list(wit.values()) + list(outside) for f in c["fns"]]
    n_in = n_out = n_shown = 0
    for c, f, res in runs:
        if inside(c, f):
            n_in += 1
            n_shown += any(fails(res, t) for t in ("T1", "T2", "T3"))
            for t in earlier(tier):
                if fails(res, t):
                    problems.append(f"{f} fails {t} before {tier} inside WHERE ({c['id']}): {describe(res)}")
        else:
            n_out += 1
            if any(fails(res, t) for t in ("T1", "T2", "T3")):
                problems.append(f"{f} fails outside WHERE ({c['id']}): {describe(res)}")
    detail = f"{detail} | runs inside WHERE {n_in} ({n_shown} failing), outside {n_out} (all pass)"
    return problems, detail


_STATE = {}


def check_one(key):
    """(key, problems, detail) for one labelled file; runs in a worker process."""
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    label, bat, wit, out, everything = (_STATE["labels"][key], _STATE["bat"], _STATE["wit"], _STATE["out"],
                                        _STATE["everything"])
    path = REFERENCE if key == "(reference)" else os.path.join(HERE, key + ".py")
    torch.set_default_dtype(torch.float32)
    try:
        mod = load(path)
    except Exception as exc:  # noqa: BLE001
        return key, [f"import failed: {exc}"], ""
    if label.get("correct") is True:
        if key != "(reference)" and not key.startswith("correct/"):
            return key, ["labelled correct but not in correct/"], ""
        problems, detail = check_correct(mod, everything)
        return key, problems, detail
    missing = [f for f in ("function", "tier", "component", "bug", "where", "names") if not label.get(f)]
    if label.get("names") and not 6 <= len(label["names"]) <= 10:
        missing.append("6-10 names")
    if (missing or label["function"] not in (GQA, DIFF) or label["tier"] not in ("T1", "T2", "T3")
            or label["component"] not in COMPONENTS or key not in wit or key not in WHERE
            or not key.startswith("wrong/")):
        return key, [f"malformed label / no witness (missing {missing})"], ""
    problems, detail = check_wrong(key, label, path, bat, wit, out.get(key, []))
    return key, problems, detail


def typical_report(keys):
    """Print, for every labelled file, what the typical small example (TYPICAL) gives; return the
    numbers of wrong files that get it right (values and gradients) and right values."""
    print("typical small example (B=2, T=5, Hq=4, Hkv=2, D=3, float32, causal, all inputs requiring "
          "grad, positional arguments, fresh import):")
    both = vals_only = 0
    for key in keys:
        if key == "(reference)":
            continue
        r = typical(os.path.join(HERE, key + ".py"))
        v_ok = all(v for v, _ in r.values())
        g_ok = all(g for _, g in r.values())
        verdict = "right" if v_ok and g_ok else ("values right, gradients wrong" if v_ok else "wrong values")
        print(f"  {key:<60} {verdict}")
        if key.startswith("wrong/"):
            both += v_ok and g_ok
            vals_only += v_ok
    return both, vals_only


def main():
    import multiprocessing
    verbose = "-v" in sys.argv
    t0 = time.time()
    if "--typical" in sys.argv:
        with open(os.path.join(HERE, "labels.json")) as fh:
            labels = json.load(fh)
        only = [a for a in sys.argv[1:] if not a.startswith("-")]
        keys = sorted(k for k in labels if not only or any(o in k for o in only))
        both, vals = typical_report(keys)
        n_w = sum(k.startswith("wrong/") for k in keys)
        print(f"TYPICAL: {both}/{n_w} wrong files right on the typical example (values and gradients), "
              f"{vals}/{n_w} right values")
        return 0
    fd, ident = self_check()
    print(f"oracle self-check: VJP vs central differences {fd:.1e}, offset identity {ident:.1e}")
    with open(os.path.join(HERE, "labels.json")) as fh:
        labels = json.load(fh)
    files = sorted(f"{d}/{f[:-3]}" for d in ("correct", "wrong")
                   for f in os.listdir(os.path.join(HERE, d)) if f.endswith(".py"))
    only = [a for a in sys.argv[1:] if not a.startswith("-")]
    jobs = max([1] + [int(a[2:]) for a in sys.argv[1:] if a.startswith("-j") and a[2:].isdigit()])
    if only:
        files = [f for f in files if any(o in f for o in only)]
    failures = []
    if not only and set(files) != set(labels):
        failures.append(("labels.json", f"files and labels differ: {sorted(set(files) ^ set(labels))}"))
    bat = battery()
    wit = {k: v[0] for k, v in build(WITNESS, 1000).items()}
    out = build(OUTSIDE, 5000)
    everything = bat + list(wit.values()) + [c for cs in out.values() for c in cs]
    with_ref = os.path.exists(REFERENCE) and (not only or "--reference" in sys.argv)
    _STATE.update(labels=dict(labels, **({"(reference)": {"correct": True}} if with_ref else {})),
                  bat=bat, wit=wit, out=out, everything=everything)
    keys = [f for f in files if f in labels] + (["(reference)"] if with_ref else [])
    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        results = dict((k, (p, d)) for k, p, d in pool.imap_unordered(check_one, keys))
    rows = []
    for key in keys:
        label = labels.get(key, {"correct": True})
        problems, detail = results[key]
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
    n_ok = sum(1 for r in rows if r[0] != "(reference)" and r[4] == "confirmed")
    if not only:
        both, vals = typical_report(keys)
        print(f"TYPICAL: {both}/{n_w} wrong files right on the typical example (values and gradients), "
              f"{vals}/{n_w} right values")
    print(f"RESULT: {n_ok}/{n_c + n_w} labels confirmed ({n_c} correct, {n_w} wrong; "
          f"{len(bat)} battery cases, {len(wit)} witnesses) in {time.time() - t0:.1f} s")
    for key, why in failures:
        print(f"FAILED {key}: {why}")
    return 1 if failures else 0


if __name__ == "__main__":
    warnings.simplefilter("ignore")  # deprecation notes and non-leaf .grad hints from torch are not verdicts
    torch.manual_seed(0)
    torch.set_num_threads(1)
    sys.exit(main())
