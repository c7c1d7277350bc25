"""Confirm every label of this corpus against an independent float64 numpy oracle.

Usage: python tests/corpus/diagnosis/verify.py   (from the repository root or anywhere)

The oracle below is plain numpy in float64 (max-subtracted softmax, an explicit
-inf causal mask); torch is only used to call the corpus files and to read
their autograd gradients. Reference gradients are central finite differences
of the oracle. For every file:

* correct/*: contract (tensor, shape, dtype, no mutation, graph, strided),
  forward values (float64, float32, large float32 logits), gradients to every
  input (contiguous and strided) and determinism all pass.
* wrong/*: the labelled tier fails on a concrete input, in the labelled way
  (the T1 check named by the component; for T2 and T3 every earlier tier
  passes), and the other function of the file passes everything.

Prints one row per file and exits 1 if any label is not confirmed.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
LAM, ATT = "differential_lambda", "differential_attention"
COMPONENTS = {
    "load", "type", "shape", "dtype", "mutation", "graph", "mask", "scale", "softmax",
    "branch", "sign", "coefficient", "value", "lambda", "backward", "randomness",
    "stability", "strided",
}
T1_CHECK_OF = {  # a T1 label must fail this contract check
    "load": "load", "type": "type", "shape": "shape", "dtype": "dtype",
    "mutation": "mutation", "graph": "graph", "strided": "strided",
}

# Tolerances: float64 results against the float64 oracle, float32 results
# (ordinary inputs), float32 results with large logits (near one-hot maps),
# and autograd gradients against central finite differences.
TOL64, TOL32, TOL_LARGE, TOL_GRAD = 1e-9, 1e-4, 2e-3, 1e-6


# =========================================================== numpy oracle
def softmax_rows(s: np.ndarray) -> np.ndarray:
    m = np.max(s, axis=-1, keepdims=True)
    e = np.exp(s - m)
    return e / np.sum(e, axis=-1, keepdims=True)


def oracle_attention(q1, k1, q2, k2, v, coef, causal):
    d, t = q1.shape[-1], q1.shape[-2]
    future = np.triu(np.ones((t, t), dtype=bool), 1)

    def amap(q, k):
        s = q @ np.swapaxes(k, -1, -2) / np.sqrt(d)
        if causal:
            s = np.where(future, -np.inf, s)
        return softmax_rows(s)

    return (amap(q1, k1) - float(coef) * amap(q2, k2)) @ v


def oracle_lambda(q1, k1, q2, k2, lambda_init):
    return np.asarray(np.exp(np.dot(q1, k1)) - np.exp(np.dot(q2, k2)) + lambda_init)


def fd_grads(f, args, cot, h=1e-6):
    """Central differences of sum(f(*args) * cot) with respect to every argument."""
    grads = []
    for i, a in enumerate(args):
        g = np.zeros(a.shape)
        for j in range(a.size):
            plus = [x.copy() for x in args]
            minus = [x.copy() for x in args]
            plus[i].reshape(-1)[j] += h
            minus[i].reshape(-1)[j] -= h
            g.reshape(-1)[j] = (np.sum(f(*plus) * cot) - np.sum(f(*minus) * cot)) / (2 * h)
        grads.append(g)
    return grads


def close(got, want, tol) -> bool:
    if got is None:
        return False
    got = np.asarray(got, dtype=np.float64)
    if got.shape != np.shape(want) or not np.all(np.isfinite(got)):
        return False
    return bool(np.all(np.abs(got - want) <= tol * (1.0 + np.abs(want))))


def same(a, b) -> bool:
    """The submission agrees with itself (strided vs contiguous call); NaN equals NaN."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=TOL64, atol=TOL64, equal_nan=True))


# =========================================================== cases
RNG = np.random.default_rng(20261201)
ATT_NAMES = ("q1", "k1", "q2", "k2", "value", "coefficient")
LAM_NAMES = ("q1", "k1", "q2", "k2")


def att_case(b, h, t, d, coef, causal, scale=1.0):
    qk = [RNG.standard_normal((b, h, t, d)) * scale for _ in range(4)]
    v = RNG.standard_normal((b, h, t, 2 * d))
    cot = RNG.standard_normal((b, h, t, 2 * d))
    return {"args": qk + [v], "coef": coef, "causal": causal, "cot": cot}


