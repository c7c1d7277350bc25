"""Single-bug student code for differential_attention."""

import _parts_att_ok as ok

ATT_BAD = {}

ATT_BAD["att_empty_like_reshape_copy_dropped"] = '''

def _map(q, k, causal):
    t, d = q.shape[-2], q.shape[-1]
    s = q @ k.transpose(-1, -2) / math.sqrt(d)
    if causal:
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1)


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    check_attention_inputs(q1, k1, q2, k2, value, coefficient)
    b, h, t, d = q1.shape
    out = torch.empty_like(value)
    rows = out.reshape(b * h, t, 2 * d)
    flat = [x.reshape(b * h, t, x.shape[-1]) for x in (q1, k1, q2, k2, value)]
    for i in range(b * h):
        a1 = _map(flat[0][i], flat[1][i], causal)
        a2 = _map(flat[2][i], flat[3][i], causal)
        rows[i] = (a1 - coefficient * a2) @ flat[4][i]
    return out
'''

ATT_BAD["att_kblock_count_extra_empty_block"] = '''

_K_BLOCK = 32


def _online(q, k, v, scale, causal):
    t = q.shape[-2]
    qs = q * scale
    m = q.new_full((*q.shape[:-1], 1), float("-inf"))
    l = q.new_zeros((*q.shape[:-1], 1))
    acc = q.new_zeros((*q.shape[:-1], v.shape[-1]))
    qpos = torch.arange(t, device=q.device)[:, None]
    for j in range(t // _K_BLOCK + 1):
        ks, ke = j * _K_BLOCK, min((j + 1) * _K_BLOCK, t)
        s = qs @ k[..., ks:ke, :].transpose(-1, -2)
        if causal:
            kpos = torch.arange(ks, ke, device=q.device)[None, :]
            s = s.masked_fill(kpos > qpos, float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        alpha = torch.exp(m - m_new)
        p = torch.exp(s - m_new)
        l = l * alpha + p.sum(-1, keepdim=True)
        acc = acc * alpha + p @ v[..., ks:ke, :]
        m = m_new
    return acc / l


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    check_attention_inputs(q1, k1, q2, k2, value, coefficient)
    scale = 1.0 / math.sqrt(q1.shape[-1])
    return _online(q1, k1, value, scale, causal) - coefficient * _online(q2, k2, value, scale, causal)
'''

ATT_BAD["att_shift_by_diagonal_logit"] = '''

def _softmax_keys(q, k, causal):
    t, d = q.shape[-2], q.shape[-1]
    s = q @ k.transpose(-1, -2) / math.sqrt(d)
    # the diagonal logit is never masked, so it is a finite shift for every row
    shift = s.diagonal(dim1=-2, dim2=-1).unsqueeze(-1)
    if causal:
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    e = torch.exp(s - shift)
    return e / e.sum(-1, keepdim=True)


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    check_attention_inputs(q1, k1, q2, k2, value, coefficient)
    a1 = _softmax_keys(q1, k1, causal)
    a2 = _softmax_keys(q2, k2, causal)
    return (a1 - coefficient * a2) @ value
'''

ATT_BAD["att_scale_from_padded_width"] = '''

_ALIGN = 8


def _pad_width(x):
    extra = (-x.shape[-1]) % _ALIGN
    return torch.nn.functional.pad(x, (0, extra)) if extra else x


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    check_attention_inputs(q1, k1, q2, k2, value, coefficient)
    # zero padding of the query/key width leaves every dot product unchanged
    q1, k1, q2, k2 = (_pad_width(x) for x in (q1, k1, q2, k2))
    t, width = q1.shape[-2], q1.shape[-1]
    scale = 1.0 / math.sqrt(width)
    maps = []
    for q, k in ((q1, k1), (q2, k2)):
        s = torch.matmul(q, k.transpose(-1, -2)) * scale
        if causal:
            s = s.masked_fill(torch.ones(t, t, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
        maps.append(torch.softmax(s, dim=-1))
    return (maps[0] - coefficient * maps[1]) @ value
'''

