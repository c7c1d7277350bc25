"""Correct base implementations (each published as a correct/ file)."""

BASES = {}
STYLES = {}

STYLES["lse_query_key_tiles_grouped_combine"] = (
    "two-level tiling: query tiles of 48 rows against key tiles of 40 keys, each tile reduced to (log-normaliser, "
    "normalised output) and merged in the log domain with torch.logaddexp; rows whose keys in a tile are all in the "
    "future get a -inf log-normaliser through torch.where; the pair combination works on a [B, T, Hkv, G/2, 2, D] view "
    "with the gate unflattened to [B, T, Hkv, G/2].")
BASES["lse_query_key_tiles_grouped_combine"] = '''
_QUERY_TILE, _KEY_TILE = 48, 40


def _heads_first(x: torch.Tensor, reps: int) -> torch.Tensor:
    x = x.transpose(1, 2)
    return x.repeat_interleave(reps, dim=1) if reps > 1 else x


def gqa_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True
) -> torch.Tensor:
    check_gqa_inputs(q, k, v)
    b, t, hq, d = q.shape
    g = hq // k.shape[2]
    qh = q.transpose(1, 2) * (1.0 / math.sqrt(d))
    kh, vh = _heads_first(k, g), _heads_first(v, g)
    pos = torch.arange(t, device=q.device)
    tiles = []
    for qs in range(0, t, _QUERY_TILE):
        qe = min(qs + _QUERY_TILE, t)
        lse = acc = None
        for ks in range(0, qe if causal else t, _KEY_TILE):
            ke = min(ks + _KEY_TILE, t)
            s = qh[:, :, qs:qe] @ kh[:, :, ks:ke].transpose(-1, -2)
            if causal:
                s = s.masked_fill(pos[None, ks:ke] > pos[qs:qe, None], float("-inf"))
            m = s.amax(dim=-1, keepdim=True).detach()
            m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
            e = torch.exp(s - m)
            den = e.sum(dim=-1, keepdim=True)
            seen = den > 0
            safe = torch.where(seen, den, torch.ones_like(den))
            o = (e @ vh[:, :, ks:ke]) / safe
            l = torch.where(seen, m + torch.log(safe), torch.full_like(den, float("-inf")))
            if lse is None:
                lse, acc = l, o
            else:
                new = torch.logaddexp(lse, l)
                acc = acc * torch.exp(lse - new) + o * torch.exp(l - new)
                lse = new
        tiles.append(acc)
    return torch.cat(tiles, dim=2).transpose(1, 2)


def diff_v2_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    lambda_logits: torch.Tensor,
    causal: bool = True,
) -> torch.Tensor:
    check_diff_v2_inputs(q, k, v, lambda_logits)
    hq, hkv = q.shape[2], k.shape[2]
    half = hq // hkv // 2
    att = gqa_attention(q, k, v, causal).unflatten(2, (hkv, half, 2))
    gate = torch.sigmoid(lambda_logits).unflatten(-1, (hkv, half))
    out = att[..., 0, :] - gate.unsqueeze(-1) * att[..., 1, :]
    return out.flatten(2, 3)
'''

STYLES["setup_context_function_lse_recompute"] = (
    "new-style torch.autograd.Function (forward without ctx, separate setup_context) returning (out, lse) with lse "
    "marked non-differentiable; the backward recomputes the weights as exp(s - lse) through a shared _scores helper "
    "and uses the FlashAttention-2 delta rowsum(dO * O); graph-free calls run the static forward directly; gate "
    "torch.special.expit.")