ATT_CASES = {  # T != D, H != T, 2D != T so that axis/scale slips show
    "A": att_case(2, 2, 5, 3, 0.37, True),  # B, H > 1: their merge needs a copy when permuted
    "B": att_case(1, 2, 5, 3, -0.6, False),
    "C": att_case(2, 1, 4, 2, 1.3, True),
    "D": att_case(1, 3, 6, 4, 0.8, False),
    "E": att_case(1, 2, 4, 3, 1, True),  # an int coefficient
}
ATT_LARGE = {  # float32 logits of several hundred
    "L1": att_case(1, 2, 6, 4, 0.5, True, scale=20.0),
    "L2": att_case(1, 2, 6, 4, 0.5, False, scale=20.0),
}
for _c in list(ATT_CASES.values()) + list(ATT_LARGE.values()):
    _c["want"] = oracle_attention(*_c["args"], _c["coef"], _c["causal"])


def lam_case(vecs, init):
    return {"args": [np.asarray(x, dtype=np.float64) for x in vecs], "init": init, "cot": 1.3}


LAM_CASES = {
    "a": lam_case([RNG.standard_normal(4) * 0.4 for _ in range(4)], None),  # default 0.2
    "b": lam_case([RNG.standard_normal(5) * 0.4 for _ in range(4)], 0.5),
    "c": lam_case([[0.6] * 4, [0.6, 0.5, 0.7, 0.6], [0.1, -0.2, 0.3, 0.0], [0.2] * 4], 0.3),  # lambda > 1
    "d": lam_case([[0.1, 0.2, -0.1], [0.3, 0.1, 0.2], [0.5, 0.6, 0.4], [0.7, 0.5, 0.6]], 0.1),  # lambda < 0
}
for _c in LAM_CASES.values():
    _c["want"] = oracle_lambda(*_c["args"], 0.2 if _c["init"] is None else _c["init"])


def _precompute_grads():
    for c in ATT_CASES.values():
        f = lambda q1, k1, q2, k2, v, coef, c=c: oracle_attention(q1, k1, q2, k2, v, coef, c["causal"])
        c["grads"] = fd_grads(f, c["args"] + [np.asarray(float(c["coef"]))], c["cot"])
    for c in LAM_CASES.values():
        init = 0.2 if c["init"] is None else c["init"]
        f = lambda q1, k1, q2, k2, init=init: oracle_lambda(q1, k1, q2, k2, init)
        c["grads"] = fd_grads(f, c["args"], c["cot"])


# =========================================================== calling a file
def load(path: Path):
    name = "diagcorpus_" + path.parent.name + "_" + path.stem
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod, None
    except BaseException as exc:  # noqa: BLE001 - any import failure is a load failure
        return None, f"{type(exc).__name__}: {exc}"


def make_input(x: np.ndarray, dtype, strided: bool, rg: bool):
    """Return (tensor passed to the function, function returning its grad as numpy)."""
    if not strided:
        leaf = torch.tensor(x, dtype=dtype).requires_grad_(rg)
        return leaf, lambda: None if leaf.grad is None else leaf.grad.double().numpy()
    if x.ndim == 4:  # permuted and sliced: [B, T, H, 2*last] storage seen as [B, H, T, last]
        b, h, t, d = x.shape
        full = np.zeros((b, t, h, 2 * d))
        full[..., ::2] = x.transpose(0, 2, 1, 3)
        base = torch.tensor(full, dtype=dtype).requires_grad_(rg)
        view = base.permute(0, 2, 1, 3)[..., ::2]
        get = lambda: None if base.grad is None else base.grad.permute(0, 2, 1, 3)[..., ::2].double().numpy()
    else:  # every second element of a longer vector
        full = np.zeros(2 * x.size)
        full[::2] = x
        base = torch.tensor(full, dtype=dtype).requires_grad_(rg)
        view = base[::2]
        get = lambda: None if base.grad is None else base.grad[::2].double().numpy()
    assert not view.is_contiguous()
    return view, get