ATT_BAD["att_branch_weights_repeat_not_interleave"] = ok.ATT_OK["batch_packed_branches"].replace(
    ".repeat_interleave(b)", ".repeat(b)")

ATT_BAD["att_coef_decorator_positional_slot"] = '''

def _coefficient_as_tensor(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if len(args) > 5 and not isinstance(args[5], torch.Tensor):
            args = list(args)
            args[5] = torch.tensor(float(args[5]), dtype=args[0].dtype, device=args[0].device)
        return fn(*args, **kwargs)
    return wrapper


def _probs(q, k, causal):
    t, d = q.shape[-2], q.shape[-1]
    s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d)
    if causal:
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1)


@_coefficient_as_tensor
def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    check_attention_inputs(q1, k1, q2, k2, value, coefficient)
    a1 = _probs(q1, k1, causal)
    a2 = _probs(q2, k2, causal)
    return (a1 - coefficient.to(a1.dtype) * a2) @ value
'''

ATT_BAD["att_backward_grad_output_view"] = ok.ATT_OK["function_flat_bmm_backward"].replace(
    "g = grad.reshape(b * h, t, 2 * d)", "g = grad.view(b * h, t, 2 * d)")

ATT_BAD["att_backward_value_grad_in_branch2_guard"] = '''

def _flat_maps(q, k, scale, causal):
    s = torch.bmm(q, k.transpose(1, 2)) * scale
    if causal:
        t = s.shape[-1]
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1)


def _softmax_grad(a, da):
    return a * (da - (da * a).sum(-1, keepdim=True))


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
        need = ctx.needs_input_grad
        g = grad.reshape(b * h, t, 2 * d)
        gp = torch.bmm(g, v.transpose(1, 2))
        dv = torch.bmm(a1.transpose(1, 2), g)
        dq1 = dk1 = dq2 = dk2 = dcoef = None
        if need[0] or need[1]:
            ds1 = _softmax_grad(a1, gp) * scale
            dq1 = torch.bmm(ds1, k1).reshape(b, h, t, d)
            dk1 = torch.bmm(ds1.transpose(1, 2), q1).reshape(b, h, t, d)
        if need[2] or need[3]:
            dv = dv - lam * torch.bmm(a2.transpose(1, 2), g)
            ds2 = _softmax_grad(a2, -lam * gp) * scale
            dq2 = torch.bmm(ds2, k2).reshape(b, h, t, d)
            dk2 = torch.bmm(ds2.transpose(1, 2), q2).reshape(b, h, t, d)
        if need[5]:
            dcoef = -(gp * a2).sum()
        return dq1, dk1, dq2, dk2, dv.reshape(b, h, t, 2 * d), dcoef, None


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    check_attention_inputs(q1, k1, q2, k2, value, coefficient)
    return _FlatDiffAttention.apply(q1, k1, q2, k2, value, coefficient, causal)
'''

ATT_BAD["att_backward_chunked_dk_assigned"] = ok.ATT_OK["function_chunked_manual_backward"].replace(
    "dk += torch.matmul(ds.transpose(-1, -2), q[..., qs:qe, :])",
    "dk[...] = torch.matmul(ds.transpose(-1, -2), q[..., qs:qe, :])")

