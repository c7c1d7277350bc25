"""Correct student code for differential_attention."""

ATT_OK = {}

ATT_OK["tril_log_bias_addcmul"] = '''

def _log_tril_bias(t, like):
    # log(1) = 0 on visible keys, log(0) = -inf on future keys
    return torch.ones(t, t, dtype=like.dtype, device=like.device).tril().log()


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    check_attention_inputs(q1, k1, q2, k2, value, coefficient)
    t, d = q1.shape[-2], q1.shape[-1]
    bias = _log_tril_bias(t, q1) if causal else None
    maps = []
    for q, k in ((q1, k1), (q2, k2)):
        s = torch.einsum("bhid,bhjd->bhij", q, k) / math.sqrt(d)
        if bias is not None:
            s = s + bias
        maps.append(torch.softmax(s, dim=-1))
    if isinstance(coefficient, torch.Tensor):
        coef = coefficient.to(q1.dtype)
    else:
        coef = torch.tensor(float(coefficient), dtype=q1.dtype, device=q1.device)
    signed = torch.addcmul(maps[0], maps[1], coef, value=-1)
    return signed @ value
'''

ATT_OK["difference_plus_residual"] = '''

def _probs(q, k, causal):
    t, d = q.shape[-2], q.shape[-1]
    s = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(d))
    if causal:
        idx = torch.arange(t, device=q.device)
        s = s.masked_fill(idx[None, :] > idx[:, None], float("-inf"))
    return torch.softmax(s, dim=-1)


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    check_attention_inputs(q1, k1, q2, k2, value, coefficient)
    a1 = _probs(q1, k1, causal)
    a2 = _probs(q2, k2, causal)
    coef = coefficient.to(value.dtype) if isinstance(coefficient, torch.Tensor) else coefficient
    # A1 - lambda A2 = (A1 - A2) + (1 - lambda) A2
    return (a1 - a2) @ value + (1 - coef) * (a2 @ value)
'''

ATT_OK["function_recompute_autograd_grad"] = '''

def _reference_math(q1, k1, q2, k2, value, coef, causal):
    d = q1.shape[-1]
    out = None
    for q, k, w in ((q1, k1, 1.0), (q2, k2, -coef)):
        s = q @ k.transpose(-1, -2) / math.sqrt(d)
        if causal:
            t = s.shape[-1]
            hide = torch.ones(t, t, dtype=torch.bool, device=s.device).triu(1)
            s = s.masked_fill(hide, float("-inf"))
        o = torch.softmax(s, dim=-1) @ value
        out = w * o if out is None else out + w * o
    return out


class _DiffAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q1, k1, q2, k2, value, coef, causal):
        ctx.causal = causal
        ctx.coef_is_tensor = isinstance(coef, torch.Tensor)
        ctx.coef = None if ctx.coef_is_tensor else coef
        saved = (q1, k1, q2, k2, value) + ((coef,) if ctx.coef_is_tensor else ())
        ctx.save_for_backward(*saved)
        return _reference_math(q1, k1, q2, k2, value, coef, causal)

    @staticmethod
    def backward(ctx, grad):
        saved = ctx.saved_tensors
        needs = ctx.needs_input_grad[:len(saved)]
        with torch.enable_grad():
            leaves = [t.detach().requires_grad_(bool(n)) for t, n in zip(saved, needs)]
            coef = leaves[5] if ctx.coef_is_tensor else ctx.coef
            out = _reference_math(*leaves[:5], coef, ctx.causal)
            wanted = [t for t, n in zip(leaves, needs) if n]
            got = torch.autograd.grad(out, wanted, grad) if wanted else ()
        it = iter(got)
        grads = [next(it) if n else None for n in needs]
        grads += [None] * (7 - len(grads))
        return tuple(grads)


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    check_attention_inputs(q1, k1, q2, k2, value, coefficient)
    return _DiffAttention.apply(q1, k1, q2, k2, value, coefficient, causal)
'''

ATT_OK["block_diag_packed_segments"] = '''

def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    check_attention_inputs(q1, k1, q2, k2, value, coefficient)
    b, h, t, d = q1.shape
    n = b * h * t
    dev = q1.device
    # every (batch, head) pair is one segment of a packed sequence of n tokens
    segment = torch.arange(b * h, device=dev).repeat_interleave(t)
    position = torch.arange(t, device=dev).repeat(b * h)
    hidden = segment[:, None] != segment[None, :]
    if causal:
        hidden = hidden | (position[None, :] > position[:, None])
    v = value.reshape(n, 2 * d)
    out = None
    for q, k, w in ((q1, k1, 1.0), (q2, k2, -coefficient)):
        s = q.reshape(n, d) @ k.reshape(n, d).T / math.sqrt(d)
        a = torch.softmax(s.masked_fill(hidden, float("-inf")), dim=-1)
        o = w * (a @ v)
        out = o if out is None else out + o
    return out.reshape(b, h, t, 2 * d)
'''