def call(fn, arrays, extra_args, kwargs, *, dtype, rg, strided=False, coef=None,
         coef_tensor=False, cot=None, seed=0, no_grad=False):
    """Call fn; report what happened. coef (attention only) is appended after arrays."""
    res = {"exc": None, "out": None, "tensor": False, "shape": None, "dtype": None,
           "requires_grad": False, "mutated": False, "grads": None, "bexc": None}
    inputs, getters = [], []
    for x in arrays:
        t, g = make_input(x, dtype, strided, rg)
        inputs.append(t)
        getters.append(g)
    args = list(inputs)
    if coef is not None:
        if coef_tensor:
            c = torch.tensor(float(coef), dtype=dtype).requires_grad_(rg)
            args.append(c)
            inputs.append(c)
            getters.append(lambda c=c: None if c.grad is None else c.grad.double().numpy())
        else:
            args.append(coef)
    args += list(extra_args)
    before = [(t.detach().clone(), t._version, tuple(t.shape)) for t in inputs]
    if seed is not None:
        torch.manual_seed(seed)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if no_grad:
                with torch.no_grad():
                    out = fn(*args, **kwargs)
            else:
                out = fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001
        res["exc"] = f"{type(exc).__name__}: {str(exc)[:80]}"
        return res
    res["mutated"] = any(
        tuple(t.shape) != s or t._version != ver or not torch.equal(t.detach(), old)
        for t, (old, ver, s) in zip(inputs, before)
    )
    if isinstance(out, torch.Tensor):
        res.update(tensor=True, shape=tuple(out.shape), dtype=out.dtype,
                   requires_grad=bool(out.requires_grad), out=out.detach().double().numpy())
        if rg and cot is not None and out.requires_grad and out.shape == np.shape(cot):
            try:
                out.backward(torch.as_tensor(np.asarray(cot), dtype=out.dtype))
                res["grads"] = [g() for g in getters]
            except Exception as exc:  # noqa: BLE001
                res["bexc"] = f"{type(exc).__name__}: {str(exc)[:80]}"
    return res


def att_call(mod, case, **kw):
    return call(mod.differential_attention, case["args"], (), {"causal": case["causal"]},
                coef=case["coef"], cot=case["cot"], **kw)


def lam_call(mod, case, **kw):
    kwargs = {} if case["init"] is None else {"lambda_init": case["init"]}
    return call(mod.differential_lambda, case["args"], (), kwargs, cot=case["cot"], **kw)


# =========================================================== tiers
def tier1(mod, which):
    """Contract checks -> {check: passed}."""
    if which == ATT:
        case, do, shape = ATT_CASES["A"], att_call, ATT_CASES["A"]["want"].shape
    else:
        case, do, shape = LAM_CASES["a"], lam_call, ()
    r64 = do(mod, case, dtype=torch.float64, rg=False)
    r32 = do(mod, case, dtype=torch.float32, rg=False)
    rgr = do(mod, case, dtype=torch.float64, rg=True, coef_tensor=True)
    rst = do(mod, case, dtype=torch.float64, rg=False, strided=True)
    ok_call = r64["exc"] is None
    checks = {
        "type": ok_call and r64["tensor"],
        "shape": ok_call and r64["shape"] == shape,
        "dtype": r64["dtype"] == torch.float64 and r32["dtype"] == torch.float32,
        "mutation": ok_call and not r64["mutated"] and not r32["mutated"],
        "graph": rgr["exc"] is None and rgr["requires_grad"],
        "strided": rst["exc"] is None and rst["shape"] == shape
        and (r64["out"] is None or rst["out"] is None or same(rst["out"], r64["out"])),
    }
    return checks, (r64, rst)


def tier2(mod, which):
    """Forward values -> {case: passed}."""
    res = {}
    if which == ATT:
        for key, c in ATT_CASES.items():
            res[key + "/f64"] = close(att_call(mod, c, dtype=torch.float64, rg=False)["out"], c["want"], TOL64)
            res[key + "/f64t"] = close(att_call(mod, c, dtype=torch.float64, rg=False, coef_tensor=True)["out"],
                                       c["want"], TOL64)
        for key in ("A", "B"):
            c = ATT_CASES[key]
            res[key + "/f32"] = close(att_call(mod, c, dtype=torch.float32, rg=False)["out"], c["want"], TOL32)
        for key, c in ATT_LARGE.items():
            res[key + "/f32"] = close(att_call(mod, c, dtype=torch.float32, rg=False)["out"], c["want"], TOL_LARGE)
    else:
        for key, c in LAM_CASES.items():
            res[key + "/f64"] = close(lam_call(mod, c, dtype=torch.float64, rg=False)["out"], c["want"], TOL64)
            res[key + "/f32"] = close(lam_call(mod, c, dtype=torch.float32, rg=False)["out"], c["want"], TOL32)
    return res


