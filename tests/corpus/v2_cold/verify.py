"""Confirm every label of the v2_cold DIFF V2 corpus against an independent float64 oracle.

Usage (from any directory):   python tests/corpus/v2_cold/verify.py [-v]

Nothing here imports the grader. The oracle is written in numpy and float64:
a forward pass for gqa_attention and diff_v2_attention and hand-derived
vector-Jacobian products. It is checked first, against central finite
differences of its own forward pass and against the identity "a value offset
shared by every token comes out multiplied by 1 - sigmoid(l)". torch is used
only to call the corpus files and to read the gradients autograd gives.

A run of one function on one case makes five calls, each on freshly built
tensors with the case's memory layouts:
  1. under torch.inference_mode(), inputs frozen;
  2. under torch.no_grad(), inputs requiring grad;
  3. with grad mode on, inputs frozen;
  4. with grad mode on, inputs requiring grad (except the case's "frozen"
     ones), then backward with a fixed cotangent;
  5. with grad mode on, inputs frozen; the inputs are then halved in place
     and the function is called again under torch.no_grad().

  T1 (contract): no exception; one tensor of the right shape, dtype and
     device; inputs unchanged (values, version counter, requires_grad flag);
     the caller's grad mode and default dtype unchanged by the call; in
     call 4 the output is attached to the graph.
  T2 (forward): the values of every call within the allowance.
  T3 (gradients): the gradient of every input that required grad in call 4
     within the allowance (a missing .grad counts as zeros; an exception in
     backward or a non-finite value is an infinite error).

The allowance is elementwise: SAFETY * u * n * mag + SAFETY * n * tiny, where
u is the unit roundoff of the case's dtype, n = G*T + 2*D + L + 10 (L the
largest |q|.|k|/sqrt(D)), mag the same computation on absolute values and
tiny the smallest normal number of the dtype.

What a case can ask for, besides shape, dtype and causal flag:
  layouts   memory layout per input: contig, bhtd / bht (a transposed view of
            a heads-first or token-first buffer), tbhd / tbh, sliced (a window
            of a larger buffer, non-zero storage offset), stepped (every other
            token, every third feature), packed (the heads of one input inside
            a wider row, as a slice of a fused projection), and expN (the
            tensor is a stride-0 expand along axis N; its data is made equal
            along that axis so the oracle sees the same numbers);
  mode      how causal is passed: positionally, by keyword, or left to its
            default;
  frozen    inputs that stay frozen in call 4;
  nonleaf   inputs passed in call 4 as non-leaf views of the leaves that
            collect the gradients (activations rather than parameters);
  lam       how lambda_logits is drawn (normal, saturated, or a constant);
  logit_max rescales q and k so that the largest |scaled logit| is this;
  prime     earlier calls (other shapes, the other flag or the other dtype,
            under no_grad) made on the same module before the five calls;
  fns       restrict the case to one function.

Every witness and every "outside" case runs on a freshly imported copy of the
file, so that state left behind by one case cannot reach another; the
battery runs on one import, in order, like a long training session.

How a label is confirmed:
  correct/<stem>: both functions pass every tier on the battery, on every
     witness and on every "outside" case.
  wrong/<stem>: on its witness (an input inside its "where") the blamed
     function fails the labelled tier (T1: any contract break; T2/T3: an
     error above CLEAR times the allowance), in the expected way (the
     witness's "expect" text appears in the failure, and its "clean" calls
     stay exact), and passes the earlier tiers; on
     the battery neither function fails a tier earlier than the label; the
     "outside" inputs (outside its "where") pass every tier; and when
     diff_v2_attention is blamed, gqa_attention passes every tier on every
     input.

Prints one row per file and a line starting with "RESULT:"; exits 1 when a
label is not confirmed.
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
CLEAR = 10.0
TORCH_DT = {"f32": torch.float32, "f64": torch.float64}
NP_DT = {"f32": np.float32, "f64": np.float64}
UNIT = {"f32": 2.0 ** -24, "f64": 2.0 ** -53}
TINY = {"f32": float(np.finfo(np.float32).tiny), "f64": float(np.finfo(np.float64).tiny)}
COMPONENTS = {"grouping", "pairing", "gate", "layout", "scale", "output", "mask", "softmax",
              "stability", "graph", "dtype", "backward", "mutation"}
_ids = itertools.count()


def load(path):
    spec = importlib.util.spec_from_file_location(f"_cold_v2_{next(_ids)}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# =============================================================== oracle (float64 numpy)

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
    """The oracle's VJPs against central finite differences; the offset identity."""
    rng = np.random.default_rng(17)
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