ATT_OK["tiles_q48_k32_online"] = '''

_Q_TILE, _K_TILE = 48, 32


def _branch(q, k, v, scale, causal):
    b, h, t, _ = q.shape
    pieces = []
    for qs in range(0, t, _Q_TILE):
        qe = min(qs + _Q_TILE, t)
        qb = q[:, :, qs:qe] * scale
        m = qb.new_full((b, h, qe - qs, 1), float("-inf"))
        l = qb.new_zeros((b, h, qe - qs, 1))
        acc = qb.new_zeros((b, h, qe - qs, v.shape[-1]))
        k_end = qe if causal else t
        for ks in range(0, k_end, _K_TILE):
            ke = min(ks + _K_TILE, k_end)
            s = qb @ k[:, :, ks:ke].transpose(-1, -2)
            if causal:
                qpos = torch.arange(qs, qe, device=q.device)[:, None]
                kpos = torch.arange(ks, ke, device=q.device)[None, :]
                s = s.masked_fill(kpos > qpos, float("-inf"))
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            alpha = torch.exp(m - m_new)
            p = torch.exp(s - m_new)
            l = l * alpha + p.sum(-1, keepdim=True)
            acc = acc * alpha + p @ v[:, :, ks:ke]
            m = m_new
        pieces.append(acc / l)
    return torch.cat(pieces, dim=2)


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    check_attention_inputs(q1, k1, q2, k2, value, coefficient)
    scale = q1.shape[-1] ** -0.5
    o1 = _branch(q1, k1, value, scale, causal)
    o2 = _branch(q2, k2, value, scale, causal)
    return o1 - coefficient * o2
'''

ATT_OK["as_strided_key_transpose"] = '''

def _transposed_keys(k):
    # a transposed alias of k built from its own strides and storage offset
    b, h, t, d = k.shape
    s0, s1, s2, s3 = k.stride()
    return k.as_strided((b, h, d, t), (s0, s1, s3, s2), k.storage_offset())


def _attend(q, k, value, causal):
    t, d = q.shape[-2], q.shape[-1]
    s = torch.matmul(q, _transposed_keys(k)) * d ** -0.5
    if causal:
        fut = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
        s = torch.where(fut, float("-inf"), s)
    return torch.nn.functional.softmax(s, dim=-1) @ value


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    check_attention_inputs(q1, k1, q2, k2, value, coefficient)
    return _attend(q1, k1, value, causal) - coefficient * _attend(q2, k2, value, causal)
'''

ATT_OK["number_tensor_dispatch"] = '''

def _branch_output(q, k, value, causal):
    t, d = q.shape[-2], q.shape[-1]
    s = torch.matmul(q * (1.0 / math.sqrt(d)), k.mT)
    if causal:
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ value


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    check_attention_inputs(q1, k1, q2, k2, value, coefficient)
    o1 = _branch_output(q1, k1, value, causal)
    o2 = _branch_output(q2, k2, value, causal)
    if isinstance(coefficient, torch.Tensor):
        return o1 - coefficient.to(o1.dtype) * o2
    return torch.sub(o1, o2, alpha=coefficient)
'''

ATT_OK["prescaled_keys_value_halves"] = '''

def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    check_attention_inputs(q1, k1, q2, k2, value, coefficient)
    t, d = q1.shape[-2], q1.shape[-1]
    inv = 1.0 / math.sqrt(d)
    maps = []
    for q, k in ((q1, k1), (q2, k2)):
        s = q @ (k * inv).transpose(-2, -1)
        if causal:
            keep = torch.ones(t, t, dtype=torch.bool, device=s.device).tril()
            s = s.masked_fill(~keep, float("-inf"))
        maps.append(torch.nn.functional.softmax(s, dim=-1))
    signed = maps[0] - coefficient * maps[1]
    halves = value.unflatten(-1, (2, d))
    return torch.cat([signed @ halves[..., 0, :], signed @ halves[..., 1, :]], dim=-1)
'''

ATT_OK["function_chunked_manual_backward"] = '''

_CHUNK = 64


def _maps(q, k, scale, causal):
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    if causal:
        t = s.shape[-1]
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1)


class _DiffAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q1, k1, q2, k2, value, coef, causal):
        scale = 1.0 / math.sqrt(q1.shape[-1])
        lam = float(coef)
        a1 = _maps(q1, k1, scale, causal)
        a2 = _maps(q2, k2, scale, causal)
        ctx.save_for_backward(q1, k1, q2, k2, value, a1, a2)
        ctx.lam, ctx.scale = lam, scale
        return torch.matmul(a1 - lam * a2, value)

    @staticmethod
    def backward(ctx, grad):
        q1, k1, q2, k2, value, a1, a2 = ctx.saved_tensors
        lam, scale = ctx.lam, ctx.scale
        t = q1.shape[-2]
        dv = torch.matmul((a1 - lam * a2).transpose(-1, -2), grad)
        dq1, dq2 = torch.zeros_like(q1), torch.zeros_like(q2)
        dk1, dk2 = torch.zeros_like(k1), torch.zeros_like(k2)
        dcoef = grad.new_zeros(())
        for qs in range(0, t, _CHUNK):
            qe = min(qs + _CHUNK, t)
            gp = torch.matmul(grad[..., qs:qe, :], value.transpose(-1, -2))
            for a, w, q, k, dq, dk in ((a1, 1.0, q1, k1, dq1, dk1), (a2, -lam, q2, k2, dq2, dk2)):
                ab = a[..., qs:qe, :]
                da = w * gp
                ds = ab * (da - (da * ab).sum(-1, keepdim=True)) * scale
                dq[..., qs:qe, :] = torch.matmul(ds, k)
                dk += torch.matmul(ds.transpose(-1, -2), q[..., qs:qe, :])
            dcoef = dcoef - (gp * a2[..., qs:qe, :]).sum()
        need = ctx.needs_input_grad
        return (dq1 if need[0] else None, dk1 if need[1] else None,
                dq2 if need[2] else None, dk2 if need[3] else None,
                dv if need[4] else None, dcoef if need[5] else None, None)


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    check_attention_inputs(q1, k1, q2, k2, value, coefficient)
    return _DiffAttention.apply(q1, k1, q2, k2, value, coefficient, causal)
'''