BASES["setup_context_function_lse_recompute"] = '''
def _scores(qh: torch.Tensor, kh: torch.Tensor, scale: float, causal: bool = True) -> torch.Tensor:
    s = (qh @ kh.transpose(-1, -2)) * scale
    if causal:
        t = qh.shape[-2]
        future = torch.ones(t, t, dtype=torch.bool, device=qh.device).triu(1)
        s = s.masked_fill(future, float("-inf"))
    return s


def _expand(x: torch.Tensor, g: int) -> torch.Tensor:
    return x.transpose(1, 2).repeat_interleave(g, dim=1)


class _GroupedAttention(torch.autograd.Function):
    @staticmethod
    def forward(q, k, v, causal):
        g = q.shape[2] // k.shape[2]
        s = _scores(q.transpose(1, 2), _expand(k, g), 1.0 / math.sqrt(q.shape[-1]), causal)
        lse = torch.logsumexp(s, dim=-1, keepdim=True)
        out = torch.exp(s - lse) @ _expand(v, g)
        return out, lse

    @staticmethod
    def setup_context(ctx, inputs, output):
        q, k, v, causal = inputs
        out, lse = output
        ctx.causal = causal
        ctx.mark_non_differentiable(lse)
        ctx.save_for_backward(q, k, v, out, lse)

    @staticmethod
    def backward(ctx, grad_out, grad_lse):
        q, k, v, out, lse = ctx.saved_tensors
        b, t, hq, d = q.shape
        hkv = k.shape[2]
        g = hq // hkv
        scale = 1.0 / math.sqrt(d)
        qh, kh, vh = q.transpose(1, 2), _expand(k, g), _expand(v, g)
        p = torch.exp(_scores(qh, kh, scale, ctx.causal) - lse)
        dv = p.transpose(-1, -2) @ grad_out
        dp = grad_out @ vh.transpose(-1, -2)
        delta = (grad_out * out).sum(dim=-1, keepdim=True)
        ds = p * (dp - delta) * scale
        dq = (ds @ kh).transpose(1, 2)
        dk = (ds.transpose(-1, -2) @ qh).reshape(b, hkv, g, t, d).sum(2).transpose(1, 2)
        dv = dv.reshape(b, hkv, g, t, d).sum(2).transpose(1, 2)
        return dq, dk, dv, None


def gqa_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True
) -> torch.Tensor:
    check_gqa_inputs(q, k, v)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        out, _ = _GroupedAttention.apply(q, k, v, causal)
    else:
        out = _GroupedAttention.forward(q, k, v, causal)[0]
    return out.transpose(1, 2)


def diff_v2_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    lambda_logits: torch.Tensor,
    causal: bool = True,
) -> torch.Tensor:
    check_diff_v2_inputs(q, k, v, lambda_logits)
    att = gqa_attention(q, k, v, causal)
    gate = torch.special.expit(lambda_logits).unsqueeze(-1)
    return att[:, :, 0::2] - att[:, :, 1::2] * gate
'''

STYLES["grouped_5d_bias_pair_softmax_gate"] = (
    "queries unflattened to [B, Hkv, G, T, D] and matmul-broadcast against [B, Hkv, 1, T, D] keys, additive 0/-inf "
    "bias in the input dtype; the gate is the first entry of softmax([l, 0]) (= sigmoid(l)) and the pair is reduced "
    "by a per-token weight vector [1, -gate] over a [B, T, H, 2, D] view.")
BASES["grouped_5d_bias_pair_softmax_gate"] = '''
def gqa_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True
) -> torch.Tensor:
    check_gqa_inputs(q, k, v)
    b, t, hq, d = q.shape
    hkv = k.shape[2]
    qg = q.unflatten(2, (hkv, hq // hkv)).permute(0, 2, 3, 1, 4)
    kg = k.transpose(1, 2).unsqueeze(2)
    vg = v.transpose(1, 2).unsqueeze(2)
    s = torch.matmul(qg, kg.transpose(-1, -2)) * d ** -0.5
    if causal:
        bias = torch.zeros(t, t, dtype=q.dtype, device=q.device)
        future = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
        s = s + bias.masked_fill(future, float("-inf"))
    w = torch.softmax(s, dim=-1)
    return torch.matmul(w, vg).permute(0, 3, 1, 2, 4).flatten(2, 3)


def diff_v2_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    lambda_logits: torch.Tensor,
    causal: bool = True,
) -> torch.Tensor:
    check_diff_v2_inputs(q, k, v, lambda_logits)
    att = gqa_attention(q, k, v, causal).unflatten(2, (-1, 2))
    logits = torch.stack((lambda_logits, torch.zeros_like(lambda_logits)), dim=-1)
    gate = torch.softmax(logits, dim=-1)[..., :1]
    weights = torch.cat((torch.ones_like(gate), -gate), dim=-1)
    return (att * weights.unsqueeze(-1)).sum(dim=3)
'''