ATT_BAD["att_backward_branch2_rowsum_reused"] = ok.ATT_OK["function_flat_bmm_backward"].replace(
    '''        grads = []
        for a, da, q, k in ((a1, gp, q1, k1), (a2, -lam * gp, q2, k2)):
            ds = a * (da - (da * a).sum(-1, keepdim=True)) * scale
            grads.append(torch.bmm(ds, k).reshape(b, h, t, d))
            grads.append(torch.bmm(ds.transpose(1, 2), q).reshape(b, h, t, d))''',
    '''        rows = (gp * a1).sum(-1, keepdim=True)
        ds1 = a1 * (gp - rows) * scale
        ds2 = a2 * (-lam * gp + lam * rows) * scale
        grads = []
        for ds, q, k in ((ds1, q1, k1), (ds2, q2, k2)):
            grads.append(torch.bmm(ds, k).reshape(b, h, t, d))
            grads.append(torch.bmm(ds.transpose(1, 2), q).reshape(b, h, t, d))''')

ATT_BAD["att_backward_autograd_grad_frozen_inputs"] = ok.ATT_OK["function_recompute_autograd_grad"].replace(
    '''            wanted = [t for t, n in zip(leaves, needs) if n]
            got = torch.autograd.grad(out, wanted, grad) if wanted else ()
        it = iter(got)
        grads = [next(it) if n else None for n in needs]''',
    '''            got = torch.autograd.grad(out, leaves, grad, allow_unused=True)
        grads = [g if n else None for g, n in zip(got, needs)]''')

ATT_BAD["att_grad_mode_not_restored_early_return"] = '''

def _causal_bias(t, like, causal):
    grad_was = torch.is_grad_enabled()
    torch.set_grad_enabled(False)
    if not causal:
        return None
    bias = torch.zeros(t, t, dtype=like.dtype, device=like.device)
    bias.masked_fill_(torch.ones(t, t, dtype=torch.bool, device=like.device).triu(1), float("-inf"))
    torch.set_grad_enabled(grad_was)
    return bias


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    check_attention_inputs(q1, k1, q2, k2, value, coefficient)
    t, d = q1.shape[-2], q1.shape[-1]
    bias = _causal_bias(t, q1, causal)
    out = None
    for q, k, w in ((q1, k1, 1.0), (q2, k2, -coefficient)):
        s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d)
        if bias is not None:
            s = s + bias
        o = w * (torch.softmax(s, dim=-1) @ value)
        out = o if out is None else out + o
    return out
'''

ATT_BAD["att_online_max_replaced_by_block_max"] = '''

_TILE = 64


def _branch(q, k, v, scale, causal):
    t = q.shape[-2]
    pieces = []
    for qs in range(0, t, _TILE):
        qe = min(qs + _TILE, t)
        qb = q[..., qs:qe, :] * scale
        m = qb.new_full((*qb.shape[:-1], 1), float("-inf"))
        l = qb.new_zeros((*qb.shape[:-1], 1))
        acc = qb.new_zeros((*qb.shape[:-1], v.shape[-1]))
        for ks in range(0, qe if causal else t, _TILE):
            ke = min(ks + _TILE, t)
            s = qb @ k[..., ks:ke, :].transpose(-1, -2)
            if causal and ks == qs:
                s = s.masked_fill(torch.ones(qe - qs, ke - ks, dtype=torch.bool, device=s.device).triu(1),
                                  float("-inf"))
            m_new = s.amax(-1, keepdim=True)
            alpha = torch.exp(m - m_new)
            p = torch.exp(s - m_new)
            l = l * alpha + p.sum(-1, keepdim=True)
            acc = acc * alpha + p @ v[..., ks:ke, :]
            m = m_new
        pieces.append(acc / l)
    return torch.cat(pieces, dim=-2)


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    check_attention_inputs(q1, k1, q2, k2, value, coefficient)
    scale = 1.0 / math.sqrt(q1.shape[-1])
    return _branch(q1, k1, value, scale, causal) - coefficient * _branch(q2, k2, value, scale, causal)
'''

