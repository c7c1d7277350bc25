"""Self-check of the v2_glaze corpus (memory-saving implementations of DIFF V2).

Run from the repository root, in one process:

    python tests/corpus/v2_glaze/verify.py              # table + RESULT line
    python tests/corpus/v2_glaze/verify.py -v NAME      # every failing run of one file
    python tests/corpus/v2_glaze/verify.py --seed-offset N   # same battery, other inputs

It imports every submission of this folder and the instructor reference and runs
each of them on a battery of cases (both functions; T from 1 to 200, past every
block, chunk, split and tile size used by the files; strided and expanded
inputs; grad mode, torch.no_grad() and torch.inference_mode(); different sets of
trainable inputs; large logits; saturated gates). Every run is compared with an
independent float64 oracle written here from the task statement:

    gqa_attention:     out[b, t, h] = sum_s softmax_s(q[b,t,h] . k[b,s,h//G] / sqrt(D) + M[t,s]) v[b,s,h//G]
    diff_v2_attention: out = A[:, :, 0::2] - sigmoid(lambda_logits)[..., None] * A[:, :, 1::2]

Tiers of a run:
  T1  contract: no exception in the forward, one tensor, right shape, dtype and
      device, inputs unchanged (values and version counters), output attached to
      the autograd graph (requires_grad and a grad_fn) when an input trains;
  T2  forward values against the oracle;
  T3  gradients of every trainable input (torch.autograd.grad, or .backward() in
      the cases marked so): present, finite, equal to the oracle's autograd
      gradient and to float64 central finite differences of the oracle.

A correct file (and the reference) must pass every run. A wrong file's label is
confirmed when: some run fails; the earliest tier failed on any run is the
label's tier; every failing run lies inside the file's WHERE predicate below
(the label's "where", as code) and every run outside it passes; the labelled
function fails (a gqa_attention bug may also show in diff_v2_attention, which
calls it; a diff_v2_attention bug never shows in gqa_attention).
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

sys.dont_write_bytecode = True

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
REFERENCE = REPO / "reference" / "diff_v2_attention.py"

F32, F64 = torch.float32, torch.float64
QKV = frozenset({"q", "k", "v"})
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
    how: str = "kw"  # causal passed by keyword ("kw"), positionally ("pos") or left out ("default")
    dtype: torch.dtype = F32
    layout: str = "contig"  # "contig", "strided" (permuted + stepped views) or "expanded" (stride-0 batch)
    nonleaf: bool = False
    train: frozenset = ALL
    mode: str = "grad"  # "grad", "no_grad", "inference"
    qk: float = 1.0
    gate: str = "normal"  # "normal", "sat1000", "pm100", "mixed"
    bwd: str = "grad"  # "grad": torch.autograd.grad; "backward": out.backward() and .grad
    seed: int = 0

    @property
    def eff_causal(self) -> bool:
        return True if self.how == "default" else self.causal

    @property
    def G(self) -> int:
        return self.Hq // self.Hkv

    @property
    def H(self) -> int:
        return self.Hq // 2

    @property
    def trains(self) -> frozenset:
        names = QKV | ({"l"} if self.fn == "diff" else set())
        return frozenset(self.train) & names if self.mode == "grad" else frozenset()

    def describe(self) -> str:
        bits = [
            f"{self.fn} B={self.B} T={self.T} Hq={self.Hq} Hkv={self.Hkv} D={self.D}",
            f"causal={self.eff_causal}({self.how})",
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
        if self.bwd != "grad":
            bits.append("via .backward()")
        return " ".join(bits)


def _cases() -> list[Case]:
    g = lambda name, **kw: Case(name, "gqa", **kw)  # noqa: E731
    d = lambda name, **kw: Case(name, "diff", **kw)  # noqa: E731
    one = lambda *names: frozenset(names)  # noqa: E731
    cases = [
        # ---------------- gqa_attention, short sequences ----------------
        g("g01_typical"),
        g("g02_single_token", B=1, T=1, Hq=1, Hkv=1, D=1, dtype=F64),
        g("g03_mha_noncausal", T=5, Hq=3, Hkv=3, D=4, causal=False, dtype=F64),
        g("g04_mqa_g4", T=6, Hq=4, Hkv=1, D=3, dtype=F64),
        g("g05_g3", B=3, T=7, Hq=6, Hkv=2, D=5),
        g("g06_strided", T=6, Hq=6, Hkv=3, D=4, dtype=F64, layout="strided"),
        g("g07_large_logits", T=6, Hq=4, Hkv=2, D=4, qk=30.0),
        g("g08_inference_noncausal", T=9, Hq=4, Hkv=4, D=6, causal=False, mode="inference"),
        g("g09_only_k", T=4, Hq=4, Hkv=2, D=3, dtype=F64, train=one("k")),
        g("g10_only_v_noncausal", T=4, Hq=4, Hkv=2, D=3, dtype=F64, causal=False, train=one("v")),
        g("g11_only_q", train=one("q")),
        g("g12_nonleaf", T=5, Hq=4, Hkv=2, D=3, dtype=F64, nonleaf=True),
        g("g13_expanded_only_v", B=3, T=5, Hq=4, Hkv=2, D=3, dtype=F64, layout="expanded",
          train=one("v")),
        g("g14_expanded_nograd", B=3, T=4, Hq=2, Hkv=1, D=2, layout="expanded", mode="no_grad"),
        g("g15_positional_noncausal", causal=False, how="pos", dtype=F64, D=3),
        g("g16_default_causal", how="default"),
        g("g17_frozen_grad_mode", train=frozenset()),
        g("g18_nograd_small", T=5, Hq=4, Hkv=2, D=4, dtype=F64, mode="no_grad"),
        g("g19_single_token_nograd", B=2, T=1, Hq=2, Hkv=2, D=2, causal=False, mode="no_grad",
          dtype=F64),
        g("g20_single_token_grad", B=1, T=1, Hq=4, Hkv=2, D=4, causal=False, dtype=F64),
        g("g21_large_logits_f64", T=7, Hq=4, Hkv=2, D=4, qk=40.0, causal=False, dtype=F64),
        # ---------------- gqa_attention, past the block sizes ----------------
        g("g30_T32_boundary", B=1, T=32, Hq=2, Hkv=1, D=4, dtype=F64),
        g("g31_T33", B=2, T=33, Hq=2, Hkv=1, D=2, dtype=F64),
        g("g32_T40", T=40, Hq=4, Hkv=2, D=8),
        g("g33_T40_nograd_noncausal", T=40, Hq=4, Hkv=2, D=4, causal=False, dtype=F64,
          mode="no_grad"),
        g("g34_T64_boundary", T=64, Hq=4, Hkv=2, D=4),
        g("g35_T70", T=70, Hq=4, Hkv=2, D=4, dtype=F64),
        g("g36_T70_noncausal_only_v", T=70, Hq=4, Hkv=2, D=8, causal=False, train=one("v")),
        g("g37_T70_large_logits", T=70, Hq=4, Hkv=2, D=4, qk=30.0),
        g("g38_T70_nograd", T=70, Hq=4, Hkv=2, D=4, mode="no_grad"),
        g("g39_T96_noncausal_only_v", B=1, T=96, Hq=4, Hkv=2, D=4, causal=False, dtype=F64,
          train=one("v")),
        g("g40_T100_inference", T=100, Hq=6, Hkv=3, D=4, mode="inference"),
        g("g41_T128_nograd_mqa", T=128, Hq=4, Hkv=1, D=3, dtype=F64, mode="no_grad"),
        g("g42_T130", B=1, T=130, Hq=2, Hkv=1, D=4, dtype=F64),
        g("g43_T130_strided_only_q", T=130, Hq=4, Hkv=2, D=8, causal=False, layout="strided",
          train=one("q")),
        g("g44_T150_only_k_nonleaf", B=1, T=150, Hq=4, Hkv=2, D=4, dtype=F64, nonleaf=True,
          train=one("k")),
        g("g45_T192_mha", B=1, T=192, Hq=2, Hkv=2, D=4),
        g("g46_T200_expanded_noncausal", B=2, T=200, Hq=4, Hkv=2, D=4, causal=False, dtype=F64,
          layout="expanded"),
        g("g47_T70_backward", T=70, Hq=4, Hkv=2, D=4, dtype=F64, bwd="backward"),
        g("g48_T136_frozen_grad_mode", B=1, T=136, Hq=2, Hkv=1, D=4, dtype=F64,
          train=frozenset()),
        # ---------------- diff_v2_attention, short sequences ----------------
        d("d01_typical"),
        d("d02_one_pair", T=4, Hq=2, Hkv=1, D=3, dtype=F64),
        d("d03_g4", T=5, Hq=8, Hkv=2, D=4, dtype=F64),
        d("d04_three_pairs_noncausal", T=5, Hq=6, Hkv=3, D=4, causal=False, dtype=F64),
        d("d05_mqa_g6", T=5, Hq=6, Hkv=1, D=4),
        d("d06_saturated_f32", gate="sat1000"),
        d("d07_saturated_f64", T=4, Hq=4, Hkv=2, D=3, dtype=F64, gate="sat1000"),
        d("d08_gates_pm100", T=4, Hq=4, Hkv=2, D=3, gate="pm100"),
        d("d09_single_token", T=1, Hq=4, Hkv=2, D=3, dtype=F64),
        d("d10_strided", T=6, Hq=4, Hkv=2, D=3, dtype=F64, layout="strided"),
        d("d11_nograd_g4", T=6, Hq=8, Hkv=2, D=4, dtype=F64, mode="no_grad"),
        d("d12_inference_noncausal", T=6, Hq=6, Hkv=3, D=4, causal=False, mode="inference"),
        d("d13_only_gate", T=5, Hq=4, Hkv=2, D=3, dtype=F64, train=one("l")),
        d("d14_only_q", train=one("q")),
        d("d15_positional_noncausal", T=5, Hq=4, Hkv=2, D=3, causal=False, how="pos", dtype=F64),
        d("d16_default_causal", how="default"),
        d("d17_frozen_grad_mode", train=frozenset()),
        d("d18_expanded", B=3, T=5, Hq=4, Hkv=2, D=3, dtype=F64, layout="expanded",
          train=one("l", "v")),
        d("d19_nonleaf_mixed_gates", T=5, Hq=4, Hkv=2, D=3, dtype=F64, nonleaf=True, gate="mixed"),
        d("d20_single_token_nograd", B=1, T=1, Hq=2, Hkv=1, D=2, causal=False, mode="no_grad"),
        d("d21_large_logits", T=6, Hq=4, Hkv=2, D=4, qk=30.0),
        d("d22_four_pairs_only_v", T=5, Hq=8, Hkv=4, D=3, dtype=F64, causal=False,
          train=one("v")),
        # ---------------- diff_v2_attention, past the block sizes ----------------
        d("d30_T40", T=40, Hq=4, Hkv=2, D=8),
        d("d31_T40_noncausal", T=40, Hq=4, Hkv=2, D=4, causal=False, dtype=F64),
        d("d32_T70_only_gate", T=70, Hq=4, Hkv=2, D=4, dtype=F64, train=one("l")),
        d("d33_T70_nograd_noncausal", T=70, Hq=4, Hkv=2, D=4, causal=False, mode="no_grad"),
        d("d34_T100_g4_strided", B=1, T=100, Hq=8, Hkv=2, D=4, dtype=F64, layout="strided"),
        d("d35_T130", B=1, T=130, Hq=4, Hkv=2, D=4),
        d("d36_T140_noncausal_only_v", B=1, T=140, Hq=4, Hkv=1, D=3, causal=False, dtype=F64,
          train=one("v")),
        d("d37_T150_only_gate", B=1, T=150, Hq=2, Hkv=1, D=4, dtype=F64, train=one("l")),
        d("d38_T70_inference", T=70, Hq=4, Hkv=2, D=4, mode="inference"),
        d("d39_T128_saturated", B=1, T=128, Hq=4, Hkv=2, D=4, gate="pm100"),
        d("d40_T192_nograd_mqa", T=192, Hq=4, Hkv=1, D=3, dtype=F64, mode="no_grad"),
        d("d41_T70_backward", T=70, Hq=4, Hkv=2, D=4, dtype=F64, bwd="backward", gate="mixed"),
        d("d42_T64_boundary", B=1, T=64, Hq=4, Hkv=2, D=4, dtype=F64),
        d("d43_T70_frozen_grad_mode", B=1, T=70, Hq=2, Hkv=1, D=4, dtype=F64, train=frozenset()),
    ]
    return [replace(c, seed=zlib.crc32(c.name.encode())) for c in cases]


CASES = _cases()
TYPICAL = {"gqa": "g01_typical", "diff": "d01_typical"}


def _reseed(offset: int) -> None:
    CASES[:] = [replace(c, seed=zlib.crc32(c.name.encode()) + offset) for c in CASES]


# --------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------


def _master(case: Case) -> dict[str, torch.Tensor]:
    """float64 values of the inputs and of the upstream gradient R."""
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
        elif case.gate in ("sat1000", "pm100"):
            big = 1000.0 if case.gate == "sat1000" else 100.0
            lg = torch.where(rnd(B, T, H) > 0, big, -big) + rnd(B, T, H)
            flat = lg.view(-1)
            flat[::3] = rnd(flat[::3].numel())  # some ordinary gates among the saturated ones
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


def _strided(x: torch.Tensor) -> torch.Tensor:
    """A non-contiguous view holding the values of x: reversed axes, every other row of a buffer."""
    shape = tuple(x.shape)
    buf = torch.zeros((2 * shape[-1],) + shape[:-1][::-1], dtype=x.dtype)
    view = buf[::2].permute(*reversed(range(len(shape))))
    view.copy_(x)
    return view


def _inputs(case: Case, master: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    names = ["q", "k", "v"] + (["l"] if case.fn == "diff" else [])
    trainable = case.trains
    out = {}
    for n in names:
        x = master[n].to(case.dtype)
        if case.layout == "strided":
            x = _strided(x)
        elif case.layout == "expanded":
            x = x[:1].clone().expand(x.shape)
        else:
            x = x.clone()
        if n in trainable:
            x.requires_grad_(True)
            if case.nonleaf:
                x = x * 1
        out[n] = x
    return out


# --------------------------------------------------------------------------
# Oracle (float64, written from the task statement)
# --------------------------------------------------------------------------


def oracle_gqa(q, k, v, causal):
    B, T, Hq, D = q.shape
    G = Hq // k.shape[2]
    kv_head = torch.arange(Hq) // G
    kk, vv = k.index_select(2, kv_head), v.index_select(2, kv_head)
    s = torch.einsum("bthd,bshd->bhts", q, kk) / math.sqrt(D)
    if causal:
        t = torch.arange(T)
        s = s.masked_fill(t[None, :] > t[:, None], float("-inf"))
    w = torch.softmax(s, dim=-1)
    return torch.einsum("bhts,bshd->bthd", w, vv)


def oracle_diff(q, k, v, l, causal):
    A = oracle_gqa(q, k, v, causal)
    return A[:, :, 0::2] - torch.sigmoid(l)[..., None] * A[:, :, 1::2]


class Oracle:
    def __init__(self, case: Case, inputs: dict[str, torch.Tensor], R: torch.Tensor):
        self.case = case
        self.x = {n: t.detach().to(F64).clone() for n, t in inputs.items()}
        self.R = R.to(F64)
        with torch.no_grad():
            self.value = self._f(self.x)
            kv_head = torch.arange(case.Hq) // case.G
            logits = torch.einsum("bthd,bshd->bhts", self.x["q"], self.x["k"].index_select(2, kv_head))
            # float32 rounds a logit of size L by about L * 6e-8: the float32 tolerances grow with it
            self.max_logit = float(logits.abs().max()) / math.sqrt(case.D)
        self.grads: dict[str, torch.Tensor] = {}
        self.fd: dict[str, list] = {}
        if not case.trains:
            return
        leaves = {n: t.clone().requires_grad_(n in case.trains) for n, t in self.x.items()}
        names = sorted(case.trains)
        gs = torch.autograd.grad(self._f(leaves), [leaves[n] for n in names], self.R)
        self.grads = dict(zip(names, gs))
        gen = torch.Generator().manual_seed(case.seed + 11)
        for n in names:
            self.fd[n] = []
            for _ in range(2):
                u = torch.randn(self.x[n].shape, generator=gen, dtype=F64)
                fd = self._fd(n, u)
                ad = float((self.grads[n] * u).sum())
                scale = max(float(self.grads[n].norm()), 1e-3) * float(u.norm())
                if abs(ad - fd) > 1e-6 * scale:
                    raise AssertionError(f"oracle gradient disagrees with FD in {case.name}/{n}")
                self.fd[n].append((u, fd))

    def _f(self, x):
        c = self.case
        if c.fn == "gqa":
            return oracle_gqa(x["q"], x["k"], x["v"], c.eff_causal)
        return oracle_diff(x["q"], x["k"], x["v"], x["l"], c.eff_causal)

    def _fd(self, name: str, u: torch.Tensor) -> float:
        base = self.x[name]
        eps = 1e-6 if name == "l" else 1e-7 * max(1.0, float(base.abs().max()))
        with torch.no_grad():
            up = float((self._f(dict(self.x, **{name: base + eps * u})) * self.R).sum())
            dn = float((self._f(dict(self.x, **{name: base - eps * u})) * self.R).sum())
        return (up - dn) / (2 * eps)


# --------------------------------------------------------------------------
# One run
# --------------------------------------------------------------------------


@dataclass
class Run:
    case: Case
    fails: list = field(default_factory=list)  # (tier, message)

    @property
    def first(self):
        return min((t for t, _ in self.fails), default=None)

    def fail(self, tier: int, msg: str) -> None:
        self.fails.append((tier, msg))


def _call(mod, case: Case, x: dict[str, torch.Tensor]):
    args = [x["q"], x["k"], x["v"]]
    fn = mod.gqa_attention
    if case.fn == "diff":
        args.append(x["l"])
        fn = mod.diff_v2_attention
    if case.how == "kw":
        return fn(*args, causal=case.causal)
    if case.how == "pos":
        return fn(*args, case.causal)
    return fn(*args)


def _close(got: torch.Tensor, want: torch.Tensor, dtype, kind: str, floor: float = 1e-3,
           max_logit: float = 0.0):
    got = got.detach().to(F64)
    if not torch.isfinite(got).all():
        return False, "non-finite entries"
    if kind == "value":
        scale = max(1.0, float(want.abs().max()))
    else:
        scale = max(float(want.abs().max()), floor)
    tol = {("value", F32): 2e-5, ("value", F64): 1e-10, ("grad", F32): 2e-3, ("grad", F64): 1e-7}[
        (kind, dtype)
    ]
    if dtype == F32:
        tol = max(tol, (1e-7 if kind == "value" else 1e-6) * max_logit)
    err = float((got - want).abs().max())
    return err <= tol * scale, f"max abs error {err:.3g} (allowed {tol * scale:.3g})"


def run_case(mod, case: Case, cache: dict) -> Run:
    run = Run(case)
    master = _master(case)
    x = _inputs(case, master)
    before = {n: (t.detach().clone(), t._version) for n, t in x.items()}
    R = master["R"].to(case.dtype)
    if case.name not in cache:
        cache[case.name] = Oracle(case, x, master["R"])
    orc: Oracle = cache[case.name]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            if case.mode == "no_grad":
                with torch.no_grad():
                    out = _call(mod, case, x)
            elif case.mode == "inference":
                with torch.inference_mode():
                    out = _call(mod, case, x)
            else:
                out = _call(mod, case, x)
        except Exception as exc:  # noqa: BLE001
            run.fail(1, f"forward raised {type(exc).__name__}: {str(exc).splitlines()[0][:110]}")
            return run

        # ---- T1 ----
        for n, t in x.items():
            vals, version = before[n]
            if t._version != version or not torch.equal(t.detach(), vals):
                run.fail(1, f"input {n} modified")
        if not isinstance(out, torch.Tensor):
            run.fail(1, f"returned {type(out).__name__}, not one tensor")
            return run
        if tuple(out.shape) != tuple(orc.value.shape):
            run.fail(1, f"shape {list(out.shape)} instead of {list(orc.value.shape)}")
            return run
        if out.dtype != case.dtype or out.device.type != "cpu":
            run.fail(1, f"dtype/device {out.dtype}/{out.device}")
            return run
        if case.trains and not (out.requires_grad and out.grad_fn is not None):
            run.fail(1, "output detached from the autograd graph")

        # ---- T2 ----
        ok, msg = _close(out, orc.value, case.dtype, "value", max_logit=orc.max_logit)
        if not ok:
            run.fail(2, "values: " + msg)

        # ---- T3 ----
        if case.trains and out.requires_grad:
            names = sorted(case.trains)
            try:
                if case.bwd == "backward":
                    out.backward(R)
                    grads = [x[n].grad for n in names]
                else:
                    grads = torch.autograd.grad(out, [x[n] for n in names], R, allow_unused=True)
            except Exception as exc:  # noqa: BLE001
                run.fail(3, f"backward raised {type(exc).__name__}: {str(exc).splitlines()[0][:100]}")
                return run
            floor = max([1e-3] + [1e-2 * float(orc.grads[n].abs().max()) for n in names])
            for n, g in zip(names, grads):
                if g is None:
                    run.fail(3, f"no gradient reaches {n}")
                    continue
                ok, msg = _close(g, orc.grads[n], case.dtype, "grad", floor, orc.max_logit)
                if not ok:
                    run.fail(3, f"gradient of {n}: {msg}")
                    continue
                gd = g.detach().to(F64)
                tol = max(2e-3, 1e-6 * orc.max_logit) if case.dtype == F32 else 1e-6
                for u, fd in orc.fd[n]:
                    ad = float((gd * u).sum())
                    scale = max(float(orc.grads[n].norm()), floor) * float(u.norm())
                    if abs(ad - fd) > tol * scale:
                        run.fail(3, f"gradient of {n} vs finite differences: {ad:.6g} vs {fd:.6g}")
                        break
    return run


# --------------------------------------------------------------------------
# Where each wrong file is wrong (the labels' "where", as code)
# --------------------------------------------------------------------------


def _graph(c: Case) -> bool:
    """gqa_attention builds a graph: grad mode and one of q, k, v trains."""
    return bool(c.trains & QKV)


WHERE = {
    "checkpointed_row_chunks_free_widened_kv": lambda c: c.T > 64 and _graph(c),
    "key_blocks_narrowed_to_block_end": lambda c: c.T > 32,
    "diagonal_tile_mask_built_once": lambda c: c.eff_causal and c.T > 64 and c.T % 64 != 0,
    "row_chunks_copied_into_output_without_grad": lambda c: c.T > 128 and _graph(c),
    "split_keys_normalised_partials": lambda c: c.eff_causal and c.T > 64,
    "row_outputs_written_into_value_copy": lambda c: not _graph(c) and c.T > 32,
    "score_buffer_shared_by_row_chunks": lambda c: c.T > 64 and bool(c.trains & {"q", "k"}),
    "streaming_function_lse_from_last_block": lambda c: c.T > 32 and _graph(c),
    "padded_tiles_trimmed_with_resize": lambda c: not _graph(c) and c.B >= 2 and c.T % 64 != 0,
    "long_sequences_attended_in_query_chunks": lambda c: c.fn == "diff" and c.T > 64,
    "reentrant_checkpoint_with_causal_keyword": lambda c: c.fn == "diff" and c.T > 128
    and _graph(c),
    "checkpointed_gating_in_place": lambda c: c.fn == "diff" and c.T > 64 and bool(c.trains),
    "pair_kernel_masks_aligned_key_block": lambda c: c.fn == "diff" and c.eff_causal
    and c.T > 32,
    "pair_kernel_accumulators_started_together": lambda c: c.fn == "diff" and not c.trains
    and c.T >= 2,
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
    return " ".join(
        f"{fn}:" + ("ok" if runs[name].first is None else f"T{runs[name].first}")
        for fn, name in TYPICAL.items()
    )


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("-v", "--verbose", metavar="NAME")
    ap.add_argument("--seed-offset", type=int, default=0)
    args = ap.parse_args()
    if args.seed_offset:
        _reseed(args.seed_offset)

    labels = json.loads((HERE / "labels.json").read_text())
    files = sorted(HERE.glob("correct/*.py")) + sorted(HERE.glob("wrong/*.py"))
    keys = [f"{p.parent.name}/{p.stem}" for p in files]
    assert sorted(keys) == sorted(labels), "labels.json and the files disagree"
    assert sorted(WHERE) == sorted(k.split("/")[1] for k in keys if k.startswith("wrong/"))

    cache: dict = {}
    rows = []
    confirmed = 0
    for key, path in [("reference", REFERENCE)] + list(zip(keys, files)):
        mod = _load(path, "v2_glaze_" + key.replace("/", "_"))
        runs = {c.name: run_case(mod, c, cache) for c in CASES}
        failing = [r for r in runs.values() if r.fails]
        if key == "reference" or labels[key]["correct"]:
            ok = not failing
            note = "passes every run" if ok else (
                f"FAILS {len(failing)} runs, e.g. {failing[0].case.name}: {failing[0].fails[0][1]}"
            )
            status = "PASS" if ok else "FAIL"
            what = "reference (sanity)" if key == "reference" else "correct"
        else:
            lab = labels[key]
            where = WHERE[key.split("/", 1)[1]]
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
                    f"{len(outside)} failing runs outside WHERE, e.g. {outside[0].case.name}: "
                    f"{outside[0].fails[0][1]}"
                )
            if fn == "diff" and any(r.case.fn == "gqa" for r in failing):
                problems.append("gqa_attention fails although the label blames diff_v2_attention")
            if not any(r.case.fn == fn for r in failing):
                problems.append(f"{FN_NAME[fn]} never fails")
            ok = not problems
            inside = [r for r in runs.values() if where(r.case)]
            witness = next((r for r in failing if r.first == tier), None)
            if ok:
                msg = next(m for t, m in witness.fails if t == tier)
                note = (
                    f"fails {len(failing)}/{len(runs)} (WHERE holds {len(inside)}); "
                    f"witness {witness.case.name}: {msg}"
                )
            else:
                note = "; ".join(problems)
            status = "OK" if ok else "MISMATCH"
            what = f"{lab['function']} {lab['tier']} {lab['component']}"
        if key != "reference" and ok:
            confirmed += 1
        rows.append((status, key, what, _typical(runs), note))
        if args.verbose and key.endswith(args.verbose):
            print(f"== {key}")
            for r in runs.values():
                if r.fails:
                    print(f"  {r.case.name:34s} {r.case.describe()}")
                    for t, m in r.fails:
                        print(f"      T{t}: {m}")
            print()

    width = max(len(r[1]) for r in rows)
    n_g = sum(c.fn == "gqa" for c in CASES)
    print(f"{len(CASES)} cases ({n_g} gqa_attention, {len(CASES) - n_g} diff_v2_attention); "
          f"typical = {TYPICAL['gqa']} / {TYPICAL['diff']}\n")
    for status, key, what, typ, note in rows:
        print(f"[{status:8s}] {key:{width}s}  {what:32s}  typical[{typ}]  {note}")
    ref_ok = rows[0][0] == "PASS"
    print()
    print(f"reference sanity row: {'passes every run' if ref_ok else 'FAILS'}")
    print(f"RESULT: {confirmed}/{len(rows) - 1} labels confirmed")
    return 0 if ref_ok and confirmed == len(rows) - 1 else 1


if __name__ == "__main__":
    sys.exit(main())