STYLES["query_chunks_37_clamped_branch_sigmoid"] = (
    "queries processed in chunks of 37 tokens, a causal chunk reading only the key prefix up to its last token and "
    "masking by comparing global positions; the gate is a two-branch sigmoid whose exponentials only ever see "
    "clamped arguments (exp(-max(l, 0)) and exp(min(l, 0))), selected with torch.where; pairs via unflatten + unbind.")
BASES["query_chunks_37_clamped_branch_sigmoid"] = '''
_CHUNK = 37


def _sigmoid(x: torch.Tensor) -> torch.Tensor:
    pos = 1.0 / (1.0 + torch.exp(-x.clamp(min=0)))
    e = torch.exp(x.clamp(max=0))
    neg = e / (1.0 + e)
    return torch.where(x >= 0, pos, neg)


def gqa_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True
) -> torch.Tensor:
    check_gqa_inputs(q, k, v)
    b, t, hq, d = q.shape
    g = hq // k.shape[2]
    qh = q.transpose(1, 2)
    kh = k.transpose(1, 2).repeat_interleave(g, dim=1)
    vh = v.transpose(1, 2).repeat_interleave(g, dim=1)
    pos = torch.arange(t, device=q.device)
    outs = []
    for qs in range(0, t, _CHUNK):
        qe = min(qs + _CHUNK, t)
        stop = qe if causal else t
        s = torch.matmul(qh[:, :, qs:qe], kh[:, :, :stop].transpose(-1, -2)) / math.sqrt(d)
        if causal:
            s = s.masked_fill(pos[None, :stop] > pos[qs:qe, None], float("-inf"))
        outs.append(torch.matmul(torch.softmax(s, dim=-1), vh[:, :, :stop]))
    return torch.cat(outs, dim=2).transpose(1, 2)


def diff_v2_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    lambda_logits: torch.Tensor,
    causal: bool = True,
) -> torch.Tensor:
    check_diff_v2_inputs(q, k, v, lambda_logits)
    att = gqa_attention(q, k, v, causal)
    even, odd = att.unflatten(2, (-1, 2)).unbind(3)
    return even - _sigmoid(lambda_logits).unsqueeze(-1) * odd
'''

STYLES["bmm_batch_heads_custom_gate_function"] = (
    "batch and heads folded into one bmm batch axis ([B * Hq, T, D], batch-major), kv repeated before folding; the "
    "pair combination is a custom autograd.Function (even, odd, logits) with a hand-written backward whose gate "
    "gradient is accumulated into a zeros_like buffer.")
BASES["bmm_batch_heads_custom_gate_function"] = '''
class _GatedPair(torch.autograd.Function):
    @staticmethod
    def forward(ctx, even, odd, logits):
        gate = torch.sigmoid(logits).unsqueeze(-1)
        ctx.save_for_backward(odd, gate)
        return even - gate * odd

    @staticmethod
    def backward(ctx, grad):
        odd, gate = ctx.saved_tensors
        g_logits = torch.zeros_like(gate[..., 0])
        g_logits.sub_((grad * odd).sum(-1) * (gate * (1.0 - gate))[..., 0])
        return grad, -gate * grad, g_logits


def gqa_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True
) -> torch.Tensor:
    check_gqa_inputs(q, k, v)
    b, t, hq, d = q.shape
    g = hq // k.shape[2]
    q3 = q.permute(0, 2, 1, 3).reshape(b * hq, t, d)
    k3 = k.repeat_interleave(g, dim=2).permute(0, 2, 1, 3).reshape(b * hq, t, d)
    v3 = v.repeat_interleave(g, dim=2).permute(0, 2, 1, 3).reshape(b * hq, t, d)
    s = torch.bmm(q3, k3.transpose(1, 2)).mul(1.0 / math.sqrt(d))
    if causal:
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    o = torch.bmm(torch.softmax(s, dim=-1), v3)
    return o.reshape(b, hq, t, d).permute(0, 2, 1, 3)


def diff_v2_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    lambda_logits: torch.Tensor,
    causal: bool = True,
) -> torch.Tensor:
    check_diff_v2_inputs(q, k, v, lambda_logits)
    att = gqa_attention(q, k, v, causal)
    return _GatedPair.apply(att[:, :, 0::2], att[:, :, 1::2], lambda_logits)
'''

