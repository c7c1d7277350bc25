"""Wrong submissions written as small text edits of the correct ones.

Each :class:`Mutant` names a file in ``correct/``, a piece of text that occurs
exactly once in it, and what a student put there instead. ``tier`` is the
first grading tier whose checks must fail because of the bug:

* ``T1`` contract: return type, shape, dtype, strided inputs accepted, inputs
  left unmodified, output attached to the autograd graph;
* ``T2`` forward values (a bug that changes values is T2 even when its
  gradients are wrong as well);
* ``T3`` gradients only: the forward pass is right.

Bugs that need a whole file live in ``wrong/`` instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CORRECT_DIR = Path(__file__).resolve().parent / "correct"
WRONG_DIR = Path(__file__).resolve().parent / "wrong"
COMPLETED_STUB = "<the exercise stub, completed>"  # a base built by completed_stub_source()
# The hint id naming the bug of each file in wrong/ that has one (like Mutant.misconception).
WRONG_MISCONCEPTIONS = {
    "joint_normaliser": "joint_normaliser", "logit_difference": "logit_difference", "numpy_roundtrip": "output_detached",
}  # fmt: skip

_A, _L = "differential_attention", "differential_lambda"
# Where the bug of each wrong submission (mutant or file in wrong/) is, as a root cause must say it
# (docs/diagnosis.md): the function, the component, and words any right explanation of it contains.
ROOT_CAUSES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    **{name: (_A, "mask", ("mask",)) for name in (
        "no_mask", "mask_first_branch_only", "mask_after_softmax", "mask_hides_diagonal", "mask_wrong_triangle",
        "mask_greater_equal", "causal_default_false")},
    "softmax_over_queries": (_A, "softmax", ("queries", "dim")),
    **{name: (_A, "scale", ("scale", "√D")) for name in ("scale_inverse_d", "no_scale", "scale_value_width", "sdpa_double_scale")},
    "naive_softmax_overflow": (_A, "stability", ("maximum", "stable", "overflow")),
    "lambda_times_difference": (_A, "coefficient", ("λ(A1 − A2)", "whole difference")),
    "branches_swapped": (_A, "branch", ("swapped",)),
    "float32_inside": (_A, "dtype", ("float32",)),
    "value_split_per_branch": (_A, "value", ("value",)),
    "value_half_width": (_A, "value", ("half", "value")),
    "rmsnorm_on_output": (_A, "softmax", ("norm",)),
    "one_minus_lambda_init_on_output": (_A, "coefficient", ("λ_init", "0.8")),
    **{name: (_L, "lambda", words) for name, words in (
        ("lambda_no_exp", ("exp",)), ("lambda_no_init", ("lambda_init", "λ_init")), ("lambda_clamped", ("clamp",)),
        ("lambda_default_changed", ("default",)), ("lambda_elementwise", ("element", "dot")))},
    "coefficient_as_float": (_A, "coefficient", ("Python number", "float(")),
    "lambda_sign_swapped": (_L, "sign", ("swapped", "sign")),
    "lambda_python_float": (_L, "type", ("item", "number")),
    "lambda_shape_one": (_L, "shape", ("shape",)),
    "lambda_float64_returned": (_L, "dtype", ("dtype",)),
    "float64_returned": (_A, "dtype", ("dtype",)),
    "returns_tuple": (_A, "type", ("tuple",)),
    "inplace_query_scaling": (_A, "mutation", ("in-place", "in place")),
    "view_on_strided": (_A, "strided", (".view", "reshape")),
    **{name: (_A, "graph", words) for name, words in (
        ("output_detached", ("autograd", "detach")), ("value_detached", ("value",)), ("second_branch_no_grad", ("q2", "k2")),
        ("numpy_roundtrip", ("autograd", "numpy")))},
    "coefficient_detached": (_A, "coefficient", ("coefficient",)),  # only the coefficient's gradient is missing: its own part
    **{name: (_A, "backward", words) for name, words in (
        ("backward_no_rowsum", ("q1", "k1")), ("backward_missing_scale", ("q1", "k1")), ("backward_lambda_sign", ("coefficient",)))},
    "joint_normaliser": (_A, "softmax", ("normalised together", "normaliser")),
    "logit_difference": (_A, "branch", ("softmax(S1 − λ",)),
    "ignores_attention": (_A, "softmax", ("map",)),
}  # fmt: skip


@dataclass(frozen=True)
class Mutant:
    name: str  # short id, e.g. "no_mask"
    base: str  # file name in correct/, e.g. "matmul_tril.py"
    old: str  # exact text that occurs exactly once in the base file
    new: str  # replacement
    tier: str  # "T1", "T2" or "T3": the tier that must lose points
    bug: str  # one sentence: what a student did wrong
    misconception: str | None = None  # the hint id (grader/exercises/diffattn/misconceptions.py) naming this bug, if any


_MASK_LINES = (
    '        logits1 = logits1.masked_fill(~keep, float("-inf"))\n'
    '        logits2 = logits2.masked_fill(~keep, float("-inf"))\n'
)
_SOFTMAX_LINES = (
    "    attn1 = torch.softmax(logits1, dim=-1)\n"
    "    attn2 = torch.softmax(logits2, dim=-1)\n"
)
_SDPA_LINES = (
    "    out1 = F.scaled_dot_product_attention(q1, k1, value, is_causal=causal)\n"
    "    out2 = F.scaled_dot_product_attention(q2, k2, value, is_causal=causal)\n"
)
_BACKWARD_DS = (
    "        ds1 = a1 * (grad_map - (grad_map * a1).sum(-1, keepdim=True)) * ctx.scale\n"
    "        ds2 = -lam * a2 * (grad_map - (grad_map * a2).sum(-1, keepdim=True)) * ctx.scale\n"
)

MUTANTS: tuple[Mutant, ...] = (
    # ---- masking -------------------------------------------------------
    Mutant(
        "no_mask", "matmul_tril.py", _MASK_LINES, "", "T2",
        "Built the causal mask but never applied it, so queries see future keys.",
        misconception="no_mask",
    ),
    Mutant(
        "mask_first_branch_only", "matmul_tril.py",
        '        logits2 = logits2.masked_fill(~keep, float("-inf"))\n', "", "T2",
        "Masked the first branch only; the second map still attends to future keys.",
        misconception="mask_first_branch_only",
    ),
    Mutant(
        "mask_after_softmax", "matmul_tril.py",
        "    if causal:\n"
        "        keep = torch.ones(t, t, dtype=torch.bool, device=q1.device).tril()\n"
        + _MASK_LINES + _SOFTMAX_LINES,
        _SOFTMAX_LINES
        + "    if causal:\n"
        "        keep = torch.ones(t, t, dtype=torch.bool, device=q1.device).tril()\n"
        "        attn1 = attn1 * keep\n"
        "        attn2 = attn2 * keep\n",
        "T2",
        "Zeroed the future entries after the softmax without renormalising the rows.",
        misconception="mask_after_softmax",
    ),
    Mutant(
        "mask_hides_diagonal", "matmul_tril.py", ".tril()", ".tril(diagonal=-1)", "T2",
        "Kept only the strictly lower triangle, hiding each token from itself (row 0 becomes NaN).",
        misconception="mask_hides_diagonal",
    ),
    Mutant(
        "mask_wrong_triangle", "matmul_tril.py", ".tril()", ".triu()", "T2",
        "Kept the upper triangle, so queries see the future and not the past.",
        misconception="mask_wrong_triangle",
    ),
    Mutant(
        "mask_greater_equal", "finite_mask.py",
        "future = cols > rows", "future = cols >= rows", "T2",
        "Used >= when building the mask, which also hides the diagonal key.",
        misconception="mask_hides_diagonal",
    ),
    Mutant(
        "causal_default_false", "matmul_tril.py", "causal=True", "causal=False", "T2",
        "Changed the default of causal to False, so a call without the argument is unmasked.",
        misconception="causal_default_false",
    ),
    # ---- softmax and scaling ------------------------------------------------
    Mutant(
        "softmax_over_queries", "matmul_tril.py", _SOFTMAX_LINES,
        _SOFTMAX_LINES.replace("dim=-1", "dim=-2"), "T2",
        "Normalised over the query axis instead of the key axis.",
        misconception="softmax_over_queries",
    ),
    Mutant(
        "scale_inverse_d", "einsum.py", "scale = 1.0 / math.sqrt(d)", "scale = 1.0 / d", "T2",
        "Scaled the logits by 1/D instead of 1/sqrt(D).",
        misconception="scale_inverse_d",
    ),
    Mutant(
        "no_scale", "einsum.py", "scale = 1.0 / math.sqrt(d)", "scale = 1.0", "T2",
        "Forgot to scale the logits at all.",
        misconception="no_scale",
    ),
    Mutant(
        "scale_value_width", "einsum.py", "scale = 1.0 / math.sqrt(d)",
        "scale = 1.0 / math.sqrt(2 * d)", "T2",
        "Scaled by 1/sqrt(2D), taking the width of the values instead of the queries.",
        misconception="scale_value_width",
    ),
    Mutant(
        "sdpa_double_scale", "sdpa_twice.py", _SDPA_LINES,
        "    root = q1.shape[-1] ** 0.5\n"
        + _SDPA_LINES.replace("(q1,", "(q1 / root,").replace("(q2,", "(q2 / root,"),
        "T2",
        "Divided the queries by sqrt(D) before scaled_dot_product_attention, which scales again.",
        misconception="scale_inverse_d",
    ),
    Mutant(
        "naive_softmax_overflow", "logsumexp.py",
        "    return torch.exp(s - torch.logsumexp(s, dim=-1, keepdim=True))\n",
        "    e = torch.exp(s)\n    return e / e.sum(dim=-1, keepdim=True)\n",
        "T2",
        "Wrote the softmax as exp(s)/sum(exp(s)) without subtracting the maximum, "
        "so large float32 logits overflow to inf and NaN.",
        misconception="softmax_overflow",
    ),
    # ---- combining the two maps ---------------------------------------------
    Mutant(
        "lambda_times_difference", "einsum.py",
        "mixed = s1.softmax(-1) - coefficient * s2.softmax(-1)",
        "mixed = coefficient * (s1.softmax(-1) - s2.softmax(-1))", "T2",
        "Multiplied the whole difference by lambda, computing lambda*(A1 - A2).",
        misconception="lambda_times_difference",
    ),
    Mutant(
        "branches_swapped", "row_loop.py", "weights = w1 - coefficient * w2",
        "weights = w2 - coefficient * w1", "T2",
        "Swapped the branches and computed A2 - lambda*A1.",
        misconception="branches_swapped",
    ),
    Mutant(
        "float32_inside", "float64_inside.py",
        "(x.to(torch.float64) for x in (q1, k1, q2, k2, value))",
        "(x.to(torch.float32) for x in (q1, k1, q2, k2, value))", "T2",
        "Computed in float32 and cast back, losing float64 precision for float64 inputs.",
        misconception="float32_inside",
    ),
    Mutant(
        "value_split_per_branch", COMPLETED_STUB,
        "    return torch.matmul(maps[0] - coefficient * maps[1], value)\n",
        "    first = torch.matmul(maps[0], value[..., :d])\n"
        "    second = torch.matmul(maps[1], value[..., d:])\n"
        "    return torch.cat([first, -coefficient * second], dim=-1)\n",
        "T2",
        "Treated the two halves of V as separate per-branch values instead of sharing all of V.",
        misconception="value_split_per_branch",
    ),
    Mutant(
        "value_half_width", "row_loop.py", "* value[:, :, :visible]).sum(dim=2)",
        "* value[:, :, :visible, :width]).sum(dim=2)", "T1",
        "Used only the first D columns of V, returning [B, H, T, D] instead of [B, H, T, 2D].",
        misconception="value_half_width",
    ),
    Mutant(
        "rmsnorm_on_output", "logsumexp.py",
        "    return (maps[0] - maps[1] * coefficient).matmul(value)\n",
        "    out = (maps[0] - maps[1] * coefficient).matmul(value)\n"
        "    return out * torch.rsqrt(out.pow(2).mean(-1, keepdim=True) + 1e-5)\n",
        "T2",
        "Applied the paper's per-head RMSNorm to the output, which is outside this function.",
        misconception="normalised_output",
    ),
    Mutant(
        "one_minus_lambda_init_on_output", "stacked_branches.py", "    return signed @ value\n",
        "    lambda_init = 0.8 - 0.6 * math.exp(-0.3 * (1 - 1))\n"
        "    return (1 - lambda_init) * (signed @ value)\n",
        "T2",
        "Multiplied the output by (1 - lambda_init), a step that belongs after the head norm.",
        misconception="one_minus_lambda_init",
    ),
    # ---- the lambda re-parameterisation -----------------------------------------
    Mutant(
        "lambda_no_exp", "matmul_tril.py",
        "torch.exp(torch.dot(q1, k1)) - torch.exp(torch.dot(q2, k2))",
        "torch.dot(q1, k1) - torch.dot(q2, k2)", "T2",
        "Left out the exponentials and used the raw dot products.",
        misconception="lambda_no_exp",
    ),
    Mutant(
        "lambda_no_init", "logsumexp.py",
        "torch.inner(q2, k2).exp() + lambda_init", "torch.inner(q2, k2).exp()", "T2",
        "Forgot to add lambda_init.",
        misconception="lambda_no_init",
    ),
    Mutant(
        "lambda_sign_swapped", "row_loop.py",
        "return (q1 * k1).sum().exp() - (q2 * k2).sum().exp() + lambda_init",
        "return (q2 * k2).sum().exp() - (q1 * k1).sum().exp() + lambda_init", "T2",
        "Subtracted the first exponential from the second.",
        misconception="lambda_sign_swapped",
    ),
    Mutant(
        "lambda_clamped", "finite_mask.py",
        "    return first - torch.exp(torch.sum(q2 * k2)) + lambda_init\n",
        "    return (first - torch.exp(torch.sum(q2 * k2)) + lambda_init).clamp(0.0, 1.0)\n",
        "T2",
        "Clamped lambda to [0, 1], although the contract allows any real value.",
        misconception="lambda_clamped",
    ),
    Mutant(
        "lambda_default_changed", "bmm_reshape.py", "lambda_init=0.2", "lambda_init=0.8", "T2",
        "Changed the default lambda_init from 0.2 to 0.8.",
        misconception="lambda_default_changed",
    ),
    Mutant(
        "lambda_python_float", "einsum.py",
        "return dots[0].exp() - dots[1].exp() + lambda_init",
        "return (dots[0].exp() - dots[1].exp() + lambda_init).item()", "T1",
        "Returned lambda as a Python float with .item(), dropping the tensor and its graph.",
    ),
    Mutant(
        "lambda_shape_one", "stacked_branches.py", "    return e[0] - e[1] + lambda_init\n",
        "    return e[:1] - e[1:] + lambda_init\n", "T1",
        "Sliced instead of indexing, so lambda has shape (1,) rather than ().",
    ),
    Mutant(
        "lambda_elementwise", "sdpa_twice.py",
        "torch.exp(q1 @ k1) - torch.exp(q2 @ k2)", "torch.exp(q1 * k1) - torch.exp(q2 * k2)", "T1",
        "Used elementwise products instead of dot products, returning a vector of length D_lambda.",
        misconception="lambda_elementwise",
    ),
    Mutant(
        "lambda_float64_returned", "float64_inside.py",
        "    return (lam + lambda_init).to(q1.dtype)\n",
        "    return lam + lambda_init\n", "T1",
        "Computed lambda in float64 and forgot to cast it back for float32 inputs.",
    ),
    # ---- contract: dtype, return type, strides, mutation, graph ----------------
    Mutant(
        "float64_returned", "float64_inside.py", "    return out.to(out_dtype)\n",
        "    return out\n", "T1",
        "Upcast to float64 internally and returned the float64 result for float32 inputs.",
    ),
    Mutant(
        "returns_tuple", "einsum.py",
        'return torch.einsum("bhij,bhje->bhie", mixed, value)',
        'return torch.einsum("bhij,bhje->bhie", mixed, value), mixed', "T1",
        "Returned (output, attention map) instead of the output tensor alone.",
    ),
    Mutant(
        "inplace_query_scaling", "online_softmax.py", "    q = q / math.sqrt(q.shape[-1])\n",
        "    q = q.div_(math.sqrt(q.shape[-1]))\n", "T1",
        "Scaled the queries in place, modifying the caller's tensor "
        "(and failing outright on leaves that require grad).",
    ),
    Mutant(
        "view_on_strided", "bmm_reshape.py", "flat = [x.reshape(b * h, t, x.shape[-1])",
        "flat = [x.view(b * h, t, x.shape[-1])", "T1",
        "Flattened with .view, which raises for non-contiguous inputs such as permuted heads.",
    ),
    Mutant(
        "output_detached", "matmul_tril.py", "    return (attn1 - coefficient * attn2) @ value\n",
        "    return ((attn1 - coefficient * attn2) @ value).detach()\n", "T1",
        "Detached the output, so no gradient can reach any input.",
        misconception="output_detached",
    ),
    # ---- gradients only ------------------------------------------------------
    Mutant(
        "coefficient_as_float", "sdpa_twice.py", "    return out1 - coefficient * out2\n",
        "    return out1 - float(coefficient) * out2\n", "T3",
        "Converted the coefficient with float(), cutting it out of the graph.",
        misconception="coefficient_detached",
    ),
    Mutant(
        "coefficient_detached", "float64_inside.py", "coefficient.to(torch.float64) if",
        "coefficient.detach().double() if", "T3",
        "Detached a tensor coefficient while casting it, so lambda receives no gradient.",
        misconception="coefficient_detached",
    ),
    Mutant(
        "value_detached", "sdpa_twice.py", _SDPA_LINES,
        _SDPA_LINES.replace("value,", "value.detach(),"), "T3",
        "Passed value.detach() to both branches, so V receives no gradient.",
        misconception="value_detached",
    ),
    Mutant(
        "second_branch_no_grad", "matmul_tril.py", "    attn2 = torch.softmax(logits2, dim=-1)\n",
        "    with torch.no_grad():\n        attn2 = torch.softmax(logits2, dim=-1)\n", "T3",
        "Computed the second map under torch.no_grad(), so q2 and k2 get no gradient.",
        misconception="second_branch_detached",
    ),
    Mutant(
        "backward_no_rowsum", "custom_function.py", _BACKWARD_DS,
        "        ds1 = a1 * grad_map * ctx.scale\n"
        "        ds2 = -lam * a2 * grad_map * ctx.scale\n",
        "T3",
        "Hand-written backward forgot the row-sum term of the softmax Jacobian.",
        misconception="backward_no_rowsum",
    ),
    Mutant(
        "backward_missing_scale", "custom_function.py", _BACKWARD_DS,
        _BACKWARD_DS.replace(" * ctx.scale\n", "\n"), "T3",
        "Hand-written backward left out the 1/sqrt(D) factor of the logits.",
        misconception="backward_missing_scale",
    ),
    Mutant(
        "backward_lambda_sign", "custom_function.py", "grad_lam = -(grad_map * a2).sum()",
        "grad_lam = (grad_map * a2).sum()", "T3",
        "Hand-written backward returned the coefficient gradient with the wrong sign.",
        misconception="coefficient_gradient_sign",
    ),
)


def mutant_source(m: Mutant) -> str:
    """Return the text of ``m.base`` with ``m.old`` replaced by ``m.new``."""
    text = completed_stub_source() if m.base == COMPLETED_STUB else (CORRECT_DIR / m.base).read_text(encoding="utf-8")
    count = text.count(m.old)
    assert count == 1, f"mutant {m.name!r}: expected the old text once in {m.base}, found {count}"
    return text.replace(m.old, m.new)


STUB = Path(__file__).resolve().parents[2] / "exercise" / "diff_attention.py"
_STUB_BODIES = {
    '    raise NotImplementedError("differential_lambda is not implemented yet")\n': (
        "    return torch.exp(torch.dot(q1, k1)) - torch.exp(torch.dot(q2, k2)) + lambda_init\n"
    ),
    '    raise NotImplementedError("differential_attention is not implemented yet")\n': (
        "    d = q1.shape[-1]\n"
        "    scores = [torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d) for q, k in ((q1, k1), (q2, k2))]\n"
        "    if causal:\n"
        "        future = torch.ones(q1.shape[-2], q1.shape[-2], dtype=torch.bool).triu(1)\n"
        "        scores = [s.masked_fill(future, -math.inf) for s in scores]\n"
        "    maps = [torch.softmax(s, dim=-1) for s in scores]\n"
        "    return torch.matmul(maps[0] - coefficient * maps[1], value)\n"
    ),
}


def completed_stub_source() -> str:
    """The supplied stub with both bodies filled in: its validation helpers must accept every valid input."""
    text = STUB.read_text(encoding="utf-8")
    for old, new in _STUB_BODIES.items():
        assert text.count(old) == 1, f"the stub no longer contains {old.strip()!r} exactly once"
        text = text.replace(old, new)
    return text