def tier3(mod, which, strided=False):
    """Gradients vs finite differences -> {case: set of inputs whose gradient is wrong}."""
    res = {}
    if which == ATT:
        for key, c in ATT_CASES.items():
            r = att_call(mod, c, dtype=torch.float64, rg=True, coef_tensor=True, strided=strided)
            if r["grads"] is None:
                res[key] = {"<no backward: %s>" % (r["exc"] or r["bexc"] or "detached")}
                continue
            res[key] = {n for n, g, w in zip(ATT_NAMES, r["grads"], c["grads"]) if not close(g, w, TOL_GRAD)}
    else:
        for key, c in LAM_CASES.items():
            r = lam_call(mod, c, dtype=torch.float64, rg=True, strided=strided)
            if r["grads"] is None:
                res[key] = {"<no backward: %s>" % (r["exc"] or r["bexc"] or "detached")}
                continue
            res[key] = {n for n, g, w in zip(LAM_NAMES, r["grads"], c["grads"]) if not close(g, w, TOL_GRAD)}
    return res


def extras(mod, which):
    """Determinism and no_grad behaviour."""
    if which == ATT:
        c, do = ATT_CASES["A"], att_call
    else:
        c, do = LAM_CASES["a"], lam_call
    r1 = do(mod, c, dtype=torch.float64, rg=False, seed=None)
    r2 = do(mod, c, dtype=torch.float64, rg=False, seed=None)
    rn = do(mod, c, dtype=torch.float64, rg=True, no_grad=True)
    deterministic = r1["out"] is not None and r2["out"] is not None and np.array_equal(r1["out"], r2["out"])
    return {"deterministic": deterministic, "no_grad": close(rn["out"], c["want"], TOL64)}


def fully_correct(mod, which):
    """Everything a correct function must satisfy; returns a list of failures."""
    fails = [k for k, v in tier1(mod, which)[0].items() if not v]
    fails += [k for k, v in tier2(mod, which).items() if not v]
    fails += [f"grad:{k}:{sorted(v)}" for k, v in tier3(mod, which).items() if v]
    fails += [f"grad-strided:{k}:{sorted(v)}" for k, v in tier3(mod, which, strided=True).items() if v]
    fails += [k for k, v in extras(mod, which).items() if not v]
    return fails


# =========================================================== confirming a label
def check_schema(key, lab):
    errs = []
    if not isinstance(lab.get("correct"), bool):
        errs.append("'correct' must be a bool")
    if lab.get("correct") is False:
        if lab.get("function") not in (LAM, ATT):
            errs.append("bad function")
        if lab.get("tier") not in ("T1", "T2", "T3"):
            errs.append("bad tier")
        if lab.get("component") not in COMPONENTS:
            errs.append("bad component")
        if lab.get("tier") == "T1" and lab.get("component") not in T1_CHECK_OF:
            errs.append("T1 label needs a contract component")
        if not isinstance(lab.get("bug"), str) or not lab["bug"].strip():
            errs.append("missing bug sentence")
        names = lab.get("names")
        if not (isinstance(names, list) and 2 <= len(names) <= 4
                and all(isinstance(n, str) and n and n == n.lower() for n in names)):
            errs.append("names must be 2-4 lowercase strings")
    return errs