STYLES["eval_fast_path_inplace_softmax"] = (
    "two code paths: calls that need no graph (grad disabled or no input requiring grad) run an in-place softmax "
    "(mul_, masked_fill_, sub_, exp_, div_) on internal buffers and gate the odd heads in place; training calls use "
    "plain out-of-place ops; diff_v2_attention's graph-free branch runs under torch.no_grad().")
BASES["eval_fast_path_inplace_softmax"] = '''
def _needs_graph(*tensors: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and any(x.requires_grad for x in tensors)


def _eval_gqa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    b, t, hq, d = q.shape
    g = hq // k.shape[2]
    qh = q.transpose(1, 2)
    kh = k.transpose(1, 2).repeat_interleave(g, dim=1)
    vh = v.transpose(1, 2).repeat_interleave(g, dim=1)
    s = torch.matmul(qh, kh.transpose(-1, -2))
    s.mul_(1.0 / math.sqrt(d))
    if causal:
        s.masked_fill_(torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    s.sub_(s.amax(dim=-1, keepdim=True)).exp_()
    s.div_(s.sum(dim=-1, keepdim=True))
    return torch.matmul(s, vh).transpose(1, 2)


def gqa_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True
) -> torch.Tensor:
    check_gqa_inputs(q, k, v)
    if not _needs_graph(q, k, v):
        return _eval_gqa(q, k, v, causal)
    b, t, hq, d = q.shape
    g = hq // k.shape[2]
    qh = q.transpose(1, 2)
    kh = k.transpose(1, 2).repeat_interleave(g, dim=1)
    vh = v.transpose(1, 2).repeat_interleave(g, dim=1)
    s = torch.matmul(qh, kh.transpose(-1, -2)) / math.sqrt(d)
    if causal:
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return torch.matmul(torch.softmax(s, dim=-1), vh).transpose(1, 2)


def diff_v2_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    lambda_logits: torch.Tensor,
    causal: bool = True,
) -> torch.Tensor:
    check_diff_v2_inputs(q, k, v, lambda_logits)
    if not _needs_graph(q, k, v, lambda_logits):
        with torch.no_grad():
            att = gqa_attention(q, k, v, causal)
            odd = att[:, :, 1::2]
            odd.mul_(torch.sigmoid(lambda_logits).unsqueeze(-1))
            return att[:, :, 0::2] - odd
    att = gqa_attention(q, k, v, causal)
    gate = torch.sigmoid(lambda_logits)[..., None]
    return att[:, :, 0::2] - gate * att[:, :, 1::2]
'''

STYLES["block_size_tril_buffer_index_select"] = (
    "nanoGPT-style module-level lower-triangular boolean buffer of block size 256 sliced to [T, T] (built on the fly "
    "beyond the block size); kv heads gathered with index_select of arange(Hq) // G; einsum in the [B, T, H, D] "
    "layout; pair combination with torch.sub.")