L4 = ("contig", "bhtd", "sliced", "stepped", "tbhd", "packed")
L3 = ("contig", "bht", "sliced", "stepped", "tbh", "packed")
NAMES = ("q", "k", "v", "lambda_logits")
SATURATED = (-1000.0, -100.0, -30.0, -20.0, 0.0, 20.0, 30.0, 100.0, 1000.0)


def case(shape, dtype, causal, i, **extra):
    b, t, hq, hkv, d = shape
    even_group = (hq // hkv) % 2 == 0
    fns = [GQA] + ([DIFF] if even_group else [])
    names = NAMES if even_group else NAMES[:3]
    if extra.pop("contig", False) or i % 4 == 0:
        layouts = {n: "contig" for n in names}
    else:
        layouts = {n: (L3 if n == "lambda_logits" else L4)[(i + 2 * j) % 6] for j, n in enumerate(names)}
    layouts.update(extra.pop("layouts", {}))
    mode = ("pos", "kw", "default")[i % 3]
    if mode == "default" and not causal:
        mode = "kw"
    c = dict(shape=shape, dtype=dtype, causal=causal, seed=4000 + 37 * i, layouts=layouts,
             mode=mode, fns=fns, id=f"c{i}")
    c.update(extra)
    if "fns" in extra:
        c["fns"] = [f for f in extra["fns"] if f in fns]
    return c


def arrays(c):
    rng = np.random.default_rng(c["seed"])
    b, t, hq, hkv, d = c["shape"]
    a = {"q": rng.standard_normal((b, t, hq, d)), "k": rng.standard_normal((b, t, hkv, d)),
         "v": rng.standard_normal((b, t, hkv, d))}
    if c.get("logit_max"):
        idx = np.arange(hq) // (hq // hkv)
        s = np.abs(np.einsum("bqhd,bkhd->bhqk", a["q"], a["k"][:, :, idx])).max() / math.sqrt(d)
        f = math.sqrt(c["logit_max"] / s)
        a["q"], a["k"] = a["q"] * f, a["k"] * f
    if (hq // hkv) % 2 == 0:
        lam = c.get("lam", "normal")
        if lam == "normal":
            a["lambda_logits"] = 2.0 * rng.standard_normal((b, t, hq // 2))
        elif lam == "saturated":
            a["lambda_logits"] = rng.choice(SATURATED, size=(b, t, hq // 2))
        else:
            a["lambda_logits"] = np.full((b, t, hq // 2), float(lam))
    for n, lay in c["layouts"].items():
        if n in a and lay.startswith("exp"):  # equal along the expanded axis
            ax = int(lay[3:])
            a[n] = np.repeat(np.take(a[n], [0], axis=ax), a[n].shape[ax], axis=ax)
    return {n: x.astype(NP_DT[c["dtype"]]).astype(np.float64) for n, x in a.items()}


def tensor(x, dtype, layout, rng):
    """(leaf, owner): a leaf tensor holding x in the requested layout, and the tensor to halve in place."""
    base = torch.tensor(x, dtype=dtype)
    junk = lambda *s: torch.tensor(rng.uniform(-500, 500, s), dtype=dtype)  # noqa: E731
    owner = None
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
    elif layout == "packed":
        # the heads of this input sit at an offset inside a wider row, as in a fused projection
        width = int(np.prod(x.shape[2:]))
        buf = junk(x.shape[0], x.shape[1], width + 7)
        buf[:, :, 5:5 + width] = base.reshape(x.shape[0], x.shape[1], width)
        out = buf[:, :, 5:5 + width].unflatten(2, x.shape[2:]) if x.ndim == 4 else buf[:, :, 5:5 + width]
    elif layout.startswith("exp"):
        ax = int(layout[3:])
        owner = base.narrow(ax, 0, 1).clone()
        out = owner.expand(base.shape)
    else:
        raise ValueError(layout)
    assert torch.equal(out, base)
    out = out.detach()
    return out, (owner if owner is not None else out)


# =============================================================== running

class Result:
    def __init__(self):
        self.t1 = None
        self.err = {"T2": (0.0, ""), "T3": (0.0, "")}
        self.calls = {}  # call tag -> worst forward ratio of that call

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


def _invoke(mod, fn, c, args):
    """Call with causal bound as the case says; report a change of the caller's global state."""
    kwargs = {}
    if c["mode"] == "pos":
        args = args + [c["causal"]]
    elif c["mode"] == "kw":
        kwargs["causal"] = c["causal"]
    grad_before, dtype_before = torch.is_grad_enabled(), torch.get_default_dtype()
    out = getattr(mod, fn)(*args, **kwargs)
    changed = None
    if torch.is_grad_enabled() != grad_before:
        changed = f"switched the caller's grad mode to {torch.is_grad_enabled()}"
        torch.set_grad_enabled(grad_before)
    if torch.get_default_dtype() != dtype_before:
        changed = f"changed the default dtype to {torch.get_default_dtype()}"
        torch.set_default_dtype(dtype_before)
    return out, changed


def _call(mod, fn, c, args, mode):
    if mode == "inference":
        with torch.inference_mode():
            return _invoke(mod, fn, c, args)
    if mode == "no_grad":
        with torch.no_grad():
            return _invoke(mod, fn, c, args)
    return _invoke(mod, fn, c, args)


def _prime(mod, fn, c):
    """Earlier calls a training or decoding loop might have made (no_grad, keyword causal)."""
    rng = np.random.default_rng(c["seed"] + 11)
    for item in c.get("prime", ()):
        shape, causal = item[0], item[1]
        dt = TORCH_DT[item[2] if len(item) > 2 else c["dtype"]]
        b, t, hq, hkv, d = shape
        a = [rng.standard_normal((b, t, hq, d)), rng.standard_normal((b, t, hkv, d)),
             rng.standard_normal((b, t, hkv, d))]
        if fn == DIFF:
            a.append(2.0 * rng.standard_normal((b, t, hq // 2)))
        with torch.no_grad():
            getattr(mod, fn)(*[torch.tensor(x, dtype=dt) for x in a], causal=causal)


def run(mod, fn, c):
    try:
        return _run(mod, fn, c)
    finally:  # whatever the file did, the next run starts from the usual global state
        torch.set_grad_enabled(True)


def _run(mod, fn, c):
    """Run one function on one case (see the module docstring for the five calls)."""
    res = Result()
    dt, dtk = TORCH_DT[c["dtype"]], c["dtype"]
    if c.get("prime"):
        try:
            _prime(mod, fn, c)
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
        built = {n: tensor(a[n], dt, c["layouts"][n], lrng) for n in names}
        ts = {n: leaf for n, (leaf, _) in built.items()}
        if call in GRAD_CALLS:
            for n, x in ts.items():
                if n not in c.get("frozen", ()):
                    x.requires_grad_(True)
        steps = [(call, base)] if call != "reused" else [
            ("plain", base), ("no_grad", ref_for(fn, c, {n: 0.5 * x for n, x in a.items()}, None, "halved"))]
        for step, (mode, ref) in enumerate(steps):
            tag = call if call != "reused" else f"reused{step}"
            if call == "reused" and step == 1:
                with torch.no_grad():
                    for _, owner in built.values():
                        owner.mul_(0.5)
            snap = {n: (x.detach().clone(), x._version, x.requires_grad) for n, x in ts.items()}
            args = [ts[n][...] if (call == "grad" and n in c.get("nonleaf", ()) and ts[n].requires_grad)
                    else ts[n] for n in names]
            try:
                out, changed = _call(mod, fn, c, args, mode)
            except Exception as exc:  # noqa: BLE001
                res.t1 = f"[{tag}] raised {type(exc).__name__}: {str(exc)[:90]}"
                return res
            if changed:
                res.t1 = f"[{tag}] {changed}"
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
            res.calls[tag] = max(r, res.calls.get(tag, 0.0))
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
    return (f"T1 {res.t1 or 'ok'}, T2 x{res.ratio('T2'):.3g} {res.err['T2'][1]}, "
            f"T3 x{res.ratio('T3'):.3g} {res.err['T3'][1]}")


# =============================================================== cases

SHAPES = (  # B, T, Hq, Hkv, D
    (2, 5, 4, 2, 3),    # G = 2, H = 2
    (1, 1, 2, 1, 4),    # one token
    (2, 6, 8, 2, 4),    # G = 4
    (1, 7, 3, 3, 5),    # Hkv = Hq with an odd head count (gqa only)
    (2, 4, 6, 3, 2),    # H = 3
    (1, 9, 4, 1, 1),    # D = 1, Hkv = 1
    (1, 3, 1, 1, 2),    # one head (gqa only)
    (2, 5, 8, 1, 2),    # multi-query with two sequences
    (1, 1, 8, 2, 2),    # one token, G = 4
    (2, 6, 4, 2, 1),    # D = 1 with two kv heads
    (2, 4, 4, 2, 3),    # T == Hq
    (1, 5, 6, 2, 3),    # G = 3 (gqa only)
    (1, 6, 4, 2, 8),    # D = 8
)


def battery():
    out, i = [], 0
    for shape, causal, dtype in itertools.product(SHAPES, (True, False), ("f32", "f64")):
        out.append(case(shape, dtype, causal, i))
        i += 1
    for shape, dtype, causal, extra in (
            ((1, 80, 4, 2, 8), "f32", True, dict(logit_max=100.0)),
            ((1, 200, 4, 2, 4), "f32", True, {}),
            ((1, 150, 8, 2, 2), "f64", False, {}),
            ((1, 130, 4, 1, 3), "f32", True, dict(logit_max=100.0)),
            ((1, 100, 4, 2, 3), "f64", True, dict(lam="saturated")),
            ((1, 64, 4, 2, 2), "f64", False, {}),
            ((1, 128, 4, 2, 3), "f32", True, {}),
            ((1, 40, 4, 2, 3), "f64", True, {}),
            ((1, 32, 4, 2, 3), "f32", False, {}),
            ((2, 5, 4, 2, 3), "f32", True, dict(logit_max=150.0)),
            ((2, 6, 8, 2, 4), "f32", False, dict(logit_max=120.0)),
            ((2, 4, 6, 3, 2), "f64", True, dict(logit_max=400.0)),
            ((2, 5, 4, 2, 3), "f32", True, dict(lam="saturated")),
            ((2, 6, 8, 2, 4), "f32", False, dict(lam="saturated", logit_max=100.0)),
            ((2, 4, 6, 3, 2), "f64", True, dict(lam="saturated")),
            ((1, 9, 4, 1, 1), "f32", True, dict(lam=-1000.0)),
            ((1, 9, 4, 1, 1), "f32", False, dict(lam=1000.0)),
            ((2, 5, 4, 2, 3), "f64", True, dict(lam=0.0)),
            ((2, 5, 4, 2, 3), "f64", True, dict(lam=-30.0)),
            ((2, 5, 4, 2, 3), "f64", True, dict(frozen=("q",))),
            ((2, 6, 8, 2, 4), "f32", False, dict(frozen=("k", "lambda_logits"))),
            ((1, 5, 8, 1, 2), "f64", True, dict(frozen=("v",))),
            ((2, 5, 4, 2, 3), "f64", True, dict(nonleaf=NAMES)),
            ((2, 5, 4, 2, 3), "f64", False, dict(layouts={"q": "exp0", "k": "exp2", "v": "exp1",
                                                          "lambda_logits": "exp1"})),
    ):
        out.append(case(shape, dtype, causal, i, **extra))
        i += 1
    return out


BASE = (2, 5, 4, 2, 3)    # B, T, Hq, Hkv, D: G = 2, H = 2
G4 = (2, 6, 8, 2, 4)      # G = 4, Hkv = 2, H = 4
T1_ = (2, 1, 4, 2, 3)     # a single token
MHA3 = (1, 7, 3, 3, 5)    # Hkv = Hq = 3 (G = 1), gqa only
G3 = (1, 5, 6, 2, 3)      # G = 3, gqa only
MQA = (1, 5, 8, 1, 2)     # Hkv = 1, B = 1
MQA_B2 = (2, 5, 8, 1, 2)  # Hkv = 1, B = 2
D1 = (1, 9, 4, 1, 1)      # D = 1, Hkv = 1, G = 4
B1 = (1, 6, 2, 1, 3)      # B = 1, H = 1
SQ = (2, 4, 4, 2, 3)      # T == Hq
PRIME_SMALL = ((1, 3, 2, 1, 2), True)   # an earlier causal call at T = 3, D = 2
ALL_QKV = ("q", "k", "v")

# One witness per wrong file: an input inside its "where". "expect" lists texts of which one
# must appear in the witness's failure (the exception, the contract break, or the name of the
# wrong gradient); "clean" names calls of the witness that must stay exact, for bugs that only
# live on one path (inference only, training only).
WITNESS = {
    # gqa_attention
    "wrong/key_tile_count_floor_plus_one": ((1, 64, 4, 2, 2), "f64", False, dict(expect=("amax",))),
    "wrong/diag_tile_mask_not_cut_for_last_tile": ((1, 40, 4, 2, 3), "f64", True, dict(expect=("must match the size",))),
    "wrong/tail_tile_offset_from_own_width": ((1, 100, 4, 2, 3), "f64", True, dict(expect=("values",))),
    "wrong/scale_fixed_at_first_call": (BASE, "f64", True, dict(prime=[PRIME_SMALL], expect=("values",))),
    "wrong/bias_memo_keyed_without_dtype": (BASE, "f32", True, dict(prime=[(BASE, True, "f64")],
                                                                     expect=("scalar type", "float64"))),
    "wrong/grad_mode_set_not_restored": (BASE, "f64", True, dict(expect=("grad mode",))),
    "wrong/kv_index_from_pair_leader": (G3, "f64", True, dict(expect=("values",))),
    "wrong/head_pair_loop_skips_last_odd_head": ((1, 3, 1, 1, 2), "f64", True, dict(expect=("detached",))),
    "wrong/softmax_scale_param_before_causal": (BASE, "f64", True, dict(mode="pos", expect=("values",))),
    "wrong/exp2_log2e_truncated_constant": (BASE, "f64", True, dict(expect=("values",))),
    "wrong/single_token_path_tiles_kv_heads": (T1_, "f64", True, dict(expect=("values",), clean=("grad",))),
    "wrong/long_sequence_double_not_cast_back": ((1, 128, 4, 2, 3), "f32", True, dict(expect=("torch.float64/",))),
    "wrong/scale_read_after_head_dim_padding": (BASE, "f64", True, dict(expect=("values",))),
    "wrong/value_product_under_no_grad_when_v_frozen": (BASE, "f64", True, dict(frozen=("v",), expect=("detached",))),
    "wrong/output_buffer_mirrors_query_strides": (BASE, "f64", True, dict(layouts={"q": "exp0"},
                                                                          expect=("more than one element",))),
    "wrong/attention_dropout_active_in_grad_mode": (BASE, "f64", True, dict(expect=("values",),
                                                                            clean=("inference", "no_grad", "reused1"))),
    "wrong/double_fallback_path_drops_causal_mask": (BASE, "f64", True, dict(expect=("values",))),
    "wrong/output_layout_guessed_from_shape": (SQ, "f64", True, dict(expect=("values",))),
    "wrong/suffix_pass_counts_diagonal_twice": (BASE, "f64", False, dict(expect=("values",))),
    "wrong/grown_mask_rows_use_local_diagonal": (BASE, "f64", True, dict(prime=[PRIME_SMALL], expect=("values",))),
    # diff_v2_attention
    "wrong/gate_folded_into_odd_logits_before_softmax": (BASE, "f64", True, dict(expect=("values",))),
    "wrong/log_of_sigmoid_gate_nan_gradient": (D1, "f32", True, dict(lam=-1000.0, expect=("dlambda_logits",))),
    "wrong/graph_needed_only_for_leaf_inputs": (BASE, "f64", True, dict(nonleaf=NAMES, expect=("detached",))),
    "wrong/inference_skips_odd_heads_below_logit_minus_20": (BASE, "f64", True, dict(
        lam=-22.0, expect=("values",), clean=("plain", "grad", "reused0"))),
    "wrong/gated_term_under_no_grad_when_gate_frozen": (BASE, "f64", True, dict(
        frozen=("lambda_logits",), expect=("dq", "dk", "dv"))),
    "wrong/v1_lambda_init_added_to_gate": (BASE, "f64", True, dict(expect=("values",))),
    "wrong/centred_values_offset_restored_ungated": (BASE, "f64", True, dict(expect=("values",))),
    "wrong/einsum_scores_drop_batch_letter": (BASE, "f64", True, dict(expect=("values",))),
    "wrong/rotary_embedding_applied": (BASE, "f64", True, dict(expect=("values",))),
    "wrong/query_chunks_from_torch_chunk": ((1, 150, 4, 2, 2), "f64", True, dict(expect=("values",))),
    "wrong/mqa_keys_broadcast_without_pair_axis": (MQA_B2, "f64", True, dict(expect=("must match the size",))),
}

# Inputs outside a label's "where": every function the case applies to must pass every
# tier there (labels whose "where" covers every input the harness can build have none).
OUTSIDE = {
    "wrong/key_tile_count_floor_plus_one": [((1, 64, 4, 2, 2), "f64", True, {}),
                                            ((1, 40, 4, 2, 3), "f32", False, {}),
                                            ((1, 100, 4, 2, 2), "f64", False, {})],
    "wrong/diag_tile_mask_not_cut_for_last_tile": [((1, 40, 4, 2, 3), "f64", False, {}),
                                                   ((1, 32, 4, 2, 3), "f32", True, {}),
                                                   ((1, 10, 4, 2, 3), "f64", True, {})],
    "wrong/tail_tile_offset_from_own_width": [((1, 100, 4, 2, 3), "f64", False, {}),
                                              ((1, 128, 4, 2, 2), "f32", True, {}),
                                              ((1, 50, 4, 2, 3), "f64", True, {})],
    "wrong/scale_fixed_at_first_call": [(BASE, "f64", True, {}),
                                        (BASE, "f64", False, dict(prime=[((1, 4, 2, 1, 3), True)])),
                                        (T1_, "f64", True, dict(prime=[PRIME_SMALL]))],
    "wrong/bias_memo_keyed_without_dtype": [(BASE, "f32", True, {}),
                                            (BASE, "f32", True, dict(prime=[(BASE, False, "f64")])),
                                            (BASE, "f64", True, dict(prime=[(BASE, True, "f32")])),
                                            (BASE, "f32", False, dict(prime=[(BASE, True, "f64")]))],
    "wrong/kv_index_from_pair_leader": [(BASE, "f64", True, {}), (MQA, "f32", False, {}),
                                        (G4, "f64", True, {}), ((1, 5, 3, 1, 2), "f64", True, {})],
    "wrong/head_pair_loop_skips_last_odd_head": [(BASE, "f64", True, {}), (G3, "f64", False, {}),
                                                 ((1, 5, 4, 4, 2), "f32", True, {})],
    "wrong/softmax_scale_param_before_causal": [(BASE, "f64", True, dict(mode="kw")),
                                                (BASE, "f64", True, dict(mode="default")),
                                                (BASE, "f64", False, dict(mode="kw"))],
    "wrong/exp2_log2e_truncated_constant": [(BASE, "f32", True, {}),
                                            (BASE, "f32", True, dict(logit_max=150.0)),
                                            (T1_, "f64", False, {})],
    "wrong/single_token_path_tiles_kv_heads": [((1, 1, 8, 1, 2), "f64", True, {}),
                                               ((1, 1, 3, 3, 2), "f32", False, {}),
                                               (BASE, "f64", True, {})],
    "wrong/long_sequence_double_not_cast_back": [((1, 128, 4, 2, 3), "f64", True, {}),
                                                 ((1, 100, 4, 2, 3), "f32", False, {})],
    "wrong/scale_read_after_head_dim_padding": [((1, 6, 4, 2, 8), "f64", True, {}),
                                                ((1, 6, 4, 2, 16), "f32", False, {}),
                                                (T1_, "f64", True, {})],
    "wrong/value_product_under_no_grad_when_v_frozen": [(BASE, "f64", True, {}),
                                                        (BASE, "f64", True, dict(frozen=("q", "k"))),
                                                        (G4, "f32", False, dict(frozen=("lambda_logits",)))],
    "wrong/output_buffer_mirrors_query_strides": [(BASE, "f64", True, dict(layouts={"k": "exp2", "v": "exp0"})),
                                                  (BASE, "f64", False, dict(layouts={"q": "packed"})),
                                                  (G4, "f32", True, dict(layouts={"q": "stepped"}))],
    "wrong/double_fallback_path_drops_causal_mask": [(BASE, "f32", True, {}), (BASE, "f64", False, {}),
                                                     (T1_, "f64", True, {})],
    "wrong/output_layout_guessed_from_shape": [(BASE, "f64", True, {}), ((1, 4, 4, 1, 2), "f32", True, {}),
                                               (T1_, "f64", True, {})],
    "wrong/suffix_pass_counts_diagonal_twice": [(BASE, "f64", True, {}), (T1_, "f32", False, {})],
    "wrong/grown_mask_rows_use_local_diagonal": [(BASE, "f64", True, {}),
                                                 (BASE, "f64", True, dict(prime=[((1, 8, 2, 1, 2), True)])),
                                                 (BASE, "f64", False, dict(prime=[PRIME_SMALL]))],
    "wrong/gate_folded_into_odd_logits_before_softmax": [(D1, "f32", False, dict(lam=1000.0))],
    "wrong/log_of_sigmoid_gate_nan_gradient": [(D1, "f32", True, dict(lam=-1000.0, frozen=("lambda_logits",))),
                                               (D1, "f32", True, dict(lam=-80.0)),
                                               (BASE, "f64", True, {})],
    "wrong/graph_needed_only_for_leaf_inputs": [(BASE, "f64", True, {}),
                                                (BASE, "f64", True, dict(nonleaf=ALL_QKV))],
    "wrong/inference_skips_odd_heads_below_logit_minus_20": [(BASE, "f32", True, dict(lam=-22.0)),
                                                             (D1, "f64", True, dict(lam=-1000.0)),
                                                             (BASE, "f64", True, dict(lam=-40.0)),
                                                             (BASE, "f64", True, {})],
    "wrong/gated_term_under_no_grad_when_gate_frozen": [(BASE, "f64", True, {}),
                                                        (BASE, "f64", True, dict(frozen=ALL_QKV, fns=[DIFF]))],
    "wrong/einsum_scores_drop_batch_letter": [(B1, "f64", True, {}), (MQA, "f32", False, {})],
    "wrong/rotary_embedding_applied": [(T1_, "f64", True, {}), (D1, "f32", True, {})],
    "wrong/query_chunks_from_torch_chunk": [((1, 150, 4, 2, 2), "f64", False, {}),
                                            ((1, 100, 4, 2, 2), "f32", True, {}),
                                            ((1, 128, 4, 2, 2), "f64", True, {})],
    "wrong/mqa_keys_broadcast_without_pair_axis": [(MQA, "f64", True, {}), (BASE, "f32", False, {})],
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


# =============================================================== verdicts

def run_all(mod, cases, fns=None):
    """{fn: worst Result over the cases}; each tier remembers the case that failed it."""
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


def check_correct(path, bat, isolated):
    """Battery on one import (in order); witnesses and outside cases each on a fresh import."""
    problems = []
    worst = run_all(load(path), bat)
    for c in isolated:
        for fn, r in run_all(load(path), [c]).items():
            w = worst.setdefault(fn, Result())
            if r.t1 and not w.t1:
                w.t1 = r.t1
            for tier in ("T2", "T3"):
                w.note(tier, r.ratio(tier), r.err[tier][1])
    for fn, w in worst.items():
        for tier in ("T1", "T2", "T3"):
            if fails(w, tier):
                problems.append(f"{fn} fails {tier}: " + (w.t1 if tier == "T1" else
                                                           f"x{w.ratio(tier):.3g} {w.err[tier][1]}"))
    return problems, "passes all tiers"


def check_wrong(label, path, bat, witness, outside):
    tier, fn = label["tier"], label["function"]
    problems = []
    if fn not in witness["fns"]:
        return [f"the witness does not apply to {fn}"], ""
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
    expect = witness.get("expect", ())
    if expect and not any(e in detail for e in expect):
        problems.append(f"witness fails {tier} in another way than expected ({' / '.join(expect)}): {detail}")
    for tag in witness.get("clean", ()):
        if tag not in r.calls or r.calls[tag] > 1.0:
            problems.append(f"call [{tag}] of the witness should be exact: x{r.calls.get(tag, math.inf):.3g}")
    if tier != "T1":  # nothing comes before T1
        for f, w in run_all(load(path), bat).items():
            for t in earlier(tier):
                if fails(w, t):
                    problems.append(f"battery: {f} fails {t} before {tier}: " +
                                    (w.t1 if t == "T1" else f"x{w.ratio(t):.3g} {w.err[t][1]}"))
    if fn == DIFF:
        w = run_all(load(path), bat, fns=[GQA]).get(GQA, Result())
        for c in [witness] + outside:
            if GQA not in c["fns"]:
                continue
            r = run(load(path), GQA, c)
            if r.t1 and not w.t1:
                w.t1 = f"{c['id']} {r.t1}"
            for t in ("T2", "T3"):
                w.note(t, r.ratio(t), f"{c['id']} {r.err[t][1]}")
        if any(fails(w, t) for t in ("T1", "T2", "T3")):
            problems.append(f"gqa_attention not clean although diff_v2_attention is blamed: {describe(w)}")
    return problems, detail


def main():
    verbose = "-v" in sys.argv
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
    if set(WITNESS) - set(labels) or set(OUTSIDE) - set(WITNESS):
        failures.append(("verify.py", "witness/outside tables name files without a label or witness"))
    bat = battery()
    wit = {k: v[0] for k, v in build(WITNESS, 1000).items()}
    out = build(OUTSIDE, 5000)
    isolated = list(wit.values()) + [c for cs in out.values() for c in cs]
    rows = []
    for key in files:
        label = labels.get(key)
        if label is None:
            continue
        path = os.path.join(HERE, key + ".py")
        try:
            load(path)
        except Exception as exc:  # noqa: BLE001
            problems, detail = [f"import failed: {exc}"], ""
        else:
            if label.get("correct") is True:
                if not key.startswith("correct/"):
                    problems, detail = ["labelled correct but not in correct/"], ""
                else:
                    problems, detail = check_correct(path, bat, isolated)
            else:
                missing = [f for f in ("function", "tier", "component", "bug", "where") if not label.get(f)]
                if (missing or label["function"] not in (GQA, DIFF) or label["tier"] not in ("T1", "T2", "T3")
                        or label["component"] not in COMPONENTS or key not in wit
                        or not key.startswith("wrong/")):
                    problems, detail = [f"malformed label or no witness (missing {missing})"], ""
                else:
                    problems, detail = check_wrong(label, path, bat, wit[key], out.get(key, []))
        fn = {GQA: "gqa", DIFF: "diff_v2"}.get(label.get("function"), "-")
        rows.append((key, label.get("tier", "-"), fn, label.get("component", "-"),
                     "NOT CONFIRMED" if problems else "confirmed", "; ".join(problems) or detail))
        if problems:
            failures.append((key, "; ".join(problems)))
    if os.path.exists(REFERENCE):
        problems, detail = check_correct(REFERENCE, bat, isolated)
        rows.append(("(reference)", "-", "-", "-", "NOT CONFIRMED" if problems else "confirmed",
                     "; ".join(problems) or detail))
        if problems:
            failures.append(("(reference)", "; ".join(problems)))
    width = max(len(r[0]) for r in rows)
    print(f"{'file':<{width}}  tier  function  component  verdict        detail")
    for key, tier, fn, comp, verdict, detail in rows:
        print(f"{key:<{width}}  {tier:<4}  {fn:<8}  {comp:<9}  {verdict:<13}  "
              f"{detail if verbose else detail[:110]}")
    n_c = sum(r[0].startswith("correct/") for r in rows)
    n_w = sum(r[0].startswith("wrong/") for r in rows)
    n_ok = sum(1 for r in rows if r[0] != "(reference)" and r[4] == "confirmed")
    print(f"RESULT: {n_ok}/{n_c + n_w} labels confirmed ({n_c} correct, {n_w} wrong; "
          f"{len(bat)} battery cases, {len(wit)} witnesses) in {time.time() - t0:.1f} s")
    for key, why in failures:
        print(f"FAILED {key}: {why}")
    return 1 if failures else 0


if __name__ == "__main__":
    warnings.simplefilter("ignore")  # deprecation and sparse-invariant notes from torch are not verdicts
    torch.manual_seed(0)
    torch.set_num_threads(1)
    sys.exit(main())