def confirm(key, lab):
    """Return (confirmed, observation text)."""
    path = HERE / (key + ".py")
    mod, err = load(path)
    if lab["correct"]:
        if mod is None:
            return False, "does not load: " + err
        fails = fully_correct(mod, LAM) + fully_correct(mod, ATT)
        return (not fails), ("all tiers pass" if not fails else "fails: " + ", ".join(fails[:4]))

    fn, tier, comp = lab["function"], lab["tier"], lab["component"]
    if comp == "load":
        return mod is None, ("import fails: " + err[:60]) if mod is None else "imports fine"
    if mod is None:
        return False, "does not load: " + err
    other = ATT if fn == LAM else LAM
    other_fails = fully_correct(mod, other)
    if other_fails:
        return False, f"{other} should be correct but fails: " + ", ".join(other_fails[:3])

    t1, _ = tier1(mod, fn)
    t1_failed = sorted(k for k, v in t1.items() if not v)
    if tier == "T1":
        want = T1_CHECK_OF[comp]
        return (not t1[want]), f"T1 fails {t1_failed}"
    if t1_failed:
        return False, f"T1 should pass but fails {t1_failed}"

    t2 = tier2(mod, fn)
    t2_failed = sorted(k for k, v in t2.items() if not v)
    if tier == "T2":
        if not t2_failed:
            return False, "forward values all match the oracle"
        note = f"T2 differs on {t2_failed[:3]}{'...' if len(t2_failed) > 3 else ''}"
        if comp == "randomness":
            ex = extras(mod, fn)
            return (not ex["deterministic"]), note + ("; two calls differ" if not ex["deterministic"] else "; deterministic!")
        if comp == "stability":
            ordinary = [k for k in t2_failed if not k.startswith("L")]
            return (not ordinary), note + ("; ordinary inputs fine, large logits fail" if not ordinary else "; fails on ordinary inputs too")
        if comp == "mask" and fn == ATT:
            causal_keys = {k for k, c in ATT_CASES.items() if c["causal"]}
            bad_causal = any(k.split("/")[0] in causal_keys for k in t2_failed)
            bad_plain = any(k.split("/")[0] not in causal_keys and not k.startswith("L") for k in t2_failed)
            ok = bad_causal != bad_plain
            return ok, note + ("; only one of causal=True/False wrong" if ok else "; both causal modes wrong")
        return True, note
    if t2_failed:
        return False, f"T3 bug but forward differs on {t2_failed[:3]}"

    t3 = tier3(mod, fn)
    wrong = sorted(set().union(*t3.values()))
    if not wrong:
        return False, "gradients all match finite differences"
    note = f"forward ok; wrong grads of {wrong}"
    if comp == "coefficient":
        return wrong == ["coefficient"], note
    return True, note


def main() -> int:
    start = time.time()
    torch.set_num_threads(1)
    labels = json.loads((HERE / "labels.json").read_text())
    files = {f"{p.parent.name}/{p.stem}" for d in ("correct", "wrong") for p in (HERE / d).glob("*.py")}
    problems = [f"{k}: file without a label" for k in sorted(files - labels.keys())]
    problems += [f"{k}: label without a file" for k in sorted(labels.keys() - files)]
    _precompute_grads()

    rows = []
    for key in sorted(labels):
        lab = labels[key]
        errs = check_schema(key, lab)
        if errs:
            rows.append((key, "-", False, "schema: " + "; ".join(errs)))
            continue
        if key not in files:
            continue
        tag = "correct" if lab["correct"] else f"{lab['tier']} {lab['component']}"
        ok, obs = confirm(key, lab)
        rows.append((key, tag, ok, obs))

    width = max(len(r[0]) for r in rows)
    print(f"{'file':<{width}}  {'label':<16}  ok   observed")
    for key, tag, ok, obs in rows:
        print(f"{key:<{width}}  {tag:<16}  {'yes' if ok else 'NO ':<3}  {obs}")
    for p in problems:
        print("PROBLEM", p)

    wrong = [labels[k] for k in labels if not labels[k].get("correct")]
    n_ok = sum(1 for r in rows if r[2])
    print()
    print(f"{len(rows)} labelled files ({len(rows) - len(wrong)} correct, {len(wrong)} wrong); "
          f"{n_ok} confirmed, {len(rows) - n_ok} not confirmed; {time.time() - start:.1f} s")
    for field in ("tier", "component", "function"):
        counts: dict[str, int] = {}
        for lab in wrong:
            counts[lab[field]] = counts.get(lab[field], 0) + 1
        print(f"  by {field}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return 0 if n_ok == len(rows) and not problems else 1


if __name__ == "__main__":
    sys.exit(main())
