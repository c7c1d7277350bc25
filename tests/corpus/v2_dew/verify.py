"""Self-check of the v2_dew corpus (course students' first attempts at DIFF V2).

One process: ``python verify.py`` imports every submission file of this folder
(and the instructor reference), runs each function on a battery of inputs and
compares it with an independent float64 implementation of the contract written
from the task statement:

    gqa_attention:      out[b, t, h] = sum_s softmax_s(q[b,t,h] . k[b,s,h//G] / sqrt(D) + M[t,s]) v[b,s,h//G]
    diff_v2_attention:  out = A[:, :, 0::2] - sigmoid(lambda_logits)[..., None] * A[:, :, 1::2]

Every run is judged on three tiers:

* T1, the contract: the call returns one tensor of the right shape, dtype and
  device, leaves its inputs untouched (values and version counters) and, in grad
  mode with an input requiring grad, returns an output attached to the graph;
* T2, the forward values against the float64 oracle;
* T3, the gradients (torch.autograd.grad with a random upstream gradient) of
  every input that requires grad: present, finite, equal to the oracle's
  autograd gradient and to float64 central finite differences of the oracle
  along random directions.

A correct file (and the reference) must pass every tier of every run. A wrong
file is confirmed when: it fails at least one run; the earliest tier it fails
on any run is its label's tier; every failing run lies inside the file's WHERE
predicate (the labelled "where", written as code below) and every run outside
it passes; the labelled function is the one that fails (a gqa_attention bug may
also show in diff_v2_attention, which calls it; a diff_v2_attention bug never
shows in gqa_attention).

    python verify.py            # the table, the typical-example columns and RESULT
    python verify.py -v NAME    # every failing run of one file (NAME = file stem)
    python verify.py --seed-offset N   # the same battery on other random inputs
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
import warnings
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

sys.dont_write_bytecode = True  # leave no __pycache__ next to the submissions

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
REFERENCE = REPO / "reference" / "diff_v2_attention.py"

F32, F64 = torch.float32, torch.float64
ALL = frozenset({"q", "k", "v", "l"})

torch.set_num_threads(1)


# --------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    name: str
    fn: str  # "gqa" or "diff"
    B: int = 2
    T: int = 5
    Hq: int = 4
    Hkv: int = 2
    D: int = 8
    causal: bool = True
    pass_causal: str = "kw"  # "kw", "pos" or "default" (then causal is True)
    dtype: torch.dtype = F32
    layout: str = "contig"  # "contig", "strided" or "expanded" (stride-0 batch axis)
    nonleaf: bool = False  # trainable inputs are non-leaf tensors (x * 1)
    train: frozenset = ALL
    mode: str = "grad"  # "grad", "no_grad" or "inference"
    qk: float = 1.0  # scale of q and k (large logits)
    gate: str = "normal"  # "normal", "sat1000", "pm100", "mixed"
    seed: int = 0

    @property
    def eff_causal(self) -> bool:
        return True if self.pass_causal == "default" else self.causal

    @property
    def G(self) -> int:
        return self.Hq // self.Hkv

    @property
    def H(self) -> int:
        return self.Hq // 2

    @property
    def trains(self) -> frozenset:
        names = {"q", "k", "v"} | ({"l"} if self.fn == "diff" else set())
        return frozenset(self.train) & frozenset(names) if self.mode == "grad" else frozenset()

    def describe(self) -> str:
        bits = [
            f"{self.fn} B={self.B} T={self.T} Hq={self.Hq} Hkv={self.Hkv} D={self.D}",
            f"causal={self.eff_causal}({self.pass_causal})",
            "f32" if self.dtype == F32 else "f64",
            self.layout,
            self.mode,
        ]
        if self.mode == "grad":
            bits.append("train=" + ("".join(sorted(self.trains)) or "none"))
        if self.nonleaf:
            bits.append("nonleaf")
        if self.qk != 1.0:
            bits.append(f"qk*{self.qk:g}")
        if self.fn == "diff" and self.gate != "normal":
            bits.append(f"gate={self.gate}")
        return " ".join(bits)


def _cases() -> list[Case]:
    g = lambda name, **kw: Case(name, "gqa", **kw)  # noqa: E731
    d = lambda name, **kw: Case(name, "diff", **kw)  # noqa: E731
    cases = [
        # ---------------- gqa_attention ----------------
        g("g01_typical"),
        g("g02_single_token_head_dim1", B=1, T=1, Hq=1, Hkv=1, D=1, dtype=F64),
        g("g03_mha_noncausal", T=5, Hq=3, Hkv=3, D=4, causal=False, dtype=F64),
        g("g04_mqa_g4", T=6, Hq=4, Hkv=1, D=3, dtype=F64),
        g("g05_g3", B=3, T=7, Hq=6, Hkv=2, D=5),
        g("g06_long", T=70, Hq=4, Hkv=2, D=8),
        g("g07_long_nograd", T=70, Hq=8, Hkv=2, D=16, causal=False, dtype=F64, mode="no_grad"),
        g("g08_strided", T=6, Hq=6, Hkv=3, D=4, dtype=F64, layout="strided"),
        g("g09_large_logits", T=6, Hq=4, Hkv=2, D=4, qk=30.0),
        g("g10_inference", T=9, Hq=4, Hkv=4, D=6, causal=False, mode="inference"),
        g("g11_only_k", T=4, Hq=4, Hkv=2, D=3, dtype=F64, train=frozenset({"k"})),
        g("g12_only_v", T=4, Hq=4, Hkv=2, D=3, dtype=F64, causal=False, train=frozenset({"v"})),
        g("g13_only_q", train=frozenset({"q"})),
        g("g14_batch_eq_heads", B=4, T=3, Hq=4, Hkv=2, D=2, dtype=F64),
        g("g15_batch1", B=1, T=5, Hq=4, Hkv=2, D=4, dtype=F64),
        g("g16_default_causal", pass_causal="default"),
        g("g17_positional_noncausal", causal=False, pass_causal="pos", dtype=F64, D=3),
        g("g18_strided_only_q", T=5, Hq=2, Hkv=1, D=4, layout="strided", train=frozenset({"q"})),
        g("g19_head_dim1", T=8, Hq=2, Hkv=1, D=1, dtype=F64),
        g("g20_frozen_grad_mode", train=frozenset()),
        g("g21_single_token_noncausal", T=1, Hq=4, Hkv=2, D=4, causal=False, dtype=F64),
        g("g22_one_head", B=3, T=6, Hq=1, Hkv=1, D=5),
        g("g23_mqa_g3", T=5, Hq=3, Hkv=1, D=3, dtype=F64),
        g("g24_nonleaf", T=5, Hq=4, Hkv=2, D=3, dtype=F64, nonleaf=True),
        g("g25_large_logits_f64", T=7, Hq=4, Hkv=2, D=4, qk=40.0, causal=False, dtype=F64),
        g("g26_hkv4", T=6, Hq=8, Hkv=4, D=4),
        g("g27_long_strided_inference", T=70, Hq=6, Hkv=3, D=8, dtype=F64, layout="strided",
          mode="inference"),
        g("g28_nograd_single_token", B=1, T=1, Hq=2, Hkv=2, D=2, causal=False, mode="no_grad"),
        g("g29_long_grad_f64", T=70, Hq=2, Hkv=1, D=2, dtype=F64),
        g("g30_strided_only_k_mha", T=5, Hq=3, Hkv=3, D=3, dtype=F64, layout="strided",
          train=frozenset({"k"})),
        g("g32_expanded_batch", B=3, T=5, Hq=4, Hkv=2, D=3, dtype=F64, layout="expanded",
          train=frozenset({"v"})),
        g("g33_expanded_batch_nograd", B=3, T=4, Hq=2, Hkv=1, D=2, layout="expanded", mode="no_grad"),
        g("g34_expanded_head_dim1", B=2, T=4, Hq=2, Hkv=2, D=1, layout="expanded",
          train=frozenset({"k"})),
        g("g31_strided_frozen_k", T=5, Hq=4, Hkv=2, D=3, dtype=F64, layout="strided",
          train=frozenset({"q"}), causal=False),
        # ---------------- diff_v2_attention ----------------
        d("d01_typical"),
        d("d02_one_pair", T=4, Hq=2, Hkv=1, D=3, dtype=F64),
        d("d03_g4", T=5, Hq=8, Hkv=2, D=4, dtype=F64),
        d("d04_three_pairs_noncausal", T=5, Hq=6, Hkv=3, D=4, causal=False, dtype=F64),
        d("d05_mqa_g6", T=5, Hq=6, Hkv=1, D=4),
        d("d06_saturated_f32", gate="sat1000"),
        d("d07_saturated_f64", T=4, Hq=4, Hkv=2, D=3, dtype=F64, gate="sat1000"),
        d("d08_gates_pm100_f32", T=4, Hq=4, Hkv=2, D=3, gate="pm100"),
        d("d09_gates_pm100_f64", T=4, Hq=4, Hkv=2, D=3, dtype=F64, gate="pm100"),
        d("d10_single_token", T=1, Hq=4, Hkv=2, D=3, dtype=F64),
        d("d11_long_noncausal", T=70, Hq=4, Hkv=2, D=8, causal=False),
        d("d12_strided", T=6, Hq=4, Hkv=2, D=3, dtype=F64, layout="strided"),
        d("d13_nograd", T=6, Hq=8, Hkv=2, D=4, dtype=F64, mode="no_grad"),
        d("d14_inference_noncausal", T=6, Hq=6, Hkv=3, D=4, causal=False, mode="inference"),
        d("d15_only_gate", T=5, Hq=4, Hkv=2, D=3, dtype=F64, train=frozenset({"l"})),
        d("d16_only_q", train=frozenset({"q"})),
        d("d17_positional_noncausal", T=5, Hq=4, Hkv=2, D=3, causal=False, pass_causal="pos",
          dtype=F64),
        d("d18_default_causal", pass_causal="default"),
        d("d19_batch_eq_heads", B=4, T=3, Hq=4, Hkv=2, D=2, dtype=F64),
        d("d20_large_logits", T=6, Hq=4, Hkv=2, D=4, qk=30.0),
        d("d21_four_pairs", T=5, Hq=8, Hkv=4, D=3, dtype=F64),
        d("d22_batch1_g4", B=1, T=6, Hq=4, Hkv=1, D=4),
        d("d23_frozen_grad_mode", train=frozenset()),
        d("d24_head_dim1", T=6, Hq=2, Hkv=1, D=1, dtype=F64),
        d("d25_nonleaf", T=5, Hq=4, Hkv=2, D=3, dtype=F64, nonleaf=True, gate="mixed"),
        d("d26_long_grad_f64", T=70, Hq=4, Hkv=2, D=2, dtype=F64),
        d("d27_three_pairs_mixed_gates", T=5, Hq=6, Hkv=3, D=3, gate="mixed"),
        d("d28_one_pair_nograd", T=3, Hq=2, Hkv=1, D=2, causal=False, mode="no_grad"),
        d("d29_strided_inference_g4", T=7, Hq=8, Hkv=2, D=3, dtype=F64, layout="strided",
          mode="inference"),
        d("d31_expanded_batch", B=3, T=5, Hq=4, Hkv=2, D=3, dtype=F64, layout="expanded",
          train=frozenset({"l", "v"})),
        d("d30_only_v_noncausal", T=5, Hq=4, Hkv=2, D=3, causal=False, dtype=F64,
          train=frozenset({"v"})),
    ]
    return [replace(c, seed=zlib.crc32(c.name.encode())) for c in cases]


CASES = _cases()


def _reseed(offset: int) -> None:
    """Draw every case's inputs from other seeds (a robustness check of the tolerances)."""
    CASES[:] = [replace(c, seed=zlib.crc32(c.name.encode()) + offset) for c in CASES]