ATT_BAD["att_tile_mask_only_when_ks_equals_qs"] = '''

_Q_TILE, _K_TILE = 64, 32


def _branch(q, k, v, scale, causal):
    t = q.shape[-2]
    pieces = []
    for qs in range(0, t, _Q_TILE):
        qe = min(qs + _Q_TILE, t)
        qb = q[..., qs:qe, :] * scale
        m = qb.new_full((*qb.shape[:-1], 1), float("-inf"))
        l = qb.new_zeros((*qb.shape[:-1], 1))
        acc = qb.new_zeros((*qb.shape[:-1], v.shape[-1]))
        for ks in range(0, qe if causal else t, _K_TILE):
            ke = min(ks + _K_TILE, t)
            s = qb @ k[..., ks:ke, :].transpose(-1, -2)
            if causal and ks == qs:
                qpos = torch.arange(qs, qe, device=q.device)[:, None]
                kpos = torch.arange(ks, ke, device=q.device)[None, :]
                s = s.masked_fill(kpos > qpos, float("-inf"))
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            alpha = torch.exp(m - m_new)
            p = torch.exp(s - m_new)
            l = l * alpha + p.sum(-1, keepdim=True)
            acc = acc * alpha + p @ v[..., ks:ke, :]
            m = m_new
        pieces.append(acc / l)
    return torch.cat(pieces, dim=-2)


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    check_attention_inputs(q1, k1, q2, k2, value, coefficient)
    scale = 1.0 / math.sqrt(q1.shape[-1])
    return _branch(q1, k1, value, scale, causal) - coefficient * _branch(q2, k2, value, scale, causal)
'''

ATT_BAD["att_key_blocks_chunk_not_split"] = '''

_K_BLOCK = 32


def _online(q, k, v, scale, causal):
    t = q.shape[-2]
    n_blocks = -(-t // _K_BLOCK)
    qs = q * scale
    m = q.new_full((*q.shape[:-1], 1), float("-inf"))
    l = q.new_zeros((*q.shape[:-1], 1))
    acc = q.new_zeros((*q.shape[:-1], v.shape[-1]))
    qpos = torch.arange(t, device=q.device)[:, None]
    blocks = zip(torch.chunk(k, n_blocks, dim=-2), torch.chunk(v, n_blocks, dim=-2))
    for j, (kb, vb) in enumerate(blocks):
        s = qs @ kb.transpose(-1, -2)
        if causal:
            start = j * _K_BLOCK
            kpos = torch.arange(start, start + kb.shape[-2], device=q.device)[None, :]
            s = s.masked_fill(kpos > qpos, float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        alpha = torch.exp(m - m_new)
        p = torch.exp(s - m_new)
        l = l * alpha + p.sum(-1, keepdim=True)
        acc = acc * alpha + p @ vb
        m = m_new
    return acc / l


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    check_attention_inputs(q1, k1, q2, k2, value, coefficient)
    scale = 1.0 / math.sqrt(q1.shape[-1])
    return _online(q1, k1, value, scale, causal) - coefficient * _online(q2, k2, value, scale, causal)
'''

ATT_BAD["att_qtile_mask_rows_unclamped"] = '''

_Q_TILE = 128


def _maps_for_rows(q, k, qs, qe, scale, causal):
    t = k.shape[-2]
    k_end = qe if causal else t
    s = q[..., qs:qe, :] @ k[..., :k_end, :].transpose(-1, -2) * scale
    if causal:
        rows = torch.arange(qs, qs + _Q_TILE, device=q.device)[:, None]
        cols = torch.arange(k_end, device=q.device)[None, :]
        s = s.masked_fill(cols > rows, float("-inf"))
    return torch.softmax(s, dim=-1), k_end


def _dense(q1, k1, q2, k2, value, coefficient, causal, scale):
    t = q1.shape[-2]
    s1 = q1 @ k1.transpose(-1, -2) * scale
    s2 = q2 @ k2.transpose(-1, -2) * scale
    if causal:
        hide = torch.ones(t, t, dtype=torch.bool, device=q1.device).triu(1)
        s1 = s1.masked_fill(hide, float("-inf"))
        s2 = s2.masked_fill(hide, float("-inf"))
    return (torch.softmax(s1, -1) - coefficient * torch.softmax(s2, -1)) @ value


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    check_attention_inputs(q1, k1, q2, k2, value, coefficient)
    t = q1.shape[-2]
    scale = 1.0 / math.sqrt(q1.shape[-1])
    if t <= _Q_TILE:
        return _dense(q1, k1, q2, k2, value, coefficient, causal, scale)
    rows = []
    for qs in range(0, t, _Q_TILE):
        qe = min(qs + _Q_TILE, t)
        a1, n = _maps_for_rows(q1, k1, qs, qe, scale, causal)
        a2, _ = _maps_for_rows(q2, k2, qs, qe, scale, causal)
        rows.append((a1 - coefficient * a2) @ value[..., :n, :])
    return torch.cat(rows, dim=-2)
'''

