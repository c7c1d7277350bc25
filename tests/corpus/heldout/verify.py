"""Verify the held-out corpus against an independent float64 numpy oracle.

Run from the repository root:  python tests/corpus/heldout/verify.py

* every file in correct/ must agree with the oracle (value error <= tol,
  gradient error <= tol) on a varied battery: random T up to 300, D up to 64,
  strided / offset views, large logits, frozen subsets, every coefficient
  kind, no_grad / inference_mode, keyword arguments, repeated calls with
  in-place updates, freed and reallocated inputs;
* every file in wrong/ must agree on a basic scenario that avoids its bug and
  must disagree with the oracle on a concrete scenario (error > 10 x tol, an
  exception, a missing gradient or a modified input).

tol = 1e-3 (float32) and 1e-9 (float64); errors are max |x - ref| divided by
max |ref| of the compared quantity (for lambda: by max(e^a, e^b, |init|, 1)).
Prints one line per file and a final SUMMARY line; exit status 0 iff all pass.
"""

from __future__ import annotations

import gc
import importlib.util
import itertools
import math
import os
import sys
import traceback
import warnings

import numpy as np
import torch

sys.dont_write_bytecode = True  # keep the corpus folders free of __pycache__
HERE = os.path.dirname(os.path.abspath(__file__))
F32, F64 = torch.float32, torch.float64
TOL = {F32: 1e-3, F64: 1e-9}
FLOOR = 0.1
NAMES = ("q1", "k1", "q2", "k2", "value")
_counter = itertools.count()


class Disagree(Exception):
    """Raised when a submission disagrees with the oracle or breaks the contract."""