TYPICAL = {"gqa": "g01_typical", "diff": "d01_typical"}


# --------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------


def _master(case: Case) -> dict[str, torch.Tensor]:
    """float64 values of the inputs (before the cast to the case dtype)."""
    gen = torch.Generator().manual_seed(case.seed)
    rnd = lambda *shape: torch.randn(*shape, generator=gen, dtype=F64)  # noqa: E731
    B, T, Hq, Hkv, D = case.B, case.T, case.Hq, case.Hkv, case.D
    vals = {
        "q": rnd(B, T, Hq, D) * case.qk,
        "k": rnd(B, T, Hkv, D) * case.qk,
        "v": rnd(B, T, Hkv, D) + 0.5,
    }
    if case.fn == "diff":
        H = case.H
        if case.gate == "normal":
            lg = rnd(B, T, H) * 2.0
        elif case.gate == "sat1000":
            lg = torch.where(rnd(B, T, H) > 0, 1000.0, -1000.0) + rnd(B, T, H)
            lg.view(-1)[::3] = rnd(lg.numel())[: lg.view(-1)[::3].numel()]  # some ordinary gates
        elif case.gate == "pm100":
            lg = torch.where(rnd(B, T, H) > 0, 100.0, -100.0) + rnd(B, T, H)
            lg.view(-1)[::3] = rnd(lg.numel())[: lg.view(-1)[::3].numel()]
        elif case.gate == "mixed":
            lg = rnd(B, T, H) * 3.0
            lg.view(-1)[::4] = 0.0
        else:
            raise ValueError(case.gate)
        vals["l"] = lg
    vals["R"] = rnd(B, T, Hq if case.fn == "gqa" else case.H, D)
    if case.layout == "expanded":  # every sequence holds the values of the first one
        for n in ("q", "k", "v", "l"):
            if n in vals:
                vals[n] = vals[n][:1].expand(vals[n].shape).clone()
    return vals


