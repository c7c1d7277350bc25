"""Sanity check of the submission corpus, independent of the grader.

Run ``python tests/corpus/selfcheck.py``. Every file in ``correct/`` must pass
all three tiers, and every wrong submission (the mutants and ``wrong/*.py``)
must first fail exactly the tier it claims: T1 contract (types, shapes,
dtypes, strided inputs, no mutation, graph attached), T2 forward values, T3
gradients. The truth is a float64 row-by-row softmax written here, so a bug
shared by the corpus files cannot hide itself. Exits 1 on any disagreement.
"""

from __future__ import annotations

import math
import sys
import warnings
from pathlib import Path

import torch

try:  # imported as part of the tests package
    from .mutants import MUTANTS, mutant_source
except ImportError:  # run as a script from any folder
    from mutants import MUTANTS, mutant_source

HERE = Path(__file__).resolve().parent


def true_lambda(q1, k1, q2, k2, lambda_init=0.2):
    q1, k1, q2, k2 = (x.double() for x in (q1, k1, q2, k2))
    return torch.exp((q1 * k1).sum()) - torch.exp((q2 * k2).sum()) + lambda_init


def true_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    q1, k1, q2, k2, value = (x.double() for x in (q1, k1, q2, k2, value))
    d, t = q1.shape[-1], q1.shape[-2]
    out = []
    for i in range(t):
        keys = slice(0, i + 1 if causal else t)
        rows = []
        for q, k in ((q1, k1), (q2, k2)):
            s = (k[..., keys, :] * q[..., i : i + 1, :]).sum(-1) / math.sqrt(d)
            e = torch.exp(s - s.max(-1, keepdim=True).values)
            rows.append(e / e.sum(-1, keepdim=True))
        p = rows[0] - coefficient * rows[1]
        out.append((p.unsqueeze(-1) * value[..., keys, :]).sum(-2))
    return torch.stack(out, -2)


def make_inputs(dtype, layout="plain", logit_scale=1.0, shape=(2, 3, 5, 4)):
    """Q/K [B,H,T,D] and V [B,H,T,2D]; layouts 'plain', 'transposed', 'permuted'."""
    b, h, t, d = shape
    amp = math.sqrt(logit_scale)  # the scaled logits then spread about +-logit_scale

    def qk():
        if layout == "transposed":
            return torch.randn(b, h, d, t, dtype=dtype).mul(amp).transpose(-1, -2)
        if layout == "permuted":
            return torch.randn(b, t, h, d, dtype=dtype).mul(amp).permute(0, 2, 1, 3)
        return torch.randn(b, h, t, d, dtype=dtype).mul(amp)

    qs = [qk() for _ in range(4)]
    v = torch.randn(b, h, t, 4 * d, dtype=dtype)
    v = v[..., ::2] if layout != "plain" else v[..., : 2 * d].contiguous()
    return qs + [v]


def close(got, want, dtype):
    rtol, atol = (2e-4, 2e-4) if dtype == torch.float32 else (1e-9, 1e-9)
    return bool(torch.allclose(got.double(), want, rtol=rtol, atol=atol * (1 + want.abs().max())))


def leaves(xs):
    return [x.detach().clone().requires_grad_(True) for x in xs]


def check_t1(ns):
    lam, att = ns["differential_lambda"], ns["differential_attention"]
    for dtype in (torch.float32, torch.float64):
        vecs = leaves(torch.randn(4, 7, dtype=dtype).unbind(0))
        out = lam(*[v[::2] for v in vecs])
        if not (type(out) is torch.Tensor and out.shape == () and out.dtype == dtype):
            return f"lambda contract ({dtype})"
        if not out.requires_grad:
            return "lambda is not attached to the graph"
        for layout in ("plain", "transposed", "permuted"):
            for coef in (0.5, 1, torch.tensor(0.3, dtype=dtype, requires_grad=True)):
                xs = make_inputs(dtype, layout)
                before = [(x.clone(), x._version) for x in xs]
                out = att(*xs, coef)  # inputs without grad: in-place changes succeed silently
                ok = type(out) is torch.Tensor and out.shape == xs[4].shape and out.dtype == dtype
                if not ok:
                    return f"attention contract ({dtype}, {layout}, {type(coef).__name__})"
                if any(x._version != v or not torch.equal(x, c) for x, (c, v) in zip(xs, before)):
                    return "an input was modified"
                out = att(*leaves(xs), coef)
                if not (out.requires_grad and out.grad_fn is not None):
                    return "output is not attached to the graph"
    return None