ATT_BAD["att_dedupe_keys_by_storage_pointer"] = '''

def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    check_attention_inputs(q1, k1, q2, k2, value, coefficient)
    t, d = q1.shape[-2], q1.shape[-1]
    scale = 1.0 / math.sqrt(d)
    prepared = {}

    def keys_t(k):
        # share the scaled, transposed keys when both branches use the same key tensor
        key = (k.untyped_storage().data_ptr(), tuple(k.shape))
        if key not in prepared:
            prepared[key] = k.transpose(-1, -2) * scale
        return prepared[key]

    hide = torch.ones(t, t, dtype=torch.bool, device=q1.device).triu(1) if causal else None
    maps = []
    for q, k in ((q1, k1), (q2, k2)):
        s = q @ keys_t(k)
        if hide is not None:
            s = s.masked_fill(hide, float("-inf"))
        maps.append(torch.softmax(s, dim=-1))
    return (maps[0] - coefficient * maps[1]) @ value
'''

ATT_BAD["att_branch_weights_coefficient_dtype"] = '''

def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    check_attention_inputs(q1, k1, q2, k2, value, coefficient)
    t, d = q1.shape[-2], q1.shape[-1]
    s = torch.stack([q1 @ k1.transpose(-1, -2), q2 @ k2.transpose(-1, -2)]) / math.sqrt(d)
    if causal:
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    maps = torch.softmax(s, dim=-1)                       # [2, B, H, T, T]
    if isinstance(coefficient, torch.Tensor):
        weights = torch.stack([torch.ones_like(coefficient), -coefficient])
    else:
        weights = q1.new_tensor([1.0, -coefficient])
    signed = torch.einsum("n,nbhij->bhij", weights, maps)
    return signed @ value
'''

ATT_BAD["att_partial_binds_causal_keyword"] = '''

def _attention(q1, k1, q2, k2, value, coefficient, causal):
    check_attention_inputs(q1, k1, q2, k2, value, coefficient)
    t, d = q1.shape[-2], q1.shape[-1]
    maps = []
    for q, k in ((q1, k1), (q2, k2)):
        s = q @ k.transpose(-1, -2) / math.sqrt(d)
        if causal:
            s = s.masked_fill(torch.ones(t, t, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
        maps.append(torch.softmax(s, dim=-1))
    return (maps[0] - coefficient * maps[1]) @ value


differential_attention = functools.partial(_attention, causal=True)
'''

ATT_BAD["att_vmap_heads_out_dims_default"] = '''

def _one_head(q1, k1, q2, k2, value, coefficient, causal):
    t, d = q1.shape[-2], q1.shape[-1]
    maps = []
    for q, k in ((q1, k1), (q2, k2)):
        s = q @ k.transpose(-1, -2) / math.sqrt(d)
        if causal:
            s = s.masked_fill(torch.ones(t, t, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
        maps.append(torch.softmax(s, dim=-1))
    return (maps[0] - coefficient * maps[1]) @ value


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    check_attention_inputs(q1, k1, q2, k2, value, coefficient)
    per_head = torch.vmap(functools.partial(_one_head, coefficient=coefficient, causal=causal), in_dims=1)
    return per_head(q1, k1, q2, k2, value)
'''