BASES["block_size_tril_buffer_index_select"] = '''
_BLOCK_SIZE = 256
_TRIL = torch.tril(torch.ones(_BLOCK_SIZE, _BLOCK_SIZE, dtype=torch.bool))


def _keep(t: int, device: torch.device) -> torch.Tensor:
    if t <= _BLOCK_SIZE:
        return _TRIL[:t, :t].to(device)
    return torch.ones(t, t, dtype=torch.bool, device=device).tril()


def gqa_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True
) -> torch.Tensor:
    check_gqa_inputs(q, k, v)
    b, t, hq, d = q.shape
    hkv = k.shape[2]
    idx = torch.arange(hq, device=q.device) // (hq // hkv)
    kk = k.index_select(2, idx)
    vv = v.index_select(2, idx)
    att = torch.einsum("bthd,bshd->bhts", q, kk) * (1.0 / math.sqrt(d))
    if causal:
        att = att.masked_fill(~_keep(t, q.device), float("-inf"))
    att = torch.softmax(att, dim=-1)
    return torch.einsum("bhts,bshd->bthd", att, vv)


def diff_v2_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    lambda_logits: torch.Tensor,
    causal: bool = True,
) -> torch.Tensor:
    check_diff_v2_inputs(q, k, v, lambda_logits)
    att = gqa_attention(q, k, v, causal)
    return torch.sub(att[:, :, 0::2], att[:, :, 1::2] * torch.sigmoid(lambda_logits).unsqueeze(-1))
'''

STYLES["advanced_index_where_mask_signed_pair_map"] = (
    "kv heads picked by advanced indexing with arange(Hq).div(G, rounding_mode='floor'), the future hidden with "
    "torch.where against a -inf scalar; diff_v2_attention does not call gqa_attention: it scores q unflattened to "
    "[B, T, H, 2, D] against the pair's kv head (2i // G), builds the signed map P_even - gate * P_odd per query "
    "token and applies it to the values once.")
BASES["advanced_index_where_mask_signed_pair_map"] = '''
def _future(t: int, device: torch.device) -> torch.Tensor:
    pos = torch.arange(t, device=device)
    return pos.unsqueeze(0) > pos.unsqueeze(1)


def gqa_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True
) -> torch.Tensor:
    check_gqa_inputs(q, k, v)
    b, t, hq, d = q.shape
    g = hq // k.shape[2]
    kv_of = torch.arange(hq, device=q.device).div(g, rounding_mode="floor")
    s = torch.einsum("bqhd,bkhd->bhqk", q, k[:, :, kv_of]) / math.sqrt(d)
    if causal:
        s = torch.where(_future(t, q.device), float("-inf"), s)
    return torch.einsum("bhqk,bkhd->bqhd", torch.softmax(s, dim=-1), v[:, :, kv_of])


def diff_v2_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    lambda_logits: torch.Tensor,
    causal: bool = True,
) -> torch.Tensor:
    check_diff_v2_inputs(q, k, v, lambda_logits)
    b, t, hq, d = q.shape
    h, hkv = hq // 2, k.shape[2]
    g = hq // hkv
    kv_of = torch.arange(h, device=q.device) * 2 // g
    qp = q.unflatten(2, (h, 2))
    kp, vp = k[:, :, kv_of], v[:, :, kv_of]
    s = torch.einsum("bqhpd,bkhd->bhpqk", qp, kp) / math.sqrt(d)
    if causal:
        s = torch.where(_future(t, q.device), float("-inf"), s)
    p = torch.softmax(s, dim=-1)
    gate = torch.sigmoid(lambda_logits).transpose(1, 2).unsqueeze(-1)
    signed = p[:, :, 0] - gate * p[:, :, 1]
    return torch.einsum("bhqk,bkhd->bqhd", signed, vp)
'''

STYLES["even_odd_stream_calls_sequence_first_combine"] = (
    "diff_v2_attention calls gqa_attention twice, on the strided even-head and odd-head views of q (each stream "
    "has group size G/2, so head i reads kv head i // (G/2) = 2i // G); the streams and the gate are flattened "
    "sequence-first (token-major rows, as nn.MultiheadAttention lays them out) for the combination; gqa_attention "
    "skips the repeat when Hkv == Hq and masks with a full(-inf).triu(1) additive bias.")
