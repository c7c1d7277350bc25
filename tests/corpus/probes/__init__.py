"""Small wrong implementations for the probes' tests, each a one-place edit of a short correct file.

They are not the corpus the diagnosis is measured on (tests/corpus/mutants.py,
tests/corpus/diagnosis): each names the bug a probe must localise, as the
root cause must say it: the function and its component (docs/diagnosis.md).
"""

from __future__ import annotations

BASE = '''import math

import torch


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return torch.exp(torch.dot(q1, k1)) - torch.exp(torch.dot(q2, k2)) + lambda_init


def _map(q, k, causal):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        t = q.shape[-2]
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1)


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    return (_map(q1, k1, causal) - coefficient * _map(q2, k2, causal)) @ value
'''
_LAMBDA = "torch.exp(torch.dot(q1, k1)) - torch.exp(torch.dot(q2, k2)) + lambda_init"
_OUT = "(_map(q1, k1, causal) - coefficient * _map(q2, k2, causal)) @ value"
_A, _L = "differential_attention", "differential_lambda"
_CUSTOM_LAMBDA = '''

class _Lambda(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q1, k1, q2, k2, lambda_init):
        a, b = torch.dot(q1, k1), torch.dot(q2, k2)
        ctx.save_for_backward(q1, k1, q2, k2, a, b)
        return torch.exp(a) - torch.exp(b) + lambda_init

    @staticmethod
    def backward(ctx, g):
        q1, k1, q2, k2, a, b = ctx.saved_tensors
        e1, e2 = a, b
        return g * e1 * k1, g * e1 * q1, -g * e2 * k2, -g * e2 * q2, None


def differential_lambda(q1, k1, q2, k2, lambda_init=0.2):
    return _Lambda.apply(q1, k1, q2, k2, lambda_init)
'''
_CUSTOM_ATTENTION = '''

class _Mixed(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a1, a2, coefficient):
        ctx.save_for_backward(a2, coefficient)
        return a1 - coefficient * a2

    @staticmethod
    def backward(ctx, g):
        a2, coefficient = ctx.saved_tensors
        return g, -coefficient * g, (g * a2).sum()  # the coefficient's gradient has the wrong sign


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    c = coefficient if torch.is_tensor(coefficient) else torch.tensor(float(coefficient), dtype=q1.dtype)
    return _Mixed.apply(_map(q1, k1, causal), _map(q2, k2, causal), c) @ value
'''
_CAUSAL_AS_DROPOUT = '''

def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    sdpa = torch.nn.functional.scaled_dot_product_attention
    return sdpa(q1, k1, value, None, causal) - coefficient * sdpa(q2, k2, value, None, causal)  # the fifth parameter is dropout_p
'''
_RUNNING_MEAN = '''

_RUN = {"shape": None}


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    out = (_map(q1, k1, causal) - coefficient * _map(q2, k2, causal)) @ value
    if _RUN["shape"] != tuple(out.shape):
        _RUN.update(shape=tuple(out.shape), total=torch.zeros_like(out), count=0)
    _RUN["total"], _RUN["count"] = _RUN["total"] + out.detach(), _RUN["count"] + 1
    return out + (_RUN["total"] / _RUN["count"] - out.detach())  # a running mean of the calls of one shape
'''
_PACKED_UNMASKED = '''

def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    if causal:
        return (_map(q1, k1, True) - coefficient * _map(q2, k2, True)) @ value
    b, h, t, _ = q1.shape
    packed = [x.reshape(1, 1, b * h * t, x.shape[-1]) for x in (q1, k1, q2, k2, value)]  # no mask keeps the pairs apart
    return ((_map(packed[0], packed[1], False) - coefficient * _map(packed[2], packed[3], False)) @ packed[4]).reshape(value.shape)
'''
# a backward pass that recomputes the forward under autograd: {flag} is the causal flag it recomputes with, {cut} what it does to
# the incoming gradient first
_RECOMPUTED = '''

class _Recomputed(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q1, k1, q2, k2, value, coefficient, causal):
        ctx.save_for_backward(q1, k1, q2, k2, value, coefficient)
        ctx.causal = causal
        return (_map(q1, k1, causal) - coefficient * _map(q2, k2, causal)) @ value

    @staticmethod
    def backward(ctx, g):
        saved = [t.detach().requires_grad_() for t in ctx.saved_tensors]
        {cut}
        with torch.enable_grad():
            q1, k1, q2, k2, value, coefficient = saved
            out = (_map(q1, k1, {flag}) - coefficient * _map(q2, k2, {flag})) @ value
        return (*torch.autograd.grad(out, saved, g, allow_unused=True), None)


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    return _Recomputed.apply(q1, k1, q2, k2, value, torch.as_tensor(coefficient, dtype=q1.dtype), causal)
'''
# a backward pass that recovers the second map from the output, dividing by the coefficient (0 / 0 at coefficient 0)
_DIVIDED = '''

class _Mixed(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a1, a2, coefficient):
        out = a1 - coefficient * a2
        ctx.save_for_backward(a1, out, coefficient)
        return out

    @staticmethod
    def backward(ctx, g):
        a1, out, coefficient = ctx.saved_tensors
        return g, -coefficient * g, -(g * (a1 - out) / coefficient).sum()


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    return _Mixed.apply(_map(q1, k1, causal), _map(q2, k2, causal), torch.as_tensor(coefficient, dtype=q1.dtype)) @ value
'''
# a recomputing backward pass whose maps are exp(s) / Σ exp(s), without the row maximum (overflow past exp's range)
_UNSHIFTED = _RECOMPUTED.format(flag="ctx.causal", cut="pass").replace("_map(q1, k1, ctx.causal) - coefficient * _map(q2, k2, ctx.causal)",
                                                                        "_naive(q1, k1, ctx.causal) - coefficient * _naive(q2, k2, ctx.causal)") + '''

def _naive(q, k, causal):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        t = q.shape[-2]
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    e = torch.exp(s)
    return e / e.sum(-1, keepdim=True)
'''
# an online softmax over blocks of 32 keys whose running maximum is replaced by each block's own (exact, until far-apart
# block maxima overflow exp(old − new))
_BLOCK_MAXIMUM = '''

def _map(q, k, causal):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        t = q.shape[-2]
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    m = s[..., :32].amax(-1, keepdim=True)
    total = torch.exp(s[..., :32] - m).sum(-1, keepdim=True)
    for j in range(32, s.shape[-1], 32):
        block = s[..., j:j + 32].amax(-1, keepdim=True)
        new = torch.where(torch.isinf(block), m, block)
        total = total * torch.exp(m - new) + torch.exp(s[..., j:j + 32] - new).sum(-1, keepdim=True)
        m = new
    return torch.exp(s - m) / total
'''