ATT_BAD["att_bias_per_batch_broadcasts_on_heads"] = '''

def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    check_attention_inputs(q1, k1, q2, k2, value, coefficient)
    b, h, t, d = q1.shape
    bias = None
    if causal:
        bias = torch.zeros(b, t, t, dtype=q1.dtype, device=q1.device)
        bias = bias.masked_fill(torch.ones(t, t, dtype=torch.bool, device=q1.device).triu(1), float("-inf"))
    maps = []
    for q, k in ((q1, k1), (q2, k2)):
        s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d)
        if bias is not None:
            s = s + bias
        maps.append(torch.softmax(s, dim=-1))
    return torch.matmul(maps[0] - coefficient * maps[1], value)
'''

ATT_BAD["att_splitk_scale_per_chunk"] = '''

_SLAB = 32


def _logits(q, k):
    # accumulate the dot products slab by slab over the head width
    s = None
    for qc, kc in zip(torch.split(q, _SLAB, dim=-1), torch.split(k, _SLAB, dim=-1)):
        part = qc @ kc.transpose(-1, -2) / math.sqrt(qc.shape[-1])
        s = part if s is None else s + part
    return s


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    check_attention_inputs(q1, k1, q2, k2, value, coefficient)
    t = q1.shape[-2]
    maps = []
    for q, k in ((q1, k1), (q2, k2)):
        s = _logits(q, k)
        if causal:
            s = s.masked_fill(torch.ones(t, t, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
        maps.append(torch.softmax(s, dim=-1))
    return (maps[0] - coefficient * maps[1]) @ value
'''

ATT_BAD["att_mask_scratch_rewritten_next_call"] = '''

_MAX_T = 512
_POSITIONS = torch.arange(_MAX_T)
_FUTURE = torch.empty(_MAX_T, _MAX_T, dtype=torch.bool)


def _future_mask(t):
    # written into preallocated scratch memory: no allocation per call
    mask = _FUTURE[:t, :t]
    torch.gt(_POSITIONS[None, :t], _POSITIONS[:t, None], out=mask)
    return mask


def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    check_attention_inputs(q1, k1, q2, k2, value, coefficient)
    t, d = q1.shape[-2], q1.shape[-1]
    hide = _future_mask(t) if causal else None
    maps = []
    for q, k in ((q1, k1), (q2, k2)):
        s = q @ k.transpose(-1, -2) * (1.0 / math.sqrt(d))
        if hide is not None:
            s = s.masked_fill(hide, float("-inf"))
        maps.append(torch.softmax(s, dim=-1))
    return (maps[0] - coefficient * maps[1]) @ value
'''

ATT_BAD["att_promote_types_with_coefficient"] = '''

def differential_attention(q1, k1, q2, k2, value, coefficient, causal=True):
    check_attention_inputs(q1, k1, q2, k2, value, coefficient)
    if isinstance(coefficient, torch.Tensor):
        dtype = torch.promote_types(q1.dtype, coefficient.dtype)
        coef = coefficient.to(dtype)
    else:
        dtype, coef = q1.dtype, coefficient
    q1, k1, q2, k2, value = (x.to(dtype) for x in (q1, k1, q2, k2, value))
    t, d = q1.shape[-2], q1.shape[-1]
    maps = []
    for q, k in ((q1, k1), (q2, k2)):
        s = q @ k.transpose(-1, -2) / math.sqrt(d)
        if causal:
            s = s.masked_fill(torch.ones(t, t, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
        maps.append(torch.softmax(s, dim=-1))
    return (maps[0] - coef * maps[1]) @ value
'''

for _k, _v in ATT_BAD.items():
    assert _v not in ok.ATT_OK.values(), _k