BASES["even_odd_stream_calls_sequence_first_combine"] = '''
def gqa_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True
) -> torch.Tensor:
    check_gqa_inputs(q, k, v)
    b, t, hq, d = q.shape
    hkv = k.shape[2]
    qh = q.transpose(1, 2)
    if hkv == hq:
        kh, vh = k.transpose(1, 2), v.transpose(1, 2)
    else:
        kh = k.transpose(1, 2).repeat_interleave(hq // hkv, dim=1)
        vh = v.transpose(1, 2).repeat_interleave(hq // hkv, dim=1)
    s = torch.matmul(qh, kh.transpose(2, 3)).div(math.sqrt(d))
    if causal:
        s = s + torch.full((t, t), float("-inf"), dtype=q.dtype, device=q.device).triu(1)
    return torch.matmul(torch.softmax(s, dim=-1), vh).transpose(1, 2)


def diff_v2_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    lambda_logits: torch.Tensor,
    causal: bool = True,
) -> torch.Tensor:
    check_diff_v2_inputs(q, k, v, lambda_logits)
    b, t, hq, d = q.shape
    h = hq // 2
    even = gqa_attention(q[:, :, 0::2], k, v, causal)
    odd = gqa_attention(q[:, :, 1::2], k, v, causal)
    even = even.transpose(0, 1).reshape(t * b, h, d)
    odd = odd.transpose(0, 1).reshape(t * b, h, d)
    gate = torch.sigmoid(lambda_logits).transpose(0, 1).reshape(t * b, h, 1)
    return (even - gate * odd).reshape(t, b, h, d).transpose(0, 1)
'''

STYLES["split_k_flash_decoding_combine"] = (
    "split-K (flash-decoding) softmax: keys zero-padded to a multiple of 24 and cut into splits scored all at once "
    "([B, Hkv, G, n_splits, T, 24]); each split keeps its detached row maximum, its sum of exponentials and its "
    "unnormalised output, and the splits are combined with weights exp(m_j - max_j m_j); padding and the future are "
    "one boolean mask; gate exp(-softplus(-l)).")
BASES["split_k_flash_decoding_combine"] = '''
_SPLIT = 24


def gqa_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True
) -> torch.Tensor:
    check_gqa_inputs(q, k, v)
    b, t, hq, d = q.shape
    hkv = k.shape[2]
    g = hq // hkv
    n = -(-t // _SPLIT)
    pad = n * _SPLIT - t
    qg = q.reshape(b, t, hkv, g, d).permute(0, 2, 3, 1, 4).unsqueeze(3)
    ks = torch.nn.functional.pad(k, (0, 0, 0, 0, 0, pad)).transpose(1, 2).unflatten(2, (n, _SPLIT)).unsqueeze(2)
    vs = torch.nn.functional.pad(v, (0, 0, 0, 0, 0, pad)).transpose(1, 2).unflatten(2, (n, _SPLIT)).unsqueeze(2)
    s = torch.matmul(qg, ks.transpose(-1, -2)) / math.sqrt(d)
    kpos = torch.arange(n * _SPLIT, device=q.device).view(n, 1, _SPLIT)
    hide = kpos >= t
    if causal:
        hide = hide | (kpos > torch.arange(t, device=q.device).view(1, t, 1))
    s = s.masked_fill(hide, float("-inf"))
    mx = s.amax(dim=-1, keepdim=True).detach()
    m = torch.where(torch.isinf(mx), torch.zeros_like(mx), mx)
    e = torch.exp(s - m)
    l = e.sum(dim=-1, keepdim=True)
    o = torch.matmul(e, vs)
    w = torch.exp(mx - mx.amax(dim=3, keepdim=True))
    out = (w * o).sum(3) / (w * l).sum(3)
    return out.permute(0, 3, 1, 2, 4).reshape(b, t, hq, d)


def diff_v2_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    lambda_logits: torch.Tensor,
    causal: bool = True,
) -> torch.Tensor:
    check_diff_v2_inputs(q, k, v, lambda_logits)
    att = gqa_attention(q, k, v, causal)
    gate = torch.exp(-torch.nn.functional.softplus(-lambda_logits))
    return att[:, :, ::2] - gate[..., None] * att[:, :, 1::2]
'''