ATT_OK["function_flat_bmm_backward"] = '''

def _flat_maps(q, k, scale, causal):
    s = torch.bmm(q, k.transpose(1, 2)) * scale
    if causal:
        t = s.shape[-1]
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1)


class _FlatDiffAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q1, k1, q2, k2, value, coef, causal):
        b, h, t, d = q1.shape
        flat = [x.reshape(b * h, t, x.shape[-1]) for x in (q1, k1, q2, k2, value)]
        scale = d ** -0.5
        lam = float(coef)
        a1 = _flat_maps(flat[0], flat[1], scale, causal)
        a2 = _flat_maps(flat[2], flat[3], scale, causal)
        ctx.save_for_backward(*flat, a1, a2)
        ctx.dims, ctx.lam, ctx.scale = (b, h, t, d), lam, scale
        return torch.bmm(a1 - lam * a2, flat[4]).reshape(b, h, t, 2 * d)

    @staticmethod
    def backward(ctx, grad):
        q1, k1, q2, k2, v, a1, a2 = ctx.saved_tensors
        b, h, t, d = ctx.dims
        lam, scale = ctx.lam, ctx.scale
        g = grad.reshape(b * h, t, 2 * d)
        dv = torch.bmm((a1 - lam * a2).transpose(1, 2), g)
        gp = torch.bmm(g, v.transpose(1, 2))
        grads = []
        for a, da, q, k in ((a1, gp, q1, k1), (a2, -lam * gp, q2, k2)):
            ds = a * (da - (da * a).sum(-1, keepdim=True)) * scale
            grads.append(torch.bmm(ds, k).reshape(b, h, t, d))
            grads.append(torch.bmm(ds.transpose(1, 2), q).reshape(b, h, t, d))
        dcoef = -(gp * a2).sum()
        return (*grads, dv.reshape(b, h, t, 2 * d), dcoef if ctx.needs_input_grad[5] else None, None)


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    check_attention_inputs(q1, k1, q2, k2, value, coefficient)
    return _FlatDiffAttention.apply(q1, k1, q2, k2, value, coefficient, causal)
'''

ATT_OK["inference_sdpa_fast_path"] = '''

def _bias(t, like, causal):
    if not causal:
        return None
    return torch.zeros(t, t, dtype=like.dtype, device=like.device).masked_fill(
        torch.ones(t, t, dtype=torch.bool, device=like.device).triu(1), float("-inf"))


def _manual(q, k, value, bias):
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if bias is not None:
        s = s + bias
    return torch.softmax(s, dim=-1) @ value


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    check_attention_inputs(q1, k1, q2, k2, value, coefficient)
    bias = _bias(q1.shape[-2], q1, causal)
    tensors = (q1, k1, q2, k2, value, coefficient)
    tracked = torch.is_grad_enabled() and any(
        isinstance(x, torch.Tensor) and x.requires_grad for x in tensors)
    if not tracked:
        sdpa = torch.nn.functional.scaled_dot_product_attention
        scale = 1.0 / math.sqrt(q1.shape[-1])
        o1 = sdpa(q1, k1, value, attn_mask=bias, scale=scale)
        o2 = sdpa(q2, k2, value, attn_mask=bias, scale=scale)
        return o1 - coefficient * o2
    return _manual(q1, k1, value, bias) - coefficient * _manual(q2, k2, value, bias)
'''

ATT_OK["batch_packed_branches"] = '''

def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    check_attention_inputs(q1, k1, q2, k2, value, coefficient)
    b, h, t, d = q1.shape
    q = torch.cat([q1, q2], dim=0)
    k = torch.cat([k1, k2], dim=0)
    s = q @ k.transpose(-1, -2) / math.sqrt(d)
    if causal:
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    a = torch.softmax(s, dim=-1)                               # [2B, H, T, T]
    if isinstance(coefficient, torch.Tensor):
        coef = coefficient.to(q1.dtype)
    else:
        coef = q1.new_tensor(float(coefficient))
    weights = torch.stack([torch.ones_like(coef), -coef]).repeat_interleave(b)
    signed = (weights.view(2, b, 1, 1, 1) * a.view(2, b, h, t, t)).sum(0)
    return signed @ value
'''