def load(rel):
    """Import a corpus file as a fresh module (no state shared between loads)."""
    path = os.path.join(HERE, rel)
    spec = importlib.util.spec_from_file_location(f"_heldout_mod_{next(_counter)}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# =========================================================================
# float64 numpy oracle (forward + hand-derived VJPs)
# =========================================================================

def _sw(x):
    return np.swapaxes(x, -1, -2)


def np_attention_map(q, k, causal):
    t, d = q.shape[-2], q.shape[-1]
    s = q @ _sw(k) / math.sqrt(d)
    if causal:
        s = np.where(np.triu(np.ones((t, t), dtype=bool), 1), -np.inf, s)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def oracle_attention(q1, k1, q2, k2, v, c, causal, g=None):
    """Return (out, grads, grad_scales); grads is None when g is None."""
    a1 = np_attention_map(q1, k1, causal)
    a2 = np_attention_map(q2, k2, causal)
    p = a1 - c * a2
    out = p @ v
    if g is None:
        return out, None, None
    d = q1.shape[-1]
    dp = g @ _sw(v)

    def sm_bwd(a, da):
        return a * (da - (da * a).sum(axis=-1, keepdims=True))

    ds1 = sm_bwd(a1, dp) / math.sqrt(d)
    ds2 = sm_bwd(a2, -c * dp) / math.sqrt(d)
    grads = {
        "q1": ds1 @ k1, "k1": _sw(ds1) @ q1,
        "q2": ds2 @ k2, "k2": _sw(ds2) @ q2,
        "value": _sw(p) @ g,
        "coefficient": np.array(-(dp * a2).sum()),
    }
    # Each error is divided by max(max |ref|, FLOOR x natural size of the quantity),
    # where the natural size bounds |ref| given the operand sizes.  The floor only
    # matters when the reference is (nearly) zero or when saturated softmax rows
    # make a gradient tiny compared with the float32 rounding of its operands.
    gmax, dpmax, vmax, ac = np.abs(g).max(), np.abs(dp).max(), np.abs(v).max(), abs(c)
    natural = {
        "out": (1 + ac) * vmax,
        "q1": dpmax * np.abs(k1).max() / math.sqrt(d),
        "k1": dpmax * np.abs(q1).max() / math.sqrt(d),
        "q2": ac * dpmax * np.abs(k2).max() / math.sqrt(d),
        "k2": ac * dpmax * np.abs(q2).max() / math.sqrt(d),
        "value": (1 + ac) * gmax,
        "coefficient": np.abs(dp * a2).sum(),
    }
    grads["out"] = out
    scales = {n: max(np.abs(x).max(), FLOOR * natural[n]) for n, x in grads.items()}
    return out, grads, scales


def oracle_lambda(q1, k1, q2, k2, init):
    ea, eb = math.exp(float(q1 @ k1)), math.exp(float(q2 @ k2))
    val = ea - eb + init
    grads = {"q1": ea * k1, "k1": ea * q1, "q2": -eb * k2, "k2": -eb * q2}
    return val, grads, max(ea, eb, abs(init), 1.0)


def oracle_self_check():
    """Cross-check the hand-derived VJPs against torch.autograd on our own float64 formula."""
    rng = np.random.default_rng(123)
    worst = 0.0
    for causal, (t, d) in itertools.product((True, False), ((1, 3), (5, 2), (9, 7))):
        arrs = [rng.standard_normal((2, 3, t, d)) * 2 for _ in range(4)]
        arrs.append(rng.standard_normal((2, 3, t, 2 * d)))
        c = 0.37
        g = rng.standard_normal((2, 3, t, 2 * d))
        out, grads, _ = oracle_attention(*arrs, c, causal, g)
        ts = [torch.tensor(a, requires_grad=True) for a in arrs]
        ct = torch.tensor(c, dtype=F64, requires_grad=True)

        def amap(q, k):
            s = q @ k.transpose(-1, -2) / math.sqrt(d)
            if causal:
                s = s + torch.full((t, t), -math.inf, dtype=F64).triu(1)
            return torch.softmax(s, -1)

        o = (amap(ts[0], ts[1]) - ct * amap(ts[2], ts[3])) @ ts[4]
        o.backward(torch.tensor(g))
        worst = max(worst, np.abs(o.detach().numpy() - out).max())
        for n, tt in zip(NAMES, ts):
            worst = max(worst, np.abs(tt.grad.numpy() - grads[n]).max())
        worst = max(worst, abs(ct.grad.item() - float(grads["coefficient"])))
    # lambda
    v = [rng.standard_normal(6) for _ in range(4)]
    val, lg, _ = oracle_lambda(*v, 0.2)
    tv = [torch.tensor(x, requires_grad=True) for x in v]
    lam = torch.exp(tv[0] @ tv[1]) - torch.exp(tv[2] @ tv[3]) + 0.2
    lam.backward()
    worst = max(worst, abs(lam.item() - val))
    for n, tt in zip(("q1", "k1", "q2", "k2"), tv):
        worst = max(worst, np.abs(tt.grad.numpy() - lg[n]).max())
    if worst > 1e-12:
        raise SystemExit(f"oracle self-check FAILED: {worst:.2e}")
    return worst


# =========================================================================
# input construction
# =========================================================================

def as_layout(arr, dtype, layout, rng):
    """Tensor with the values of arr ([..., E]) but the requested memory layout."""
    a = torch.tensor(arr, dtype=dtype)
    if layout == "contig":
        t = a.clone()
    elif layout == "transposed":  # storage is [B, H, E, T]
        t = a.transpose(-1, -2).contiguous().transpose(-1, -2)
    elif layout == "permuted":  # storage is [T, B, E, H]
        t = a.permute(2, 0, 3, 1).contiguous().permute(1, 3, 0, 2)
    elif layout == "offset":  # slice of a bigger buffer: storage offset, gaps
        b, h, n, e = a.shape
        base = torch.tensor(rng.standard_normal((b, h + 1, n + 2, e + 3)) * 1e3, dtype=dtype)
        base[:, 1:, 2:, 3:] = a
        t = base[:, 1:, 2:, 3:]
    elif layout == "stepped":  # every other row and column of a buffer
        b, h, n, e = a.shape
        base = torch.tensor(rng.standard_normal((b, h, 2 * n, 2 * e + 1)) * 1e3, dtype=dtype)
        base[:, :, ::2, 1::2] = a
        t = base[:, :, ::2, 1::2]
    else:
        raise ValueError(layout)
    assert torch.equal(t, a)
    return t.detach()  # keeps strides and storage offset


def make_coefficient(kind, value, dtype):
    if kind == "float":
        return float(value)
    if kind == "int":
        return int(round(value))
    if kind == "tint":
        return torch.tensor(int(round(value)))
    tdt = {"t32": F32, "t64": F64, "tsame": dtype}[kind.rstrip("g")]
    c = torch.tensor(float(value), dtype=tdt)
    if kind.endswith("g"):
        c.requires_grad_(True)
    return c


def coef_value(c):
    return float(c.detach()) if isinstance(c, torch.Tensor) else float(c)


def gen_arrays(spec, rng):
    b, h, t, d = spec["B"], spec["H"], spec["T"], spec["D"]
    if spec.get("arrays") is not None:
        return spec["arrays"](rng, b, h, t, d)
    arrs = {n: rng.standard_normal((b, h, t, d)) for n in NAMES[:4]}
    arrs["value"] = rng.standard_normal((b, h, t, 2 * d))
    target = spec.get("logit_max")
    if target is not None:  # scale each branch so that max |scaled logit| == target
        for qn, kn in (("q1", "k1"), ("q2", "k2")):
            s = arrs[qn] @ _sw(arrs[kn]) / math.sqrt(d)
            f = math.sqrt(target / np.abs(s).max())
            arrs[qn] *= f
            arrs[kn] *= f
    return arrs


ATT_DEFAULT = dict(B=2, H=2, T=7, D=4, dtype=F32, causal=True, pass_causal=True,
                   coef="t32g", coef_val=0.37, layout="contig", frozen=(),
                   mode="grad", byname=False, logit_max=None, arrays=None, seed=0)


class Inputs:
    """One set of attention inputs plus the bookkeeping to check a call."""

    def __init__(self, spec):
        self.spec = spec = {**ATT_DEFAULT, **spec}
        self.rng = np.random.default_rng(spec["seed"])
        arrs = gen_arrays(spec, self.rng)
        layouts = spec["layout"]
        if isinstance(layouts, str):
            layouts = {n: layouts for n in NAMES}
        self.t = {}
        for n in NAMES:
            x = as_layout(arrs[n], spec["dtype"], layouts[n], self.rng)
            if n not in spec["frozen"]:
                x.requires_grad_(True)
            self.t[n] = x
        self.coef = make_coefficient(spec["coef"], spec["coef_val"], spec["dtype"])

    def call(self, mod):
        s = self.spec
        t = self.t
        self.before = {n: x.detach().clone() for n, x in t.items()}
        args = [t[n] for n in NAMES] + [self.coef]
        kwargs = {}
        if s["byname"]:
            kwargs = dict(zip(NAMES + ("coefficient",), args))
            args = []
            if s["pass_causal"]:
                kwargs["causal"] = s["causal"]
        elif s["pass_causal"]:
            args.append(s["causal"])
        if s["mode"] == "grad":
            return mod.differential_attention(*args, **kwargs)
        ctx = torch.no_grad() if s["mode"] == "no_grad" else torch.inference_mode()
        with ctx:
            return mod.differential_attention(*args, **kwargs)

    def check(self, mod):
        """Call mod and compare; return worst error / tol; raise Disagree otherwise."""
        s = self.spec
        dtype, tol = s["dtype"], TOL[s["dtype"]]
        causal = s["causal"] if s["pass_causal"] else True
        for x in self.t.values():
            x.grad = None
        if isinstance(self.coef, torch.Tensor):
            self.coef.grad = None
        out = self.call(mod)
        for n, x in self.t.items():
            if not torch.equal(x.detach(), self.before[n]):
                raise Disagree(f"input '{n}' was modified")
        if not isinstance(out, torch.Tensor):
            raise Disagree(f"returned {type(out).__name__}")
        b, h, t, d = self.t["q1"].shape
        if tuple(out.shape) != (b, h, t, 2 * d) or out.dtype != dtype:
            raise Disagree(f"returned shape {tuple(out.shape)} dtype {out.dtype}")
        np_in = {n: x.detach().double().numpy() for n, x in self.t.items()}
        c = coef_value(self.coef)
        trainable = [n for n in NAMES if self.t[n].requires_grad]
        coef_g = isinstance(self.coef, torch.Tensor) and self.coef.requires_grad
        want_grad = s["mode"] == "grad" and (trainable or coef_g)
        g = self.rng.standard_normal(out.shape)
        ref, grads, scales = oracle_attention(*(np_in[n] for n in NAMES), c, causal, g)
        worst = rel_err(out.detach().double().numpy(), ref, scales["out"], "output") / tol
        if not want_grad:
            return worst
        if not out.requires_grad:
            raise Disagree("output not attached to the autograd graph")
        out.backward(torch.tensor(g, dtype=dtype))
        leaves = {n: self.t[n] for n in trainable}
        if coef_g:
            leaves["coefficient"] = self.coef
        for n, x in leaves.items():
            if x.grad is None:
                raise Disagree(f"no gradient reached '{n}'")
            e = rel_err(x.grad.double().numpy(), grads[n], scales[n], f"grad {n}")
            # the coefficient's gradient is stored in the coefficient's own dtype
            gtol = TOL[F32] if x.grad.dtype == F32 else tol
            worst = max(worst, e / gtol)
        return worst


def rel_err(x, ref, scale, what):
    x = np.asarray(x, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if x.shape != ref.shape:
        raise Disagree(f"{what}: shape {x.shape} != {ref.shape}")
    if not np.all(np.isfinite(x)):
        raise Disagree(f"{what}: non-finite values (oracle is finite)")
    return float(np.abs(x - ref).max() / max(float(scale), 1e-300))


# ---------------------------------------------------------------- lambda
LAM_DEFAULT = dict(D=5, dtype=F32, a=0.3, b=-0.4, init=0.2, layout="contig",
                   frozen=(), mode="grad", byname=False, seed=0)


def lam_vectors(spec, rng):
    d = spec["D"]
    out = {}
    for (qn, kn), target in ((("q1", "k1"), spec["a"]), (("q2", "k2"), spec["b"])):
        q = rng.standard_normal(d)
        k = rng.standard_normal(d)
        k *= target / (q @ k) if abs(q @ k) > 1e-3 else 0.0
        if abs(q @ k - target) > 1e-6:  # degenerate draw: use a constant direction
            q = np.ones(d) / math.sqrt(d)
            k = np.ones(d) * target / math.sqrt(d)
        out[qn], out[kn] = q, k
    return out


def check_lambda(mod, spec):
    spec = {**LAM_DEFAULT, **spec}
    rng = np.random.default_rng(spec["seed"])
    vecs = lam_vectors(spec, rng)
    dtype, tol = spec["dtype"], TOL[spec["dtype"]]
    ts = {}
    for n, v in vecs.items():
        if spec["layout"] == "strided":  # stride 2 with storage offset 1
            base = torch.tensor(rng.standard_normal(2 * len(v) + 1), dtype=dtype)
            base[1::2] = torch.tensor(v, dtype=dtype)
            x = base[1::2].detach()
        else:
            x = torch.tensor(v, dtype=dtype)
        if n not in spec["frozen"]:
            x.requires_grad_(True)
        ts[n] = x
    before = {n: x.detach().clone() for n, x in ts.items()}
    args = [ts[n] for n in ("q1", "k1", "q2", "k2")]
    kwargs = {}
    if spec["init"] is not None:
        kwargs["lambda_init"] = spec["init"]
    if spec["byname"]:
        kwargs.update(dict(zip(("q1", "k1", "q2", "k2"), args)))
        args = []
    if spec["mode"] == "grad":
        lam = mod.differential_lambda(*args, **kwargs)
    else:
        with torch.no_grad() if spec["mode"] == "no_grad" else torch.inference_mode():
            lam = mod.differential_lambda(*args, **kwargs)
    for n, x in ts.items():
        if not torch.equal(x.detach(), before[n]):
            raise Disagree(f"lambda input '{n}' was modified")
    if not isinstance(lam, torch.Tensor) or lam.shape != () or lam.dtype != dtype:
        raise Disagree(f"lambda returned {type(lam).__name__} "
                       f"{getattr(lam, 'shape', None)} {getattr(lam, 'dtype', None)}")
    np_in = {n: x.detach().double().numpy() for n, x in ts.items()}
    init = 0.2 if spec["init"] is None else spec["init"]
    val, grads, scale = oracle_lambda(np_in["q1"], np_in["k1"], np_in["q2"], np_in["k2"], init)
    worst = rel_err(lam.detach().double().numpy(), np.array(val), scale, "lambda") / tol
    trainable = [n for n in ts if ts[n].requires_grad]
    if spec["mode"] != "grad" or not trainable:
        return worst
    if not lam.requires_grad:
        raise Disagree("lambda not attached to the graph")
    lam.backward()
    for n in trainable:
        if ts[n].grad is None:
            raise Disagree(f"no gradient reached lambda '{n}'")
        e = rel_err(ts[n].grad.double().numpy(), grads[n], np.abs(grads[n]).max(), f"grad {n}")
        worst = max(worst, e / tol)
    return worst


# =========================================================================
# multi-call scenarios (state)
# =========================================================================

def seq_causal_toggle(mod, dtype=F32, t=6, first=False):
    """Same T, causal flipped between calls."""
    w = Inputs(dict(T=t, D=3, dtype=dtype, causal=first, seed=11)).check(mod)
    return max(w, Inputs(dict(T=t, D=3, dtype=dtype, causal=not first, seed=12)).check(mod))


def seq_inplace_update(mod, frozen=("q2", "k2"), dtype=F32, mode="grad", layout="contig"):
    """Call, update every input in place, call again with the same tensor objects."""
    inp = Inputs(dict(T=8, D=4, dtype=dtype, frozen=frozen, mode=mode, layout=layout, seed=21))
    w = inp.check(mod)
    with torch.no_grad():
        for x in inp.t.values():
            x.add_(torch.tensor(inp.rng.standard_normal(x.shape), dtype=dtype))
    return max(w, inp.check(mod))


def seq_free_realloc(mod, dtype=F32, rounds=4):
    """Drop the inputs and allocate new ones of the same shape (addresses may be reused)."""
    worst = 0.0
    for r in range(rounds):
        inp = Inputs(dict(T=5, D=4, dtype=dtype, frozen=("q2", "k2"), seed=31 + r))
        worst = max(worst, inp.check(mod))
        del inp
        gc.collect()
    return worst


def seq_modes(mod):
    """no_grad, then inference_mode, then grad on the same inputs."""
    worst = 0.0
    inp = Inputs(dict(T=9, D=5, dtype=F64, coef="t64g", seed=41))
    for m in ("no_grad", "inference", "grad", "no_grad", "grad"):
        inp.spec["mode"] = m
        worst = max(worst, inp.check(mod))
    return worst


# =========================================================================
# battery for correct files
# =========================================================================

def random_attention_specs(n, seed=2024):
    rng = np.random.default_rng(seed)
    specs = []
    layouts = ("contig", "transposed", "permuted", "offset", "stepped")
    coefs = ("float", "int", "tint", "t32", "t64", "t32g", "t64g", "tsameg")
    for i in range(n):
        big = i % 6 == 0
        t = int(rng.integers(200, 301)) if big else int(rng.choice([1, 2, 3, rng.integers(4, 80)]))
        d = int(rng.integers(33, 65)) if big else int(rng.choice([1, 2, rng.integers(3, 65)]))
        dtype = F64 if rng.random() < 0.4 else F32
        coef = str(rng.choice(coefs))
        cval = float(rng.choice([0.0, 1.0, -0.7, 0.83, 2.5])) if coef not in ("int", "tint") \
            else float(rng.integers(-2, 3))
        lay = str(rng.choice(layouts)) if rng.random() < 0.5 else \
            {n_: str(rng.choice(layouts)) for n_ in NAMES}
        frozen = tuple(n_ for n_ in NAMES if rng.random() < 0.3)
        mode = str(rng.choice(["grad", "grad", "grad", "no_grad", "inference"]))
        logit_max = None if rng.random() < 0.5 else float(rng.uniform(100, 1000))
        specs.append(dict(B=int(rng.integers(1, 3)), H=int(rng.integers(1, 4)), T=t, D=d,
                          dtype=dtype, causal=bool(rng.random() < 0.6),
                          pass_causal=bool(rng.random() < 0.8), coef=coef, coef_val=cval,
                          layout=lay, frozen=frozen, mode=mode, byname=bool(rng.random() < 0.3),
                          logit_max=logit_max, seed=1000 + i))
    # a few fixed corner cases
    specs += [
        dict(T=1, D=1, B=1, H=1, coef="t32g"),
        dict(T=1, D=1, B=1, H=1, dtype=F64, causal=False, coef="t64g"),
        dict(T=300, D=64, B=1, H=2, logit_max=1000.0, layout="transposed", coef="t64g"),
        dict(T=257, D=8, B=1, H=1, dtype=F32, logit_max=40.0),
        dict(T=12, D=4, logit_max=900.0, causal=False, coef="tsameg", layout="offset"),
        dict(T=10, D=4, dtype=F64, logit_max=1000.0, coef="t32g"),
        dict(T=6, D=3, coef="t32g", coef_val=0.0),
        dict(T=6, D=3, frozen=("q1",)),
        dict(T=6, D=3, frozen=("q1", "k1", "q2", "k2", "value"), coef="t64g"),
        dict(T=5, D=4, dtype=F64, mode="no_grad", causal=False),
        dict(T=5, D=4, mode="inference", causal=False, byname=True),
        dict(T=8, D=2, arrays=arrays_future_dominates),
        dict(T=6, D=4, arrays=arrays_branch2_high, causal=False),
        dict(T=6, D=4, arrays=arrays_all_negative, causal=False),
    ]
    return specs


def random_lambda_specs(n, seed=77):
    rng = np.random.default_rng(seed)
    specs = []
    for i in range(n):
        dtype = F64 if i % 2 else F32
        lim = 500.0 if dtype == F64 else 60.0
        specs.append(dict(D=int(rng.choice([1, 2, rng.integers(3, 65)])), dtype=dtype,
                          a=float(rng.uniform(-lim, lim)), b=float(rng.uniform(-lim, lim)),
                          init=[None, 0.2, 0.8, -0.35][i % 4],
                          layout="strided" if rng.random() < 0.5 else "contig",
                          frozen=tuple(x for x in ("q1", "k1", "q2", "k2") if rng.random() < 0.25),
                          mode=str(rng.choice(["grad", "grad", "no_grad", "inference"])),
                          byname=bool(rng.random() < 0.3), seed=500 + i))
    specs += [dict(D=1, a=60.0, b=-60.0), dict(D=3, dtype=F64, a=500.0, b=-500.0),
              dict(D=2, a=-60.0, b=60.0, init=None), dict(D=7, dtype=F64, a=499.0, b=500.0)]
    return specs


def run_correct(rel):
    mod = load(rel)
    worst, n = 0.0, 0
    for spec in random_lambda_specs(16):
        worst = max(worst, check_lambda(mod, spec))
        n += 1
    for spec in random_attention_specs(36):
        worst = max(worst, Inputs(spec).check(mod))
        n += 1
    for seq in (lambda m: seq_causal_toggle(m, first=False),
                lambda m: seq_causal_toggle(m, dtype=F64, first=True),
                lambda m: seq_inplace_update(m),
                lambda m: seq_inplace_update(m, frozen=(), dtype=F64, layout="offset"),
                lambda m: seq_inplace_update(m, frozen=NAMES, mode="no_grad"),
                lambda m: seq_inplace_update(m, mode="inference"),
                seq_free_realloc, seq_modes):
        worst = max(worst, seq(mod))
        n += 1
    if worst > 1.0:
        raise Disagree(f"error {worst:.2f} x tol")
    return f"{n} checks agree, worst error {worst:.3f} x tol"


# =========================================================================
# hand-built adversarial inputs
# =========================================================================

def arrays_future_dominates(rng, b, h, t, d):
    """Branch 1: scaled logit S[i, j] = 200 j (+ noise): future keys dominate every row."""
    arrs = {n: rng.standard_normal((b, h, t, d)) for n in NAMES[:4]}
    arrs["value"] = rng.standard_normal((b, h, t, 2 * d))
    arrs["q1"] = np.ones((b, h, t, d)) + 1e-3 * rng.standard_normal((b, h, t, d))
    cj = 200.0 * np.arange(t) / math.sqrt(d)
    arrs["k1"] = np.broadcast_to(cj[:, None], (b, h, t, d)).copy()
    return arrs


def arrays_branch2_high(rng, b, h, t, d):
    """Branch 1 logits O(1); branch 2 logits about +300."""
    arrs = {n: rng.standard_normal((b, h, t, d)) for n in NAMES[:4]}
    arrs["value"] = rng.standard_normal((b, h, t, 2 * d))
    c = math.sqrt(300.0 / math.sqrt(d))
    arrs["q2"] = c * (1 + 0.01 * rng.standard_normal((b, h, t, d)))
    arrs["k2"] = c * (1 + 0.01 * rng.standard_normal((b, h, t, d)))
    return arrs


def arrays_all_negative(rng, b, h, t, d):
    """Branch 1 logits about -300 everywhere."""
    arrs = arrays_branch2_high(rng, b, h, t, d)
    arrs["q1"], arrs["q2"] = -arrs["q2"], rng.standard_normal((b, h, t, d))
    arrs["k1"], arrs["k2"] = arrs["k2"], rng.standard_normal((b, h, t, d))
    return arrs


# =========================================================================
# wrong files: (basic scenario that avoids the bug, bug scenario)
# =========================================================================

def att(**kw):
    return lambda m: Inputs(kw).check(m)


def lamb(**kw):
    return lambda m: check_lambda(m, kw)


BASIC_ATT = att()
WRONG = {
    "w01_lambda_float32_compute.py": (
        lamb(), "float64 lambda, q1.k1 = 100",
        lamb(D=4, dtype=F64, a=100.0, b=-3.0)),
    "w02_lambda_default_init.py": (
        lamb(init=0.5), "lambda_init left at its default",
        lamb(D=6, dtype=F64, a=0.1, b=0.2, init=None)),
    "w03_lambda_expm1_factoring.py": (
        lamb(), "float32 lambda with exponents +60 / -60",
        lamb(D=3, dtype=F32, a=60.0, b=-60.0)),
    "w04_max_before_mask.py": (
        BASIC_ATT, "float32 causal, future keys 200+ above the visible ones",
        att(T=5, D=2, arrays=arrays_future_dominates)),
    "w05_shared_branch1_max.py": (
        BASIC_ATT, "float32, branch-2 logits ~ +300, branch-1 logits O(1)",
        att(T=6, D=4, arrays=arrays_branch2_high, causal=False)),
    "w06_bf16_long_sequences.py": (
        att(T=200, D=8), "float32, T=300, logits up to 40",
        att(B=1, H=2, T=300, D=8, logit_max=40.0)),
    "w07_scale_uses_T.py": (
        att(T=6, D=6), "T=9, D=4",
        att(T=9, D=4)),
    "w08_mask_cache_ignores_causal.py": (
        att(T=6, D=3, seed=3), "causal=False then causal=True with the same T",
        lambda m: seq_causal_toggle(m, first=False)),
    "w09_stale_branch2_cache.py": (
        att(T=8, D=4), "frozen q2/k2 updated in place between two calls",
        lambda m: seq_inplace_update(m, frozen=("q2", "k2"))),
    "w10_inplace_scale_no_grad.py": (
        BASIC_ATT, "call under torch.no_grad()",
        att(T=5, D=4, mode="no_grad")),
    "w11_inference_fastpath_causal.py": (
        att(causal=False), "causal=False under torch.inference_mode()",
        att(T=6, D=4, mode="inference", causal=False)),
    "w12_custom_fn_dk2_untransposed.py": (
        att(frozen=("k2",)), "all inputs require grad (k2 gradient)",
        att(T=7, D=4)),
    "w13_custom_fn_coef_grad_sign.py": (
        att(coef="float"), "tensor coefficient with requires_grad",
        att(T=7, D=4, coef="t32g", coef_val=0.5)),
    "w14_coef_dtype_detached.py": (
        BASIC_ATT, "float32 inputs, float64 coefficient requiring grad",
        att(T=7, D=4, coef="t64g")),
    "w15_zero_coefficient_shortcut.py": (
        BASIC_ATT, "coefficient = tensor(0.0, requires_grad=True)",
        att(T=7, D=4, coef="t32g", coef_val=0.0, frozen=("q2", "k2"))),
    "w16_view_flatten_heads.py": (
        BASIC_ATT, "inputs are permuted views (storage [T, B, D, H])",
        att(T=7, D=4, layout="permuted")),
    "w17_float32_logits_for_float64.py": (
        BASIC_ATT, "float64 inputs",
        att(T=16, D=8, dtype=F64, coef="t64g")),
    "w18_value_param_named_v.py": (
        BASIC_ATT, "all arguments passed by keyword",
        att(T=7, D=4, byname=True)),
    "w19_row_max_clamped_at_zero.py": (
        BASIC_ATT, "float32, branch-1 logits ~ -300 in every row",
        att(T=6, D=4, arrays=arrays_all_negative, causal=False)),
    "w20_custom_fn_grad_gating.py": (
        BASIC_ATT, "q1 frozen, k1 requires grad",
        att(T=7, D=4, frozen=("q1",))),
}


def run_wrong(rel):
    name = os.path.basename(rel)
    basic, desc, bug = WRONG[name]
    try:
        b = basic(load(rel))
    except Exception as exc:  # noqa: BLE001
        raise Disagree(f"basic scenario failed: {type(exc).__name__}: {exc}")
    if b > 1.0:
        raise Disagree(f"basic scenario error {b:.2f} x tol")
    try:
        w = bug(load(rel))
    except Disagree as exc:
        return f"basic agrees ({b:.3f} x tol); {desc}: {exc}"
    except Exception as exc:  # noqa: BLE001
        return f"basic agrees ({b:.3f} x tol); {desc}: raises {type(exc).__name__}: " \
               + str(exc).splitlines()[0][:80]
    if w > 10.0:
        return f"basic agrees ({b:.3f} x tol); {desc}: error {w:.3g} x tol"
    raise Disagree(f"bug scenario not detected ({desc}: only {w:.3g} x tol)")


def main():
    torch.manual_seed(0)
    warnings.filterwarnings("ignore", category=UserWarning)
    print(f"oracle self-check vs torch.autograd on own float64 formula: max diff "
          f"{oracle_self_check():.1e}")
    wrong = sorted(f for f in os.listdir(os.path.join(HERE, "wrong")) if f.endswith(".py"))
    correct = sorted(f for f in os.listdir(os.path.join(HERE, "correct")) if f.endswith(".py"))
    ok = 0
    for kind, files, fn in (("wrong", wrong, run_wrong), ("correct", correct, run_correct)):
        for f in files:
            rel = f"{kind}/{f}"
            try:
                msg = fn(rel)
                ok += 1
                print(f"PASS {rel}: {msg}", flush=True)
            except Exception as exc:  # noqa: BLE001
                if not isinstance(exc, Disagree):
                    traceback.print_exc()
                print(f"FAIL {rel}: {type(exc).__name__}: {exc}", flush=True)
    total = len(wrong) + len(correct)
    print(f"SUMMARY: {ok}/{total} files behave as labelled "
          f"({len(wrong)} wrong detected, {len(correct)} correct agree)" if ok == total
          else f"SUMMARY: {ok}/{total} files behave as labelled -- FAILURES")
    return 0 if ok == total else 1


if __name__ == "__main__":
    sys.exit(main())
