"""Confirm every label of the DIFF V2 corpus against an independent float64 numpy oracle.

Run from the repository root:  python tests/corpus/v2/verify.py

The oracle (forward values, hand-derived VJPs and the rounding allowance) is
plain float64 numpy; torch is used only to call the implementations. The
VJPs are first checked element by element against central finite differences
of the numpy forward, and the forward against the toy-experiment identity.

Tiers, as the grader uses them:
  T1  contract: no exception on valid input, one tensor, right shape, dtype
      and device, inputs unchanged (values and _version), output attached to
      the graph when inputs require grad;
  T2  forward values match the oracle;
  T3  gradients w.r.t. q, k, v (and lambda_logits) match the oracle.

A file in correct/ must pass every tier on the battery and on every witness
input. A file in wrong/ must
  * fail its labelled tier on its witness (a concrete input inside its
    "where"): T1 by breaking the contract, T2/T3 by an error > 10x the
    allowance (or a non-finite value, an exception in backward);
  * pass every earlier tier, for both functions, on the battery and on the
    witness;
  * when labelled diff_v2_attention, have a gqa_attention that passes every
    tier everywhere (the bug sits where the label says).

Allowance (elementwise): SAFETY * u * n * magnitude + SAFETY * n * tiny, where
u is the unit roundoff of the inputs' dtype, n = G*T + 2*D + L + 10 (L = the
largest absolute-value logit sum, which exp turns into relative error),
magnitude is the absolute-value evaluation of the same formula (every
subtraction an addition), and tiny the smallest normal number (underflow).
The gate sigmoid(l) is treated as a quantity with absolute error u.

Prints one line per file and a SUMMARY line; exits 1 if any label is not
confirmed.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import math
import os
import sys
import time

import numpy as np
import torch

sys.dont_write_bytecode = True  # keep the corpus folders free of __pycache__
HERE = os.path.dirname(os.path.abspath(__file__))
SAFETY = 16.0
CLEAR = 10.0  # a wrong file must exceed the allowance by this factor
DTYPES = {"f32": torch.float32, "f64": torch.float64}
NP_DTYPES = {"f32": np.float32, "f64": np.float64}
UNIT = {"f32": 2.0 ** -24, "f64": 2.0 ** -53}
TINY = {"f32": float(np.finfo(np.float32).tiny), "f64": float(np.finfo(np.float64).tiny)}
GQA, DIFF = "gqa_attention", "diff_v2_attention"
_counter = itertools.count()


def load(rel):
    """Import a corpus file as a fresh module."""
    path = os.path.join(HERE, rel + ".py")
    spec = importlib.util.spec_from_file_location(f"_v2_corpus_{next(_counter)}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# =========================================================================
# float64 numpy oracle
# =========================================================================

def np_sigmoid(x):
    z = np.exp(-np.abs(x))  # never overflows
    return np.where(x >= 0, 1.0 / (1.0 + z), z / (1.0 + z))


def _future(t):
    return np.triu(np.ones((t, t), dtype=bool), 1)


def gqa_forward(q, k, v, causal):
    """Forward pass in [B, T, H, D]; returns the pieces the VJP needs."""
    t, hq, d = q.shape[1:]
    hkv = k.shape[2]
    g = hq // hkv
    idx = np.arange(hq) // g  # query head h reads key/value head h // G
    kr, vr = k[:, :, idx], v[:, :, idx]
    s = np.einsum("bthd,bshd->bhts", q, kr) / math.sqrt(d)
    logit_mag = float(np.einsum("bthd,bshd->bhts", np.abs(q), np.abs(kr)).max() / math.sqrt(d))
    if causal:
        s = np.where(_future(t), -np.inf, s)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    a = e / e.sum(axis=-1, keepdims=True)
    out = np.einsum("bhts,bshd->bthd", a, vr)
    mag = np.einsum("bhts,bshd->bthd", a, np.abs(vr))
    n = g * t + 2 * d + logit_mag + 10
    return dict(q=q, kr=kr, vr=vr, a=a, out=out, mag=mag, G=g, hkv=hkv, n=n)


def _group_sum(x, hkv, g):
    b, t, _, d = x.shape
    return x.reshape(b, t, hkv, g, d).sum(axis=3)


def gqa_vjp(f, g, gabs):
    """Gradients (and their magnitudes) of sum(g * out) w.r.t. q, k, v."""
    q, kr, vr, a = f["q"], f["kr"], f["vr"], f["a"]
    d = q.shape[-1]
    rd = math.sqrt(d)
    da = np.einsum("bthd,bshd->bhts", g, vr)
    mda = np.einsum("bthd,bshd->bhts", gabs, np.abs(vr))
    ds = a * (da - (da * a).sum(axis=-1, keepdims=True))
    mds = a * (mda + (mda * a).sum(axis=-1, keepdims=True))
    grads = {
        "q": np.einsum("bhts,bshd->bthd", ds, kr) / rd,
        "k": _group_sum(np.einsum("bhts,bthd->bshd", ds, q) / rd, f["hkv"], f["G"]),
        "v": _group_sum(np.einsum("bhts,bthd->bshd", a, g), f["hkv"], f["G"]),
    }
    mags = {
        "q": np.einsum("bhts,bshd->bthd", mds, np.abs(kr)) / rd,
        "k": _group_sum(np.einsum("bhts,bthd->bshd", mds, np.abs(q)) / rd, f["hkv"], f["G"]),
        "v": _group_sum(np.einsum("bhts,bthd->bshd", a, gabs), f["hkv"], f["G"]),
    }
    return grads, mags


def oracle_gqa(q, k, v, causal, g=None):
    f = gqa_forward(q, k, v, causal)
    res = dict(out=f["out"], mag=f["mag"], n=f["n"])
    if g is not None:
        res["grads"], res["mags"] = gqa_vjp(f, g, np.abs(g))
    return res


def oracle_diff(q, k, v, lam, causal, g=None):
    f = gqa_forward(q, k, v, causal)
    a_all, m_all = f["out"], f["mag"]
    sig = np_sigmoid(lam)
    odd = a_all[:, :, 1::2]
    out = a_all[:, :, 0::2] - sig[..., None] * odd
    mag = m_all[:, :, 0::2] + m_all[:, :, 1::2]  # sigmoid carries absolute error u
    res = dict(out=out, mag=mag, n=f["n"] + 4)
    if g is not None:
        ga = np.zeros_like(a_all)
        ga[:, :, 0::2] = g
        ga[:, :, 1::2] = -sig[..., None] * g
        gabs = np.repeat(np.abs(g), 2, axis=2)
        grads, mags = gqa_vjp(f, ga, gabs)
        # d sigmoid = sigmoid(l) * sigmoid(-l), both factors computed stably
        grads["lambda_logits"] = -(g * odd).sum(axis=-1) * sig * np_sigmoid(-lam)
        mags["lambda_logits"] = (np.abs(g) * m_all[:, :, 1::2]).sum(axis=-1)
        res["grads"], res["mags"] = grads, mags
    return res


def oracle(fn, arrs, causal, g=None):
    if fn == GQA:
        return oracle_gqa(arrs["q"], arrs["k"], arrs["v"], causal, g)
    return oracle_diff(arrs["q"], arrs["k"], arrs["v"], arrs["lambda_logits"], causal, g)


def oracle_self_check():
    """VJPs against central finite differences of the numpy forward; toy identity."""
    rng = np.random.default_rng(5)
    worst = 0.0
    h = 1e-6
    for fn, (b, t, hq, hkv, d), causal in itertools.product(
            (GQA, DIFF), ((1, 3, 4, 2, 2), (2, 2, 4, 1, 3), (1, 4, 2, 2, 2)), (True, False)):
        if fn == DIFF and (hq // hkv) % 2:
            continue
        arrs = {"q": rng.standard_normal((b, t, hq, d)), "k": rng.standard_normal((b, t, hkv, d)),
                "v": rng.standard_normal((b, t, hkv, d))}
        if fn == DIFF:
            arrs["lambda_logits"] = 2 * rng.standard_normal((b, t, hq // 2))
        g = rng.standard_normal(oracle(fn, arrs, causal)["out"].shape)
        grads = oracle(fn, arrs, causal, g)["grads"]
        for name, x in arrs.items():
            fd = np.zeros_like(x)
            for i in np.ndindex(x.shape):
                keep = x[i]
                x[i] = keep + h
                up = (g * oracle(fn, arrs, causal)["out"]).sum()
                x[i] = keep - h
                down = (g * oracle(fn, arrs, causal)["out"]).sum()
                x[i] = keep
                fd[i] = (up - down) / (2 * h)
            err = np.abs(fd - grads[name]).max() / max(np.abs(fd).max(), 1e-3)
            worst = max(worst, err)
    # toy experiment: an offset shared by every token leaves scaled by 1 - sigmoid(l)
    b, t, hq, hkv, d = 2, 6, 8, 2, 3
    q, k = rng.standard_normal((b, t, hq, d)), rng.standard_normal((b, t, hkv, d))
    lam = 3 * rng.standard_normal((b, t, hq // 2))
    v = rng.standard_normal((b, t, hkv, d))
    offset = rng.standard_normal(d)
    shift = oracle_diff(q, k, v + offset, lam, True)["out"] - oracle_diff(q, k, v, lam, True)["out"]
    toy = np.abs(shift - (1 - np_sigmoid(lam))[..., None] * offset).max()
    if worst > 1e-6 or toy > 1e-12:
        raise SystemExit(f"oracle self-check FAILED: VJP vs finite differences {worst:.2e}, toy {toy:.2e}")
    return worst, toy


# =========================================================================
# inputs
# =========================================================================

LAYOUTS4 = ("contig", "bhtd", "sliced", "stepped", "tbhd")
LAYOUTS3 = ("contig", "bht", "sliced", "stepped", "tbh")
NAMES = ("q", "k", "v", "lambda_logits")
SATURATED = (-1000.0, -100.0, -30.0, 0.0, 30.0, 100.0, 1000.0)


def gen_arrays(spec):
    """float64 arrays holding values exactly representable in the case's dtype."""
    rng = np.random.default_rng(spec["seed"])
    b, t, hq, hkv, d = spec["shape"]
    if spec.get("arrays"):
        arrs = spec["arrays"](rng, spec)
    else:
        arrs = {"q": rng.standard_normal((b, t, hq, d)), "k": rng.standard_normal((b, t, hkv, d)),
                "v": rng.standard_normal((b, t, hkv, d))}
        target = spec.get("logit_max")
        if target is not None:
            idx = np.arange(hq) // (hq // hkv)
            s = np.einsum("bthd,bshd->bhts", arrs["q"], arrs["k"][:, :, idx]) / math.sqrt(d)
            f = math.sqrt(target / np.abs(s).max())
            arrs["q"] = arrs["q"] * f
            arrs["k"] = arrs["k"] * f
    lam = spec.get("lam", "normal")
    shape = (b, t, hq // 2)
    if hq % 2 == 0 and "lambda_logits" not in arrs:
        if lam == "normal":
            arrs["lambda_logits"] = 2.0 * rng.standard_normal(shape)
        elif lam == "saturated":
            arrs["lambda_logits"] = rng.choice(SATURATED, size=shape)
        else:
            arrs["lambda_logits"] = np.full(shape, float(lam))
    npdt = NP_DTYPES[spec["dtype"]]
    return {n: x.astype(npdt).astype(np.float64) for n, x in arrs.items()}


def as_layout(arr, dtype, layout, rng):
    """A torch tensor with arr's values and the requested memory layout (a leaf)."""
    a = torch.tensor(arr, dtype=dtype)

    def noise(shape):  # what a slice leaves around the values: large, so misreads show
        return torch.tensor(rng.standard_normal(shape) * 1e3, dtype=dtype)

    if arr.ndim == 4:
        b, t, h, d = a.shape
        if layout == "contig":
            x = a.clone()
        elif layout == "bhtd":  # storage [B, H, T, D], as a [B, H, T, D] projection gives
            x = a.permute(0, 2, 1, 3).contiguous().permute(0, 2, 1, 3)
        elif layout == "tbhd":
            x = a.permute(1, 0, 2, 3).contiguous().permute(1, 0, 2, 3)
        elif layout == "sliced":  # a slice of a fused buffer: storage offset and gaps
            base = noise((b, t, h + 2, d + 3))
            base[:, :, 1:h + 1, 2:d + 2] = a
            x = base[:, :, 1:h + 1, 2:d + 2]
        elif layout == "stepped":
            base = noise((b, 2 * t, h, 2 * d))
            base[:, ::2, :, 1::2] = a
            x = base[:, ::2, :, 1::2]
        else:
            raise ValueError(layout)
    else:
        b, t, h = a.shape
        if layout == "contig":
            x = a.clone()
        elif layout == "bht":
            x = a.permute(0, 2, 1).contiguous().permute(0, 2, 1)
        elif layout == "tbh":
            x = a.permute(1, 0, 2).contiguous().permute(1, 0, 2)
        elif layout == "sliced":
            base = noise((b, t, h + 3))
            base[:, :, 1:h + 1] = a
            x = base[:, :, 1:h + 1]
        elif layout == "stepped":
            base = noise((b, 2 * t, 2 * h))
            base[:, ::2, ::2] = a
            x = base[:, ::2, ::2]
        else:
            raise ValueError(layout)
    assert torch.equal(x, a)
    return x.detach()


# =========================================================================
# running one implementation on one case
# =========================================================================

class Outcome:
    """What one (function, case) run showed: T1 failure text, T2/T3 worst error / allowance."""

    def __init__(self):
        self.t1 = None
        self.t2 = 0.0
        self.t3 = 0.0
        self.msg = {"T1": "", "T2": "", "T3": ""}

    def fail(self, tier, ratio, msg):
        if ratio > getattr(self, tier.lower()):
            setattr(self, tier.lower(), ratio)
            self.msg[tier] = msg

    def tier_failed(self, tier, clear=1.0):
        if tier == "T1":
            return self.t1 is not None
        return getattr(self, tier.lower()) > clear


def _ratio(got, ref, mag, n, dtype_key):
    got = np.asarray(got, dtype=np.float64)
    if got.shape != ref.shape:
        return math.inf, f"shape {got.shape} != {ref.shape}"
    if not np.all(np.isfinite(got)):
        return math.inf, "non-finite values (the oracle is finite)"
    allowed = SAFETY * UNIT[dtype_key] * n * mag + SAFETY * n * TINY[dtype_key]
    r = np.abs(got - ref) / allowed
    i = np.unravel_index(int(np.argmax(r)), r.shape)
    return float(r[i]), f"worst at {tuple(int(j) for j in i)}: got {got[i]:.6g}, expected {ref[i]:.6g}"


_ORACLE_CACHE = {}


def run_case(mod, fn, spec):
    """Run mod.fn on the case twice (frozen inputs, then inputs requiring grad)."""
    out_come = Outcome()
    key = (fn, spec["id"])
    arrs = gen_arrays(spec)
    names = NAMES if fn == DIFF else NAMES[:3]
    b, t, hq, _, d = spec["shape"]
    out_shape = (b, t, hq // 2 if fn == DIFF else hq, d)
    g = np.random.default_rng(spec["seed"] + 1).standard_normal(out_shape)
    g = g.astype(NP_DTYPES[spec["dtype"]]).astype(np.float64)
    if key not in _ORACLE_CACHE:
        _ORACLE_CACHE[key] = oracle(fn, arrs, spec["causal"], g)
    ref = _ORACLE_CACHE[key]
    dtype = DTYPES[spec["dtype"]]
    layouts = spec["layouts"]
    for grad in (False, True):
        lrng = np.random.default_rng(spec["seed"] + 2)
        ts = {}
        for n in names:
            x = as_layout(arrs[n], dtype, layouts[n], lrng)
            if grad:
                x.requires_grad_(True)
            ts[n] = x
        before = {n: (x.detach().clone(), x._version) for n, x in ts.items()}
        args = [ts[n] for n in names]
        kwargs = {}
        mode = spec["pass_causal"]
        if mode == "pos":
            args.append(spec["causal"])
        elif mode == "kw":
            kwargs["causal"] = spec["causal"]
        elif spec["causal"] is not True:
            raise ValueError("default causal used for a non-causal case")
        try:
            out = getattr(mod, fn)(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - any exception on a valid input is a T1 failure
            out_come.t1 = f"raised {type(exc).__name__}: {str(exc)[:120]}"
            return out_come
        for n, x in ts.items():
            old, version = before[n]
            if x._version != version or not torch.equal(x.detach(), old):
                out_come.t1 = f"input '{n}' was modified in place"
                return out_come
        if not isinstance(out, torch.Tensor):
            out_come.t1 = f"returned {type(out).__name__}, not one tensor"
            return out_come
        if tuple(out.shape) != out_shape:
            out_come.t1 = f"returned shape {list(out.shape)}, expected {list(out_shape)}"
            return out_come
        if out.dtype != dtype or out.device.type != "cpu":
            out_come.t1 = f"returned {out.dtype} on {out.device} for {dtype} inputs"
            return out_come
        if grad and not out.requires_grad:
            out_come.t1 = "output not attached to the autograd graph"
            return out_come
        r, m = _ratio(out.detach().numpy(), ref["out"], ref["mag"], ref["n"], spec["dtype"])
        out_come.fail("T2", r, "values: " + m)
        if not grad:
            continue
        try:
            out.backward(torch.tensor(g, dtype=dtype))
        except Exception as exc:  # noqa: BLE001
            out_come.fail("T3", math.inf, f"backward raised {type(exc).__name__}: {str(exc)[:100]}")
            continue
        for n, x in ts.items():
            got = np.zeros(x.shape) if x.grad is None else x.grad.detach().numpy()
            r, m = _ratio(got, ref["grads"][n], ref["mags"][n], ref["n"], spec["dtype"])
            out_come.fail("T3", r, f"grad {n}" + (" (None)" if x.grad is None else "") + ": " + m)
    return out_come


# =========================================================================
# the battery and the witnesses
# =========================================================================

def _make(shape, dtype, causal, i, **extra):
    hq = shape[2]
    fns = [GQA] + ([DIFF] if (hq // shape[3]) % 2 == 0 else [])
    names = NAMES if hq % 2 == 0 else NAMES[:3]
    if extra.pop("contig", False) or i % 3 == 0:
        layouts = {n: "contig" for n in names}
    else:
        layouts = {n: (LAYOUTS4 if n != "lambda_logits" else LAYOUTS3)[(i + j) % 5]
                   for j, n in enumerate(names)}
    mode = ("pos", "kw", "default")[i % 3]
    if mode == "default" and not causal:
        mode = "pos"
    spec = dict(shape=shape, dtype=dtype, causal=causal, seed=1000 + 17 * i, layouts=layouts,
                pass_causal=mode, fns=fns, id=f"case{i}")
    spec.update(extra)
    return spec


SHAPES = (  # (B, T, Hq, Hkv, D)
    (2, 5, 4, 2, 3),   # G = 2
    (1, 1, 2, 1, 4),   # one token, Hkv = 1
    (2, 6, 8, 2, 4),   # G = 4
    (1, 7, 3, 3, 5),   # Hkv = Hq (gqa only)
    (2, 4, 6, 3, 2),   # H = 3 pairs, Hkv = 3
    (1, 9, 4, 1, 1),   # D = 1, Hkv = 1, G = 4
    (1, 20, 4, 2, 3),  # several key blocks
    (1, 3, 1, 1, 2),   # Hq = 1 (gqa only)
    (2, 3, 4, 4, 2),   # G = 1, Hkv = Hq = 4 (gqa only)
)


def battery():
    specs = []
    i = 0
    for shape, causal, dtype in itertools.product(SHAPES, (True, False), ("f32", "f64")):
        specs.append(_make(shape, dtype, causal, i))
        i += 1
    extras = [
        ((2, 5, 4, 2, 3), "f32", True, dict(logit_max=100.0)),
        ((2, 6, 8, 2, 4), "f32", False, dict(logit_max=150.0)),
        ((1, 20, 4, 2, 3), "f32", True, dict(logit_max=120.0)),
        ((2, 4, 6, 3, 2), "f64", True, dict(logit_max=300.0)),
        ((2, 5, 4, 2, 3), "f32", True, dict(lam="saturated")),
        ((2, 6, 8, 2, 4), "f32", False, dict(lam="saturated", logit_max=100.0)),
        ((2, 4, 6, 3, 2), "f64", True, dict(lam="saturated")),
        ((1, 9, 4, 1, 1), "f32", True, dict(lam=-100.0)),
        ((1, 9, 4, 1, 1), "f32", False, dict(lam=100.0)),
        ((2, 5, 4, 2, 3), "f32", True, dict(lam=-1000.0)),
        ((2, 5, 4, 2, 3), "f64", False, dict(lam=1000.0)),
        ((1, 6, 4, 2, 2), "f64", True, dict(lam=0.0)),
    ]
    for shape, dtype, causal, extra in extras:
        specs.append(_make(shape, dtype, causal, i, **extra))
        i += 1
    return specs


def _max_before_mask_arrays(rng, spec):
    """Row 0 sees only a logit of -60 while a hidden future key scores +100."""
    b, t, hq, hkv, d = spec["shape"]
    q = np.ones((b, t, hq, d))
    k = np.zeros((b, t, hkv, d))
    k[:, :, :, 0] = np.array([-60.0, 1.0, 2.0, 100.0])[None, :, None]
    return {"q": q, "k": k, "v": rng.standard_normal((b, t, hkv, d))}


BASE = (2, 5, 4, 2, 3)  # B, T, Hq, Hkv, D with G = 2, H = 2
WITNESS = {  # label key -> (shape, dtype, causal, extra); all inside the label's "where"
    "wrong/repeat_not_interleave": (BASE, "f64", True, {}),
    "wrong/values_not_interleaved": (BASE, "f64", True, {}),
    "wrong/halves_not_pairs": (BASE, "f64", True, {}),
    "wrong/pairs_swapped": (BASE, "f64", True, {}),
    "wrong/raw_logit_gate": (BASE, "f64", True, {}),
    "wrong/exp_gate": (BASE, "f32", True, {}),
    "wrong/one_minus_sigmoid": (BASE, "f64", False, {}),
    "wrong/gate_reshaped_bht": (BASE, "f64", True, {}),
    "wrong/gate_mean_over_tokens": (BASE, "f32", True, {}),
    "wrong/sdpa_wrong_layout": (BASE, "f32", True, {}),
    "wrong/reshape_not_transpose": (BASE, "f64", False, {}),
    "wrong/scale_two_d": (BASE, "f32", True, {}),
    "wrong/scale_tensor_float32": (BASE, "f64", True, {}),
    "wrong/no_pair_reduction": (BASE, "f32", True, {}),
    "wrong/v1_lambda_init_factor": (BASE, "f32", True, {}),
    "wrong/v1_rmsnorm": (BASE, "f32", True, {}),
    "wrong/mask_off_by_one": (BASE, "f32", True, {}),
    "wrong/mask_diagonal": (BASE, "f32", True, {}),
    "wrong/causal_not_forwarded": (BASE, "f32", False, {}),
    "wrong/softmax_over_queries": (BASE, "f32", True, {}),
    "wrong/online_no_rescale": ((1, 20, 4, 2, 3), "f64", True, {}),
    "wrong/naive_sigmoid": (BASE, "f32", True, dict(lam=-100.0)),
    "wrong/sigmoid_exp_ratio": (BASE, "f32", True, dict(lam=100.0)),
    "wrong/sigmoid_abs_kink": (BASE, "f64", True, dict(lam=0.0)),
    "wrong/gate_detached": (BASE, "f32", True, {}),
    "wrong/gate_float32": (BASE, "f64", True, {}),
    "wrong/custom_fn_dlambda": (BASE, "f64", True, {}),
    "wrong/returns_tuple": (BASE, "f32", True, {}),
    "wrong/no_max_shift": (BASE, "f32", True, dict(logit_max=100.0)),
    "wrong/max_before_mask": ((1, 4, 2, 1, 1), "f32", True, dict(arrays=_max_before_mask_arrays)),
    "wrong/mask_under_no_grad": (BASE, "f32", True, {}),
    "wrong/softmax_inplace_zeroing": (BASE, "f32", True, {}),
    "wrong/inplace_scale_frozen_q": (BASE, "f32", True, {}),
    "wrong/float32_compute": (BASE, "f64", True, {}),
    "wrong/view_fold_group": (BASE, "f32", True, dict(contig=True)),
    "wrong/custom_fn_dk_mean": (BASE, "f64", True, {}),
}


# Inputs OUTSIDE a label's "where": there the file must pass every tier (for
# every function the case applies to), which shows that "where" is not wider
# than it needs to be. Labels whose "where" is "any input" have none.
NOT_WHERE = {
    "wrong/repeat_not_interleave": [((1, 9, 4, 1, 1), "f64", True, {}), ((2, 3, 4, 4, 2), "f64", False, {})],
    "wrong/values_not_interleaved": [((1, 9, 4, 1, 1), "f64", True, {}), ((2, 3, 4, 4, 2), "f64", False, {})],
    "wrong/halves_not_pairs": [((1, 4, 2, 1, 3), "f64", True, {}), ((2, 5, 2, 1, 2), "f32", False, {})],
    "wrong/gate_reshaped_bht": [((1, 4, 2, 1, 3), "f64", True, {}), ((2, 1, 4, 2, 3), "f64", False, {})],
    "wrong/gate_mean_over_tokens": [((2, 1, 4, 2, 3), "f64", True, {}), ((1, 1, 2, 1, 4), "f32", False, {})],
    "wrong/sdpa_wrong_layout": [((1, 1, 2, 1, 4), "f32", True, {}), ((2, 1, 4, 1, 3), "f64", False, {})],
    "wrong/reshape_not_transpose": [((2, 1, 4, 2, 3), "f64", True, {}), ((1, 3, 1, 1, 2), "f64", True, {})],
    "wrong/scale_two_d": [((2, 1, 4, 2, 3), "f64", True, {})],
    "wrong/scale_tensor_float32": [(BASE, "f32", True, {}), ((2, 6, 8, 2, 4), "f64", False, {}),
                                   ((2, 1, 4, 2, 3), "f64", True, {})],
    "wrong/mask_off_by_one": [(BASE, "f64", False, {}), ((2, 1, 4, 2, 3), "f64", True, {})],
    "wrong/mask_diagonal": [(BASE, "f64", False, {})],
    "wrong/causal_not_forwarded": [(BASE, "f64", True, {}), ((2, 1, 4, 2, 3), "f64", False, {})],
    "wrong/softmax_over_queries": [((2, 1, 4, 2, 3), "f64", True, {})],
    "wrong/online_no_rescale": [((2, 8, 4, 2, 3), "f64", True, {}), ((2, 8, 4, 2, 3), "f32", False, {})],
    "wrong/naive_sigmoid": [(BASE, "f32", True, dict(lam=-80.0)), (BASE, "f32", False, dict(lam=1000.0)),
                            (BASE, "f64", True, dict(lam=-700.0))],
    "wrong/sigmoid_exp_ratio": [(BASE, "f32", True, dict(lam=80.0)), (BASE, "f32", False, dict(lam=-1000.0)),
                                (BASE, "f64", True, dict(lam=700.0))],
    "wrong/sigmoid_abs_kink": [(BASE, "f64", True, {}), (BASE, "f32", True, dict(lam=-100.0)),
                               (BASE, "f32", False, dict(lam=1000.0))],
    "wrong/gate_float32": [(BASE, "f32", True, {}), (BASE, "f32", False, dict(lam="saturated"))],
    "wrong/custom_fn_dlambda": [(BASE, "f32", True, dict(lam=-1000.0)), (BASE, "f64", False, dict(lam=-100.0))],
    "wrong/no_max_shift": [(BASE, "f32", True, dict(logit_max=80.0)), (BASE, "f64", False, dict(logit_max=300.0))],
    "wrong/max_before_mask": [((1, 4, 2, 1, 1), "f32", False, dict(arrays=_max_before_mask_arrays)),
                              (BASE, "f32", True, dict(logit_max=40.0))],
    "wrong/mask_under_no_grad": [(BASE, "f32", False, {})],
    "wrong/softmax_inplace_zeroing": [(BASE, "f32", False, {})],
    "wrong/float32_compute": [(BASE, "f32", True, {}), ((2, 6, 8, 2, 4), "f32", False, {})],
    "wrong/view_fold_group": [((1, 9, 4, 1, 1), "f32", True, dict(contig=True)),
                              ((2, 3, 4, 4, 2), "f64", False, dict(contig=True))],
    "wrong/custom_fn_dk_mean": [((2, 3, 4, 4, 2), "f64", True, {}), ((1, 7, 3, 3, 5), "f32", False, {})],
}


def not_where_specs():
    out = {}
    for j, (key, items) in enumerate(sorted(NOT_WHERE.items())):
        out[key] = []
        for m, (shape, dtype, causal, extra) in enumerate(items):
            spec = _make(shape, dtype, causal, 700 + 5 * j + m, **dict(extra))
            spec["id"] = f"outside:{key}:{m}"
            out[key].append(spec)
    return out


def witness_specs():
    out = {}
    for j, (key, (shape, dtype, causal, extra)) in enumerate(sorted(WITNESS.items())):
        spec = _make(shape, dtype, causal, 500 + j, **dict(extra))
        spec["id"] = "witness:" + key
        out[key] = spec
    return out


# =========================================================================
# verdicts
# =========================================================================

def run_all(mod, specs):
    """Worst outcome per function over specs: {fn: (t1 text, t2, t3, messages)}."""
    worst = {}
    for spec in specs:
        for fn in spec["fns"]:
            o = run_case(mod, fn, spec)
            w = worst.setdefault(fn, {"T1": None, "T2": 0.0, "T3": 0.0, "msg": {}})
            if o.t1 and w["T1"] is None:
                w["T1"] = f"{spec['id']}: {o.t1}"
            for tier in ("T2", "T3"):
                r = getattr(o, tier.lower())
                if r > w[tier]:
                    w[tier] = r
                    w["msg"][tier] = f"{spec['id']}: {o.msg[tier]}"
    return worst


def earlier_ok(worst, tier):
    """Problems found by the tiers before `tier` (list of strings)."""
    problems = []
    for fn, w in worst.items():
        if tier in ("T2", "T3") and w["T1"]:
            problems.append(f"{fn} T1 {w['T1']}")
        if tier == "T3" and w["T2"] > 1.0:
            problems.append(f"{fn} T2 x{w['T2']:.3g} {w['msg'].get('T2', '')}")
    return problems


def check_correct(mod, specs):
    worst = run_all(mod, specs)
    problems = earlier_ok(worst, "T3")
    for fn, w in worst.items():
        if w["T3"] > 1.0:
            problems.append(f"{fn} T3 x{w['T3']:.3g} {w['msg'].get('T3', '')}")
    margin = max(max(w["T2"], w["T3"]) for w in worst.values())
    return problems, f"worst error {margin:.3f} of the allowance"


def check_wrong(key, label, mod, specs, witness, outside):
    tier, fn = label["tier"], label["function"]
    problems = []
    for spec in outside:
        for f in spec["fns"]:
            o = run_case(mod, f, spec)
            if o.t1 or o.t2 > 1.0 or o.t3 > 1.0:
                problems.append(f"fails outside its 'where' ({spec['id']}, {f}): T1 {o.t1}, "
                                f"T2 x{o.t2:.3g}, T3 x{o.t3:.3g}")
    o = run_case(mod, fn, witness)
    if tier == "T1":
        shown = o.t1
        if not shown:
            problems.append(f"witness passes T1 (T2 x{o.t2:.3g}, T3 x{o.t3:.3g})")
        detail = shown or ""
    else:
        if o.t1:
            problems.append(f"witness fails T1 before {tier}: {o.t1}")
        if tier == "T3" and o.t2 > 1.0:
            problems.append(f"witness fails T2 before T3: x{o.t2:.3g} {o.msg['T2']}")
        r = getattr(o, tier.lower())
        if r <= CLEAR:
            problems.append(f"witness error only x{r:.3g} of the allowance at {tier}")
        detail = f"x{r:.3g} {o.msg[tier]}"
    worst = run_all(mod, specs + [witness])
    problems += ["battery: " + p for p in earlier_ok(worst, tier)]
    if fn == DIFF:
        w = worst[GQA]
        if w["T1"] or w["T2"] > 1.0 or w["T3"] > 1.0:
            problems.append(f"gqa_attention is not clean (T1 {w['T1']}, T2 x{w['T2']:.3g}, "
                            f"T3 x{w['T3']:.3g}) although the bug is labelled in diff_v2_attention")
    return problems, detail


def _invalid_inputs():
    """(description, function, args, expected exception type) for the stub's validation."""
    f32, f64 = torch.float32, torch.float64

    def r(*shape, dtype=f32):
        return torch.zeros(*shape, dtype=dtype)

    q, k, v, lam = r(2, 5, 4, 3), r(2, 5, 2, 3), r(2, 5, 2, 3), r(2, 5, 2)
    return [
        ("q of rank 3", GQA, (r(5, 4, 3), k, v), ValueError),
        ("k of rank 5", GQA, (q, r(2, 5, 2, 3, 1), v), ValueError),
        ("integer q", GQA, (torch.zeros(2, 5, 4, 3, dtype=torch.int64), k, v), TypeError),
        ("float16 q", GQA, (r(2, 5, 4, 3, dtype=torch.float16), k, v), TypeError),
        ("numpy q", GQA, (np.zeros((2, 5, 4, 3)), k, v), TypeError),
        ("k float64, q float32", GQA, (q, r(2, 5, 2, 3, dtype=f64), v), TypeError),
        ("batch mismatch", GQA, (q, r(1, 5, 2, 3), r(1, 5, 2, 3)), ValueError),
        ("length mismatch", GQA, (q, r(2, 4, 2, 3), r(2, 4, 2, 3)), ValueError),
        ("head_dim mismatch", GQA, (q, r(2, 5, 2, 4), r(2, 5, 2, 4)), ValueError),
        ("v heads != k heads", GQA, (q, k, r(2, 5, 1, 3)), ValueError),
        ("Hq not a multiple of Hkv", GQA, (r(2, 5, 3, 3), k, v), ValueError),
        ("empty axis", GQA, (r(2, 0, 4, 3), r(2, 0, 2, 3), r(2, 0, 2, 3)), ValueError),
        ("odd group G = 3", DIFF, (r(2, 5, 6, 3), k, v, r(2, 5, 3)), ValueError),
        ("G = 1", DIFF, (r(2, 5, 2, 3), k, v, r(2, 5, 1)), ValueError),
        ("lambda [B, T, 2H]", DIFF, (q, k, v, r(2, 5, 4)), ValueError),
        ("lambda [B, H, T]", DIFF, (q, k, v, r(2, 2, 5)), ValueError),
        ("lambda of rank 4", DIFF, (q, k, v, r(2, 5, 2, 1)), ValueError),
        ("lambda float64", DIFF, (q, k, v, r(2, 5, 2, dtype=f64)), TypeError),
        ("lambda integer", DIFF, (q, k, v, torch.zeros(2, 5, 2, dtype=torch.int32)), TypeError),
        ("lambda as a list", DIFF, (q, k, v, [[0.0, 0.0]] * 5), TypeError),
        ("q invalid in diff", DIFF, (r(2, 5, 4), k, v, lam), ValueError),
    ]


def check_stub(mod, specs):
    """Valid inputs reach NotImplementedError; invalid ones raise a clear TypeError/ValueError."""
    problems = []
    n_valid = 0
    for spec in specs:
        arrs = gen_arrays(spec)
        for fn in spec["fns"]:
            names = NAMES if fn == DIFF else NAMES[:3]
            lrng = np.random.default_rng(spec["seed"] + 2)
            ts = [as_layout(arrs[n], DTYPES[spec["dtype"]], spec["layouts"][n], lrng).requires_grad_(True)
                  for n in names]
            try:
                getattr(mod, fn)(*ts, spec["causal"])
                problems.append(f"{fn} on {spec['id']} returned instead of raising NotImplementedError")
            except NotImplementedError:
                n_valid += 1
            except Exception as exc:  # noqa: BLE001
                problems.append(f"{fn} rejected valid input {spec['id']}: {type(exc).__name__}: {exc}")
    bad = _invalid_inputs()
    for what, fn, args, expected in bad:
        try:
            getattr(mod, fn)(*args)
            problems.append(f"{fn} accepted {what}")
        except expected as exc:
            if not str(exc):
                problems.append(f"{fn}: empty message for {what}")
        except Exception as exc:  # noqa: BLE001
            problems.append(f"{fn}: {what} raised {type(exc).__name__}, expected {expected.__name__}")
    return problems, f"validation accepts {n_valid} valid calls and rejects {len(bad)} malformed ones"


REQUIRED = ("function", "tier", "component", "bug", "where")
COMPONENTS = {"grouping", "pairing", "gate", "mask", "scale", "softmax", "layout", "output",
              "dtype", "mutation", "stability", "backward", "graph"}


def main():
    start = time.time()
    fd_err, toy_err = oracle_self_check()
    print(f"oracle self-check: VJP vs central differences {fd_err:.1e}, toy identity {toy_err:.1e}")
    with open(os.path.join(HERE, "labels.json")) as fh:
        labels = json.load(fh)
    files = sorted(f"{d}/{f[:-3]}" for d in ("correct", "wrong")
                   for f in os.listdir(os.path.join(HERE, d)) if f.endswith(".py"))
    failures = []
    missing = sorted(set(files) ^ set(labels))
    if missing:
        failures.append(("labels.json", f"files and labels differ: {missing}"))
    specs = battery()
    witnesses = witness_specs()
    outside = not_where_specs()
    all_witness = list(witnesses.values()) + [x for xs in outside.values() for x in xs]
    rows = []
    for key in files:
        label = labels.get(key)
        if label is None:
            continue
        try:
            mod = load(key)
        except Exception as exc:  # noqa: BLE001
            rows.append((key, "-", "-", "-", "NOT CONFIRMED", f"import failed: {exc}"))
            failures.append((key, "import failed"))
            continue
        if label.get("correct") is True:
            if key.startswith("wrong/"):
                failures.append((key, "labelled correct but lives in wrong/"))
            problems, detail = check_correct(mod, specs + all_witness)
            tier, fn, comp = "-", "-", "-"
        else:
            bad = [f for f in REQUIRED if not label.get(f)]
            if bad or label["function"] not in (GQA, DIFF) or label["tier"] not in ("T1", "T2", "T3") \
                    or label["component"] not in COMPONENTS or key not in witnesses:
                problems, detail = [f"malformed label or no witness (missing {bad})"], ""
            else:
                problems, detail = check_wrong(key, label, mod, specs, witnesses[key],
                                               outside.get(key, []))
            tier, fn, comp = label.get("tier"), label.get("function"), label.get("component")
            fn = {GQA: "gqa", DIFF: "diff_v2"}.get(fn, fn)
        verdict = "confirmed" if not problems else "NOT CONFIRMED"
        rows.append((key, tier, fn, comp, verdict, "; ".join(problems) if problems else detail))
        if problems:
            failures.append((key, "; ".join(problems)))
    # The instructor reference must pass like a correct file; the stub's supplied
    # validation must accept every input above and reject malformed ones.
    for key, check in (("reference/diff_v2_attention", None), ("exercise/diff_v2_attention", None)):
        try:
            mod = load(os.path.join("..", "..", "..", key))
            if key.startswith("reference/"):
                problems, detail = check_correct(mod, specs + all_witness)
            else:
                problems, detail = check_stub(mod, specs + all_witness)
        except Exception as exc:  # noqa: BLE001
            problems, detail = [f"{type(exc).__name__}: {exc}"], ""
        rows.append((key, "-", "-", "-", "confirmed" if not problems else "NOT CONFIRMED",
                     "; ".join(problems) if problems else detail))
        if problems:
            failures.append((key, "; ".join(problems)))
    width = max(len(r[0]) for r in rows)
    print(f"{'file':<{width}}  tier  function  component  verdict        detail")
    for key, tier, fn, comp, verdict, detail in rows:
        print(f"{key:<{width}}  {tier:<4}  {fn:<8}  {comp:<9}  {verdict:<13}  {detail[:150]}")
    n_correct = sum(1 for r in rows if r[0].startswith("correct/"))
    n_wrong = sum(1 for r in rows if r[0].startswith("wrong/"))
    print(f"SUMMARY: {len(rows) - len(failures)}/{len(rows)} labels confirmed "
          f"({n_correct} correct, {n_wrong} wrong; {len(specs)} battery cases, "
          f"{len(witnesses)} witnesses) in {time.time() - start:.1f} s")
    for key, why in failures:
        print(f"FAILED {key}: {why}")
    return 1 if failures else 0


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)  # tiny tensors: threads only add overhead
    sys.exit(main())