# name -> (text of BASE, what a student wrote instead, the function and component the first finding must name)
VARIANTS: dict[str, tuple[str, str, str, str]] = {
    "sign": ("- coefficient *", "+ coefficient *", _A, "sign"),
    "keys_swapped": (_OUT, "(_map(q1, k2, causal) - coefficient * _map(q2, k1, causal)) @ value", _A, "branch"),
    "mask_zero": ('float("-inf")', "0.0", _A, "mask"),
    "no_mask": ("    if causal:\n        t", "    if False:\n        t", _A, "mask"),
    "mask_one_branch": (_OUT, "(_map(q1, k1, causal) - coefficient * _map(q2, k2, False)) @ value", _A, "mask"),
    "diagonal_hidden": ("triu(1)", "triu(0)", _A, "mask"),
    "wrong_triangle": ("triu(1)", "tril(-1)", _A, "mask"),
    "causal_default_false": ("causal=True", "causal=False", _A, "mask"),
    "softmax_over_queries": ("dim=-1", "dim=-2", _A, "softmax"),
    "softmax_over_heads": ("dim=-1", "dim=1", _A, "softmax"),
    "transposed_map": (_OUT, "(_map(q1, k1, causal) - coefficient * _map(q2, k2, causal)).transpose(-2, -1) @ value", _A, "value"),
    "scale_by_t": ("math.sqrt(q.shape[-1])", "math.sqrt(q.shape[-2])", _A, "scale"),
    "scale_by_d": ("math.sqrt(q.shape[-1])", "q.shape[-1]", _A, "scale"),
    "scale_after_softmax": ("    return torch.softmax(s, dim=-1)\n", "    return torch.softmax(s * math.sqrt(q.shape[-1]), dim=-1) / math.sqrt(q.shape[-1])\n",
                            _A, "scale"),  # fmt: skip
    "second_map_from_first_branch": (_OUT, "(_map(q1, k1, causal) - coefficient * _map(q1, k1, causal)) @ value", _A, "branch"),
    "divided_by_one_minus_lambda": (_OUT, _OUT + " / (1 - coefficient)", _A, "softmax"),
    "coefficient_added": (_OUT, "(_map(q1, k1, causal) - (coefficient + _map(q2, k2, causal))) @ value", _A, "coefficient"),
    "mask_filled_with_minus_100": ('float("-inf")', "-100.0", _A, "mask"),
    "softmax_overwritten_in_place": ("    return torch.softmax(s, dim=-1)\n", "    p = torch.softmax(s, dim=-1)\n    p *= 1.0\n    return p\n", _A, "graph"),
    "lambda_times_difference": (_OUT, "coefficient * (_map(q1, k1, causal) - _map(q2, k2, causal)) @ value", _A, "coefficient"),
    "one_minus_lambda_init": (_OUT, "0.8 * " + _OUT, _A, "coefficient"),
    "dropout_left_on": ("return torch.softmax(s, dim=-1)", "return torch.nn.functional.dropout(torch.softmax(s, dim=-1), p=0.1)", _A, "randomness"),
    "warm_up_kept_on_the_function": ("return torch.softmax(s, dim=-1)", "calls = _map.__dict__.setdefault('calls', [0])\n    calls[0] += 1\n"
                                     "    return torch.softmax(s * min(1.0, calls[0] / 1000), dim=-1)", _A, "state"),
    "normalised_output": (_OUT, "torch.nn.functional.rms_norm(" + _OUT + ", (value.shape[-1],))", _A, "softmax"),
    "naive_softmax": ("return torch.softmax(s, dim=-1)", "e = torch.exp(s)\n    return e / e.sum(-1, keepdim=True)", _A, "stability"),
    "float32_inside": (_OUT, "((_map(q1.float(), k1.float(), causal) - coefficient * _map(q2.float(), k2.float(), causal)) @ value.float()).to(value.dtype)",
                       _A, "dtype"),  # fmt: skip
    "value_detached": (_OUT, _OUT.replace("@ value", "@ value.detach()"), _A, "graph"),
    "coefficient_float": ("- coefficient *", "- float(coefficient) *", _A, "coefficient"),
    "normaliser_detached": ("return torch.softmax(s, dim=-1)",
                            "e = torch.exp(s - s.amax(-1, keepdim=True))\n    return e / e.sum(-1, keepdim=True).detach()", _A, "graph"),
    "second_branch_detached": (_OUT, "(_map(q1, k1, causal) - coefficient * _map(q2.detach(), k2.detach(), causal)) @ value", _A, "graph"),
    "coefficient_rounded_to_float32": ("- coefficient *", "- torch.as_tensor(coefficient, dtype=torch.float32) *", _A, "coefficient"),
    "scale_rounded_to_float32": ("math.sqrt(q.shape[-1])", "torch.tensor(math.sqrt(q.shape[-1]))", _A, "scale"),
    "max_shift_over_queries": ("return torch.softmax(s, dim=-1)",
                               "e = torch.exp(s - s.amax(-2, keepdim=True))\n    return e / e.sum(-1, keepdim=True)", _A, "softmax"),
    "mask_multiplied_by_inf": ('s = s.masked_fill(torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1), float("-inf"))',
                               's = s + torch.ones(t, t, dtype=s.dtype).triu(1) * float("-inf")', _A, "mask"),
    "values_of_other_heads": (_OUT, _OUT.replace("@ value", "@ value.transpose(0, 1).reshape(value.shape)"), _A, "value"),
    "lambda_init_zero_replaced": (_LAMBDA, _LAMBDA.replace("+ lambda_init", "+ (lambda_init or 0.2)"), _L, "lambda"),
    "lambda_dots_clamped": (_LAMBDA, "torch.exp(torch.dot(q1, k1).clamp(-10, 10)) - torch.exp(torch.dot(q2, k2).clamp(-10, 10)) + lambda_init",
                            _L, "lambda"),  # fmt: skip
    "lambda_no_exp": (_LAMBDA, "torch.dot(q1, k1) - torch.dot(q2, k2) + lambda_init", _L, "lambda"),
    "lambda_no_init": (_LAMBDA, "torch.exp(torch.dot(q1, k1)) - torch.exp(torch.dot(q2, k2))", _L, "lambda"),
    "lambda_sign": (_LAMBDA, "torch.exp(torch.dot(q2, k2)) - torch.exp(torch.dot(q1, k1)) + lambda_init", _L, "sign"),
    "lambda_default": ("lambda_init=0.2", "lambda_init=0.8", _L, "lambda"),
    "lambda_clamped": (_LAMBDA, "(" + _LAMBDA + ").clamp(0, 1)", _L, "lambda"),
    "lambda_sum_not_dot": (_LAMBDA, "torch.exp((q1 + k1).sum()) - torch.exp((q2 + k2).sum()) + lambda_init", _L, "lambda"),
    "lambda_elementwise_exp": (_LAMBDA, "torch.exp(q1 * k1).prod() - torch.exp(q2 * k2).prod() + lambda_init", _L, "lambda"),
    "mask_from_zero_logits": ('s = s.masked_fill(torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1), float("-inf"))',
                              's = s.tril().masked_fill(s.tril() == 0, float("-inf"))', _A, "mask"),
    "value_product_in_bfloat16": (_OUT, "((_map(q1, k1, causal) - coefficient * _map(q2, k2, causal)).bfloat16() @ value.bfloat16()).to(value.dtype)",
                                  _A, "dtype"),  # fmt: skip
    "lambda_dots_in_float16": (_LAMBDA, "torch.exp(torch.dot(q1.half(), k1.half()).to(q1.dtype)) - torch.exp(torch.dot(q2.half(), k2.half()).to(q1.dtype)) "
                               "+ lambda_init", _L, "dtype"),  # fmt: skip
    "lambda_float32": (_LAMBDA, "(torch.exp(torch.dot(q1.float(), k1.float())) - torch.exp(torch.dot(q2.float(), k2.float())) + lambda_init).to(q1.dtype)",
                       _L, "dtype"),  # fmt: skip
    "scale_from_first_32_features": ("/ math.sqrt(q.shape[-1])", "/ math.sqrt(min(q.shape[-1], 32))", _A, "scale"),
    "lambda_init_through_log": (_LAMBDA, "torch.exp(torch.logaddexp(torch.dot(q1, k1), torch.log(torch.tensor(lambda_init, dtype=q1.dtype)))) "
                                "- torch.exp(torch.dot(q2, k2))", _L, "lambda"),  # fmt: skip
    "value_half_zero_padded": (_OUT, "torch.nn.functional.pad(((_map(q1, k1, causal) - coefficient * _map(q2, k2, causal)) "
                               "@ value[..., :value.shape[-1] // 2]), (0, value.shape[-1] // 2))", _A, "value"),
    "lambda_clamped_at_its_probe_value": (_LAMBDA, "(" + _LAMBDA + ").clamp(0.5, 1)", _L, "lambda"),
    "lambda_init_twice_on_the_float32_path": (_LAMBDA, "(" + _LAMBDA + ") + (lambda_init if q1.dtype == torch.float32 else 0.0)", _L, "lambda"),
    "value_halves_swapped": ("@ value\n", "@ value.roll(value.shape[-1] // 2, -1)\n", _A, "value"),
    "output_reshaped_not_transposed": (_OUT, "(" + _OUT + ").transpose(1, 2).contiguous().reshape(value.shape)", _A, "value"),
    "branch_weights_repeated_over_the_batch": (_OUT, "(torch.stack([torch.ones_like(torch.as_tensor(coefficient, dtype=value.dtype)), "
                                               "-torch.as_tensor(coefficient, dtype=value.dtype)]).repeat(q1.shape[0]).view(2, -1, 1, 1, 1) "
                                               "* torch.stack([_map(q1, k1, causal), _map(q2, k2, causal)])).sum(0) @ value", _A, "coefficient"),
    "keys_windowed_to_the_last_256": ("    return torch.softmax(s, dim=-1)", "    window = torch.ones(s.shape[-2], s.shape[-1], dtype=torch.bool, "
                                      "device=s.device).tril(-256)\n    return torch.softmax(s.masked_fill(window, float('-inf')), dim=-1)",
                                      _A, "mask"),  # fmt: skip
    "normaliser_summed_up_to_the_diagonal": ("    return torch.softmax(s, dim=-1)", "    e = torch.exp(s - s.amax(-1, keepdim=True))\n"
                                             "    return e / torch.diagonal(e.cumsum(-1), dim1=-2, dim2=-1).unsqueeze(-1)", _A, "softmax"),  # fmt: skip
    "second_branch_always_causal": ("coefficient * _map(q2, k2, causal)", "coefficient * _map(q2, k2, True)", _A, "mask"),
    "scale_floor_divided_to_zero": ("/ math.sqrt(q.shape[-1])", "* (1 // math.sqrt(q.shape[-1]))", _A, "scale"),
    "output_gradient_clipped_by_a_hook": ("    return " + _OUT, "    out = " + _OUT + "\n    if out.requires_grad:\n        out.register_hook(lambda g: "
                                          "g.clamp(-0.01, 0.01))\n    return out", _A, "backward"),  # fmt: skip
    "queries_made_unit_length": ("    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])", "    s = torch.nn.functional.normalize(q, dim=-1) @ k.transpose(-2, -1)",
                                 _A, "scale"),
    "weights_kept_for_the_top_64_keys": ("    return torch.softmax(s, dim=-1)", "    if s.shape[-1] > 64:\n        low = s < s.topk(64, dim=-1).values[..., -1:]\n"
                                         "        s = s.masked_fill(low, float('-inf'))\n    return torch.softmax(s, dim=-1)", _A, "softmax"),  # fmt: skip
    "maps_in_float32_past_128_tokens": ("    return torch.softmax(s, dim=-1)", "    if s.shape[-1] > 128:\n        return torch.softmax(s.float(), "
                                        "dim=-1).to(s.dtype)\n    return torch.softmax(s, dim=-1)", _A, "dtype"),  # fmt: skip
    "value_added_as_residual": (_OUT, "(" + _OUT + ") + value", _A, "value"),
    "lambda_dot_drops_the_tail_past_16": (_LAMBDA, _LAMBDA.replace("torch.dot(q1, k1)", "torch.dot(q1[: max(16, q1.numel() // 16 * 16)], "
                                                                   "k1[: max(16, k1.numel() // 16 * 16)])"), _L, "lambda"),  # fmt: skip
    "query_chunks_joined_last_first": (_OUT, "torch.cat(((" + _OUT + ")[..., 128:, :], (" + _OUT + ")[..., :128, :]), dim=-2)", _A, "value"),
    "lambda_log_of_difference": (_LAMBDA, "torch.sign(torch.dot(q1, k1) - torch.dot(q2, k2)) * torch.exp(torch.maximum(torch.dot(q1, k1), torch.dot(q2, k2)) "
                                 "+ torch.log1p(-torch.exp(-(torch.dot(q1, k1) - torch.dot(q2, k2)).abs()))) + lambda_init", _L, "stability"),  # fmt: skip
    "scale_a_power_of_two_for_power_of_two_widths": ("/ math.sqrt(q.shape[-1])", "* (2.0 ** -(q.shape[-1].bit_length() // 2) if q.shape[-1] "
                                                     "& (q.shape[-1] - 1) == 0 else 1 / math.sqrt(q.shape[-1]))", _A, "scale"),  # fmt: skip
    "coefficient_through_log": ("- coefficient * _map(q2, k2, causal)", "- torch.exp(torch.log(_map(q2, k2, causal)) + torch.log(torch.as_tensor("
                                "coefficient, dtype=q2.dtype)))", _A, "coefficient"),  # fmt: skip
}
# Whole functions replaced: name -> (the function removed from BASE, what replaces it, function, component)
REPLACED: dict[str, tuple[str, str, str, str]] = {
    "lambda_backward_without_exp": ("differential_lambda", _CUSTOM_LAMBDA, _L, "backward"),
    "lambda_backward_clipped_exp": ("differential_lambda", _CUSTOM_LAMBDA.replace("e1, e2 = a, b", "e1, e2 = a.exp().clamp(max=1e4), b.exp().clamp(max=1e4)"),
                                    _L, "backward"),
    "lambda_backward_through_log_of_the_gradient": ("differential_lambda", _CUSTOM_LAMBDA.replace(
        "return g * e1 * k1, g * e1 * q1, -g * e2 * k2, -g * e2 * q2, None",
        "u1, u2 = torch.exp(torch.log(g) + a), -torch.exp(torch.log(g) + b)\n        return u1 * k1, u1 * q1, u2 * k2, u2 * q2, None"
    ).replace("e1, e2 = a, b\n        ", ""), _L, "backward"),
    "pairs_packed_into_one_sequence_without_the_mask": ("differential_attention", _PACKED_UNMASKED, _A, "mask"),
    "causal_passed_as_dropout": ("differential_attention", _CAUSAL_AS_DROPOUT, _A, "mask"),
    "running_mean_of_calls_of_one_shape": ("differential_attention", _RUNNING_MEAN, _A, "state"),
    "attention_backward_wrong_for_one_input": ("differential_attention", _CUSTOM_ATTENTION, _A, "backward"),
    "backward_recomputes_causal_always": ("differential_attention", _RECOMPUTED.format(flag="True", cut="pass"), _A, "backward"),
    "backward_keeps_last_64_queries": ("differential_attention", _RECOMPUTED.format(flag="ctx.causal", cut="g = g.clone(); g[..., :-64, :] = 0"),
                                       _A, "backward"),  # fmt: skip
    "backward_divides_by_the_coefficient": ("differential_attention", _DIVIDED, _A, "coefficient"),
    "backward_recomputes_exp_without_the_maximum": ("differential_attention", _UNSHIFTED, _A, "stability"),
    "online_maximum_replaced_by_block_maximum": ("_map", _BLOCK_MAXIMUM, _A, "stability"),
    "backward_views_incoming_gradient": ("differential_attention", _RECOMPUTED.format(flag="ctx.causal", cut="g = g.view(-1).view(g.shape)"),
                                         _A, "backward"),  # fmt: skip
}


def _without(source: str, function: str) -> str:
    """``source`` without the module-level function ``function``."""
    start = source.index(f"def {function}(")
    end = source.find("\n\n\ndef ", start)
    return source[:start] + (source[end + 3 :] if end != -1 else "")


def source(name: str) -> str:
    """The text of the wrong implementation ``name`` (a key of VARIANTS or REPLACED), or of BASE for "base"."""
    if name == "base":
        return BASE
    if name in REPLACED:
        function, new, _, _ = REPLACED[name]
        return _without(BASE, function).rstrip("\n") + "\n" + new
    old, new, _, _ = VARIANTS[name]
    assert BASE.count(old) == 1, f"{name}: the old text must occur once"
    return BASE.replace(old, new)


def place(name: str) -> tuple[str, str]:
    """The function and component the first finding for ``name`` must name."""
    _, _, function, component = (VARIANTS | REPLACED)[name]
    return function, component