def check_t2(ns):
    lam, att = ns["differential_lambda"], ns["differential_attention"]
    for dtype in (torch.float32, torch.float64):
        big = torch.linspace(0.2, 0.6, 6, dtype=dtype)
        fixed = [(big, big, -big, big), (-big, big, big, big)]
        for vecs in [(torch.randn(4, 6, dtype=dtype) * 0.5).unbind(0), *fixed]:
            # the last two give lambda of about 2.8 and -2.4, outside [0, 1]
            if not close(lam(*vecs), true_lambda(*vecs), dtype):
                return "lambda value (default lambda_init)"
            init = 0.8 - 0.6 * math.exp(-0.3 * 3)
            if not close(lam(*vecs, lambda_init=init), true_lambda(*vecs, init), dtype):
                return "lambda value (explicit lambda_init)"
        for layout in ("plain", "permuted"):
            for logit_scale in (1.0, 300.0):
                xs = make_inputs(dtype, layout, logit_scale)
                for coef in (0.37, -0.4, 1.3):
                    for causal in (True, False):
                        got = att(*xs, coef, causal=causal)
                        if not close(got, true_attention(*xs, coef, causal), dtype):
                            where = f"{dtype}, {layout}, scale {logit_scale}, causal={causal}"
                            return f"attention values ({where})"
                    if not close(att(*xs, coef), true_attention(*xs, coef), dtype):
                        return "attention values with the default causal argument"
    return None


def check_t3(ns):
    lam, att = ns["differential_lambda"], ns["differential_attention"]
    for dtype in (torch.float32, torch.float64):
        vecs = torch.randn(4, 5, dtype=dtype).unbind(0)
        got_in, want_in = leaves(vecs), leaves([v.double() for v in vecs])
        lam(*got_in).backward()
        true_lambda(*want_in).backward()
        if any(g.grad is None or not close(g.grad, w.grad, dtype) for g, w in zip(got_in, want_in)):
            return "lambda gradients"
        for layout in ("plain", "transposed"):
            for causal in (True, False):
                xs = make_inputs(dtype, layout)
                got_in = leaves(xs) + [torch.tensor(0.6, dtype=dtype, requires_grad=True)]
                want_in = leaves([x.double() for x in got_in])
                cot = torch.randn(xs[4].shape, dtype=torch.float64)
                (att(*got_in, causal=causal).double() * cot).sum().backward()
                (true_attention(*want_in, causal=causal) * cot).sum().backward()
                names = ("q1", "k1", "q2", "k2", "value", "coefficient")
                for name, g, w in zip(names, got_in, want_in):
                    if g.grad is None or not close(g.grad, w.grad, dtype):
                        return f"gradient of {name} ({dtype}, {layout}, causal={causal})"
    return None


def first_failing_tier(source: str, name: str) -> tuple[str | None, str]:
    ns: dict = {"__name__": f"submission_{name}"}
    exec(compile(source, name, "exec"), ns)
    for tier, check in (("T1", check_t1), ("T2", check_t2), ("T3", check_t3)):
        try:
            why = check(ns)
        except Exception as exc:  # a crash fails the tier that provoked it
            why = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        if why:
            return tier, why
    return None, "all tiers pass"


def main() -> int:
    torch.manual_seed(0)
    warnings.simplefilter("ignore")  # e.g. float() of a tensor that requires grad
    cases = [(p.name, p.read_text(), None) for p in sorted((HERE / "correct").glob("*.py"))]
    cases += [(f"mutant:{m.name}", mutant_source(m), m.tier) for m in MUTANTS]
    assert len({m.name for m in MUTANTS}) == len(MUTANTS), "mutant names must be unique"
    for p in sorted((HERE / "wrong").glob("*.py")):
        text = p.read_text()
        claimed = text.splitlines()[0].removeprefix("# tier:").strip()
        cases.append((f"wrong/{p.name}", text, claimed))
    bad = 0
    for name, source, claimed in cases:
        got, why = first_failing_tier(source, name)
        ok = got == claimed
        bad += not ok
        print(f"{'ok ' if ok else 'BAD'} {name:42} claimed={claimed} first_fail={got} ({why})")
    n_wrong = sum(c[2] is not None for c in cases)
    print(f"{len(cases) - n_wrong} correct, {n_wrong} wrong, {bad} disagreements")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