def _strided_copy(x: torch.Tensor) -> torch.Tensor:
    """A non-contiguous view holding the values of x (reversed axes, every other row)."""
    shape = tuple(x.shape)
    buf = torch.zeros((2 * shape[-1],) + shape[:-1][::-1], dtype=x.dtype)
    view = buf[::2].permute(*reversed(range(len(shape))))
    view.copy_(x)
    return view


def _make_inputs(case: Case, master: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    names = ["q", "k", "v"] + (["l"] if case.fn == "diff" else [])
    trainable = set(case.train) if case.mode != "grad" else set(case.trains)
    out = {}
    for n in names:
        x = master[n].to(case.dtype)
        if case.layout == "strided":
            x = _strided_copy(x)
            if n in trainable:
                x.requires_grad_(True)
        elif case.layout == "expanded":  # a stride-0 batch axis (one buffer per sequence 0)
            x = x[:1].clone().expand(x.shape)
            if n in trainable:
                x.requires_grad_(True)
        elif n in trainable:
            x = x.clone().requires_grad_(True)
            if case.nonleaf:
                x = x * 1
        else:
            x = x.clone()
        out[n] = x
    return out


# --------------------------------------------------------------------------
# The float64 oracle (written from the task statement)
# --------------------------------------------------------------------------


def oracle_gqa(q, k, v, causal):
    B, T, Hq, D = q.shape
    G = Hq // k.shape[2]
    idx = torch.arange(Hq) // G  # query head h reads key/value head h // G
    kk, vv = k.index_select(2, idx), v.index_select(2, idx)
    s = torch.einsum("bthd,bshd->bhts", q, kk) / math.sqrt(D)
    if causal:
        t = torch.arange(T)
        s = s.masked_fill(t[None, :] > t[:, None], float("-inf"))  # key s > query t
    m = s.max(dim=-1, keepdim=True).values.detach()
    e = torch.exp(s - m)
    w = e / e.sum(dim=-1, keepdim=True)
    return torch.einsum("bhts,bshd->bthd", w, vv)


def oracle_diff(q, k, v, l, causal):
    A = oracle_gqa(q, k, v, causal)
    lam = torch.sigmoid(l)[..., None]
    return A[:, :, 0::2] - lam * A[:, :, 1::2]


class Oracle:
    """Values, autograd gradients and finite-difference directional derivatives."""

    def __init__(self, case: Case, inputs: dict[str, torch.Tensor], R: torch.Tensor):
        self.case = case
        self.x = {n: t.detach().to(F64).clone() for n, t in inputs.items()}
        self.R = R.to(F64)
        self.value = self._f(self.x).detach()
        self.grads: dict[str, torch.Tensor] = {}
        self.fd: dict[str, list[tuple[torch.Tensor, float]]] = {}
        if case.trains:
            leaves = {n: t.clone().requires_grad_(n in case.trains) for n, t in self.x.items()}
            out = self._f(leaves)
            names = sorted(case.trains)
            gs = torch.autograd.grad(out, [leaves[n] for n in names], self.R)
            self.grads = dict(zip(names, gs))
            gen = torch.Generator().manual_seed(case.seed + 7)
            for n in names:
                self.fd[n] = []
                for _ in range(2):
                    u = torch.randn(self.x[n].shape, generator=gen, dtype=F64)
                    self.fd[n].append((u, self._fd(n, u)))
                # the oracle's own gradient must agree with its finite differences
                for u, fd in self.fd[n]:
                    ad = float((self.grads[n] * u).sum())
                    scale = max(float(self.grads[n].norm()), 1e-3) * float(u.norm())
                    if abs(ad - fd) > 1e-6 * scale:
                        raise AssertionError(f"oracle FD mismatch in {case.name} for {n}: {ad} vs {fd}")

    def _f(self, x):
        c = self.case
        if c.fn == "gqa":
            return oracle_gqa(x["q"], x["k"], x["v"], c.eff_causal)
        return oracle_diff(x["q"], x["k"], x["v"], x["l"], c.eff_causal)

    def _fd(self, name: str, u: torch.Tensor) -> float:
        base = self.x[name]
        eps = 1e-7 * max(1.0, float(base.abs().max()))
        if name == "l":
            eps = 1e-6
        xp = dict(self.x, **{name: base + eps * u})
        xm = dict(self.x, **{name: base - eps * u})
        with torch.no_grad():
            lp = float((self._f(xp) * self.R).sum())
            lm = float((self._f(xm) * self.R).sum())
        return (lp - lm) / (2 * eps)


# --------------------------------------------------------------------------
# Running one file on one case
# --------------------------------------------------------------------------


@dataclass
class Run:
    case: Case
    tiers: list = field(default_factory=list)  # [(tier, message)]

    @property
    def first(self):
        return min((t for t, _ in self.tiers), default=None)

    def fail(self, tier: int, msg: str) -> None:
        self.tiers.append((tier, msg))


def _call(mod, case: Case, inp: dict[str, torch.Tensor]):
    args = [inp["q"], inp["k"], inp["v"]]
    fn = mod.gqa_attention
    if case.fn == "diff":
        args.append(inp["l"])
        fn = mod.diff_v2_attention
    if case.pass_causal == "kw":
        return fn(*args, causal=case.causal)
    if case.pass_causal == "pos":
        return fn(*args, case.causal)
    return fn(*args)


def _close(a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype, kind: str,
           floor: float = 1e-3) -> tuple[bool, str]:
    a = a.detach().to(F64)
    if not torch.isfinite(a).all():
        return False, "non-finite entries"
    scale = max(1.0, float(b.abs().max())) if b.numel() else 1.0
    if kind == "grad":  # relative to the gradient, with a floor set by the case's largest gradient
        scale = max(float(b.abs().max()), floor) if b.numel() else 1.0
    tol = {("value", F32): 2e-5, ("value", F64): 1e-10, ("grad", F32): 2e-3, ("grad", F64): 1e-7}[
        (kind, dtype)
    ]
    err = float((a - b).abs().max()) if b.numel() else 0.0
    return err <= tol * scale, f"max abs error {err:.3g} (allowed {tol * scale:.3g})"


def run_case(mod, case: Case, oracle_cache: dict) -> Run:
    run = Run(case)
    master = _master(case)
    inp = _make_inputs(case, master)
    snap = {n: (t.detach().clone(), t._version) for n, t in inp.items()}
    if case.name not in oracle_cache:
        oracle_cache[case.name] = Oracle(case, inp, master["R"].to(case.dtype))
    orc: Oracle = oracle_cache[case.name]
    expected = tuple(orc.value.shape)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            if case.mode == "no_grad":
                with torch.no_grad():
                    out = _call(mod, case, inp)
            elif case.mode == "inference":
                with torch.inference_mode():
                    out = _call(mod, case, inp)
            else:
                out = _call(mod, case, inp)
        except Exception as exc:  # noqa: BLE001
            run.fail(1, f"forward raised {type(exc).__name__}: {str(exc).splitlines()[0][:120]}")
            return run

        # ---- T1: the contract ----
        for n, t in inp.items():
            before, version = snap[n]
            if not torch.equal(t.detach(), before) or t._version != version:
                run.fail(1, f"input {n} modified in place")
        if not isinstance(out, torch.Tensor):
            run.fail(1, f"returned {type(out).__name__}, not one tensor")
            return run
        if tuple(out.shape) != expected:
            run.fail(1, f"shape {list(out.shape)} instead of {list(expected)}")
            return run
        if out.dtype != case.dtype or out.device.type != "cpu":
            run.fail(1, f"dtype/device {out.dtype}/{out.device} instead of {case.dtype}/cpu")
            return run
        if case.trains and not (out.requires_grad and out.grad_fn is not None):
            run.fail(1, "output detached from the autograd graph")

        # ---- T2: values ----
        ok, msg = _close(out, orc.value, case.dtype, "value")
        if not ok:
            run.fail(2, "values: " + msg)

        # ---- T3: gradients ----
        if case.trains and out.requires_grad:
            names = sorted(case.trains)
            R = master["R"].to(case.dtype)
            try:
                gs = torch.autograd.grad(out, [inp[n] for n in names], R, allow_unused=True)
            except Exception as exc:  # noqa: BLE001
                run.fail(3, f"backward raised {type(exc).__name__}: {str(exc).splitlines()[0][:100]}")
                return run
            floor = max([1e-3] + [1e-2 * float(orc.grads[m].abs().max()) for m in names])
            for n, g in zip(names, gs):
                if g is None:
                    run.fail(3, f"no gradient reaches {n}")
                    continue
                ok, msg = _close(g, orc.grads[n], case.dtype, "grad", floor)
                if not ok:
                    run.fail(3, f"grad of {n} vs oracle autograd: {msg}")
                    continue
                gd = g.detach().to(F64)
                if not torch.isfinite(gd).all():
                    continue
                for u, fd in orc.fd[n]:
                    ad = float((gd * u).sum())
                    scale = max(float(orc.grads[n].norm()), floor) * float(u.norm())
                    tol = 2e-3 if case.dtype == F32 else 1e-6
                    if abs(ad - fd) > tol * scale:
                        run.fail(3, f"grad of {n} vs finite differences: {ad:.6g} vs {fd:.6g}")
                        break
    return run


# --------------------------------------------------------------------------
# Where each wrong file is wrong (the labels' "where", as code)
# --------------------------------------------------------------------------


def _noncontig(case: Case) -> set:
    if case.layout == "contig":
        return set()
    inp = _make_inputs(case, _master(case))
    return {n for n, t in inp.items() if not t.is_contiguous()}


def _max_gate(case: Case) -> float:
    return float(_master(case)["l"].to(case.dtype).max()) if case.fn == "diff" else 0.0


THRESH = {F32: math.log(torch.finfo(F32).max), F64: math.log(torch.finfo(F64).max)}

WHERE = {
    "strided_inputs_copied_with_torch_tensor": lambda c: bool(
        c.mode == "grad" and (set(c.trains) & {"q", "k", "v"} & _noncontig(c))
    ),
    "kv_heads_repeated_per_pair": lambda c: c.G != 2,
    "bidirectional_mask_of_ones": lambda c: not c.eff_causal,
    "queries_scaled_through_data": lambda c: c.D >= 2 or c.layout == "expanded",
    "causal_mask_per_sequence": lambda c: c.eff_causal and c.B >= 2 and c.B != c.Hq,
    "stable_softmax_shift_in_place": lambda c: c.mode == "grad" and bool({"q", "k"} & set(c.trains)),
    "folded_kv_rows_tiled_with_repeat": lambda c: c.G >= 2 and c.B * c.Hkv >= 2,
    "scores_divided_by_scale": lambda c: c.D >= 2 and c.T >= 2,
    "causal_flag_not_passed_on": lambda c: c.fn == "diff" and not c.eff_causal and c.T >= 2,
    "output_heads_counted_on_keys": lambda c: c.fn == "diff" and c.G >= 4,
    "pair_loop_keeps_last_pair": lambda c: c.fn == "diff" and c.H >= 2,
    "gate_spread_by_half_index": lambda c: c.fn == "diff" and c.H != 2,
    "sigmoid_backward_without_grad_output": lambda c: c.fn == "diff" and "l" in c.trains,
    "sigmoid_as_one_minus_fraction": lambda c: c.fn == "diff" and "l" in c.trains
    and _max_gate(c) > THRESH[c.dtype],
}

FN_NAME = {"gqa": "gqa_attention", "diff": "diff_v2_attention"}


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _typical(runs: dict[str, Run]) -> str:
    bits = []
    for fn in ("gqa", "diff"):
        r = runs[TYPICAL[fn]]
        bits.append(f"{fn}:" + ("ok" if r.first is None else f"T{r.first}"))
    return " ".join(bits)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("-v", "--verbose", metavar="NAME", help="show every failing run of one file")
    ap.add_argument("--seed-offset", type=int, default=0, help="draw the inputs from other seeds")
    args = ap.parse_args()
    if args.seed_offset:
        _reseed(args.seed_offset)

    labels = json.loads((HERE / "labels.json").read_text())
    files = sorted(HERE.glob("correct/*.py")) + sorted(HERE.glob("wrong/*.py"))
    keys = [f"{p.parent.name}/{p.stem}" for p in files]
    assert sorted(keys) == sorted(labels), "labels.json and the files disagree"

    oracle_cache: dict = {}
    confirmed = 0
    rows = []
    targets = [("reference", REFERENCE)] + list(zip(keys, files))
    for key, path in targets:
        mod = _load(path, "v2_dew_" + key.replace("/", "_"))
        runs = {c.name: run_case(mod, c, oracle_cache) for c in CASES}
        failing = [r for r in runs.values() if r.tiers]
        typ = _typical(runs)
        if key == "reference" or labels[key]["correct"]:
            ok = not failing
            note = "passes all tiers" if ok else f"FAILS {len(failing)} runs, first: {failing[0].case.name} {failing[0].tiers[0][1]}"
            status = "PASS" if ok else "FAIL"
            label = "correct" if key != "reference" else "reference (sanity)"
        else:
            lab = labels[key]
            stem = key.split("/", 1)[1]
            where = WHERE[stem]
            tier = int(lab["tier"][1])
            fn = "gqa" if lab["function"] == "gqa_attention" else "diff"
            problems = []
            if not failing:
                problems.append("no run fails")
            first = min((r.first for r in failing), default=None)
            if failing and first != tier:
                problems.append(f"earliest failing tier T{first}, label T{tier}")
            outside = [r for r in failing if not where(r.case)]
            if outside:
                problems.append(
                    f"{len(outside)} failing runs outside WHERE, e.g. {outside[0].case.name}: {outside[0].tiers[0][1]}"
                )
            inside_pass = [r for r in runs.values() if where(r.case) and not r.tiers]
            if fn == "diff" and any(r.case.fn == "gqa" for r in failing):
                problems.append("gqa_attention fails although the label blames diff_v2_attention")
            if not any(r.case.fn == fn for r in failing):
                problems.append(f"{FN_NAME[fn]} never fails")
            ok = not problems
            witness = next((r for r in failing if r.first == tier), None)
            if ok:
                note = (
                    f"T{tier} {lab['component']}: fails {len(failing)}/{len(runs)} runs (all inside WHERE; "
                    f"{len(inside_pass)} WHERE runs pass); witness {witness.case.name}: "
                    f"{[m for t, m in witness.tiers if t == tier][0]}"
                )
            else:
                note = "; ".join(problems)
            status = "OK" if ok else "MISMATCH"
            label = f"{lab['function']} {lab['tier']} {lab['component']}"
        if key != "reference" and ok:
            confirmed += 1
        rows.append((status, key, label, typ, note))
        if args.verbose and key.endswith(args.verbose):
            print(f"== {key}")
            for r in runs.values():
                if r.tiers:
                    print(f"  {r.case.name:32s} {r.case.describe()}")
                    for t, m in r.tiers:
                        print(f"      T{t}: {m}")
            print()

    width = max(len(k) for _, k, _, _, _ in rows)
    print(f"{len(CASES)} cases ({sum(c.fn == 'gqa' for c in CASES)} gqa_attention, "
          f"{sum(c.fn == 'diff' for c in CASES)} diff_v2_attention); typical = "
          f"{TYPICAL['gqa']} / {TYPICAL['diff']}\n")
    for status, key, label, typ, note in rows:
        print(f"[{status:8s}] {key:{width}s}  {label:32s}  typical[{typ}]  {note}")
    ref_ok = rows[0][0] == "PASS"
    n_files = len(rows) - 1
    print()
    print(f"reference sanity row: {'passes all tiers' if ref_ok else 'FAILS'}")
    print(f"RESULT: {confirmed}/{n_files} labels confirmed")
    return 0 if (confirmed == n_files and ref_ok) else 1


if __name__ == "__main__":
    sys.exit(main())
