"""The wrong files: one textual change of one base each (the replaced text must occur exactly once)."""

L = "lse_query_key_tiles_grouped_combine"
F = "setup_context_function_lse_recompute"
P = "grouped_5d_bias_pair_softmax_gate"
C = "query_chunks_37_clamped_branch_sigmoid"
M = "bmm_batch_heads_custom_gate_function"
E = "eval_fast_path_inplace_softmax"
N = "block_size_tril_buffer_index_select"
X = "advanced_index_where_mask_signed_pair_map"
S = "even_odd_stream_calls_sequence_first_combine"
K = "split_k_flash_decoding_combine"

BUGS = {}


def bug(name, base, old, new, **label):
    BUGS[name] = dict(base=base, old=old, new=new, label=label)


# ------------------------------------------------------------------ gqa_attention
bug("lse_empty_tile_normaliser_clamped", L,
    "l = torch.where(seen, m + torch.log(safe), torch.full_like(den, float(\"-inf\")))",
    "l = m + torch.log(den.clamp_min(1e-30))",
    function="gqa_attention", tier="T2", component="stability",
    bug="A key tile in which a row sees no key gets the log-normaliser m + log(1e-30) = -69 instead of -inf; "
        "logaddexp then lifts every such row's running log-normaliser to at least -69, so a row whose visible "
        "logits all lie far below -69 is scaled down by exp(lse - (-69)) and its output collapses towards zero.",
    where="causal=True with T > 40 (a query tile meeting a key tile that starts after some of its rows), "
          "rows whose log-normaliser lies below about -60 in float32 or -40 in float64 (all visible logits "
          "strongly negative); below -69 the rows collapse",
    names=["empty key tile", "log-normaliser", "clamp 1e-30", "very negative logits", "-inf"])

bug("lse_merge_log_of_exp_sum", L,
    "new = torch.logaddexp(lse, l)",
    "new = torch.log(torch.exp(lse) + torch.exp(l))",
    function="gqa_attention", tier="T2", component="stability",
    bug="The log-normalisers of two key tiles are merged as log(exp(a) + exp(b)) instead of logaddexp(a, b): "
        "once a row's log-normaliser exceeds ~88 in float32 (~709 in float64) exp overflows, the merged value is "
        "inf and the row's output becomes 0 or NaN.",
    where="T > 40 (two or more key tiles) with row log-normalisers above ~88 or below ~-103 in float32 "
          "(e.g. every logit near +120 or -120), beyond ~+-709 in float64",
    names=["logaddexp", "log-sum-exp merge", "exp overflow", "float32", "key tiles"])

bug("lse_empty_tile_max_not_guarded", L,
    "            m = torch.where(torch.isinf(m), torch.zeros_like(m), m)\n",
    "",
    function="gqa_attention", tier="T2", component="stability",
    bug="The row maximum of a key tile is used as the shift without replacing the -inf of rows that see no key "
        "in that tile, so exp(-inf - (-inf)) = NaN fills those rows and the NaN reaches the output through the "
        "tile merge (NaN * 0).",
    where="causal=True with T > 40 (rows of a query tile whose keys in a later key tile are all in the future)",
    names=["-inf maximum", "fully masked tile row", "NaN", "shift guard", "key tile"])

bug("split_padding_mask_off_by_one", K,
    "hide = kpos >= t",
    "hide = kpos > t",
    function="gqa_attention", tier="T2", component="mask",
    bug="The padding mask of the split-K layout hides keys at positions > T instead of >= T, so the first "
        "zero-padded key (position T) stays visible with score 0 and takes a share of the softmax whenever the "
        "causal mask does not hide it.",
    where="causal=False with T not a multiple of 24 (the causal mask hides the padded key otherwise)",
    names=["padding mask", "off by one", "padded key", "causal=False", "split"])

bug("split_max_detached_after_combine_weights", K,
    "    mx = s.amax(dim=-1, keepdim=True).detach()\n    m = torch.where(torch.isinf(mx), torch.zeros_like(mx), mx)",
    "    mx = s.amax(dim=-1, keepdim=True)\n    m = torch.where(torch.isinf(mx), torch.zeros_like(mx), mx).detach()",
    function="gqa_attention", tier="T3", component="graph",
    bug="The split maxima are detached where they shift the exponentials (m) but not where they weight the splits "
        "(mx in exp(mx - max mx)); the shift only cancels if it is treated the same way in both places, so "
        "gradient flows through the combine weights alone and the gradients of q and k are wrong.",
    where="T > 24 (two or more splits), gradients of q and k; the values are right",
    names=["detach", "split maximum", "combine weights", "inconsistent", "gradient of q and k"])

bug("kv_index_from_linspace", N,
    "idx = torch.arange(hq, device=q.device) // (hq // hkv)",
    "idx = torch.linspace(0, hkv - 1, hq, device=q.device).long()",
    function="gqa_attention", tier="T2", component="grouping",
    bug="The kv head of each query head is spread with linspace(0, Hkv - 1, Hq).long(), which truncates evenly "
        "spaced fractional positions instead of giving h // G: e.g. Hq = 4, Hkv = 2 maps heads to [0, 0, 0, 1] "
        "instead of [0, 0, 1, 1].",
    where="1 < Hkv < Hq (Hkv == 1 and Hkv == Hq happen to map correctly)",
    names=["linspace", "kv head index", "h // G", "truncation", "grouping"])

bug("block_size_buffer_without_fallback", N,
    "    if t <= _BLOCK_SIZE:\n        return _TRIL[:t, :t].to(device)\n"
    "    return torch.ones(t, t, dtype=torch.bool, device=device).tril()",
    "    return _TRIL[:t, :t].to(device)",
    function="gqa_attention", tier="T1", component="mask",
    bug="The causal mask is always sliced from the module-level 256 x 256 tril buffer (nanoGPT's block_size); "
        "for T > 256 the slice stays 256 x 256 and masked_fill cannot broadcast it to the [T, T] scores, so "
        "every causal call longer than the block size raises.",
    where="causal=True with T > 256",
    names=["block size", "tril buffer", "256", "slice", "long sequence"])

bug("heads_major_query_fold", M,
    "q3 = q.permute(0, 2, 1, 3).reshape(b * hq, t, d)",
    "q3 = q.permute(2, 0, 1, 3).reshape(hq * b, t, d)",
    function="gqa_attention", tier="T2", component="layout",
    bug="The queries are folded into the bmm batch head-major (row h * B + b) while the keys, values and the "
        "unfold of the result are batch-major (row b * Hq + h), so with several sequences the queries of one "
        "sequence/head attend the keys and values of another.",
    where="B >= 2 (with Hq >= 2); B == 1 is right",
    names=["batch-major", "head-major", "bmm fold", "batch size", "reshape order"])

bug("backward_dq_scaled_twice", F,
    "dq = (ds @ kh).transpose(1, 2)",
    "dq = (ds @ kh * scale).transpose(1, 2)",
    function="gqa_attention", tier="T3", component="backward",
    bug="The hand-written backward already folds 1/sqrt(D) into ds and multiplies the query gradient by it a "
        "second time, so dq is 1/sqrt(D) times too small (dk, dv and the values are right).",
    where="gradient of q with D >= 2",
    names=["query gradient", "scale twice", "1/sqrt(D)", "custom backward"])

bug("backward_weights_overwritten_before_dv", F,
    "        dv = p.transpose(-1, -2) @ grad_out\n        dp = grad_out @ vh.transpose(-1, -2)\n"
    "        delta = (grad_out * out).sum(dim=-1, keepdim=True)\n        ds = p * (dp - delta) * scale\n",
    "        dp = grad_out @ vh.transpose(-1, -2)\n        delta = (grad_out * out).sum(dim=-1, keepdim=True)\n"
    "        ds = p.mul_(dp - delta).mul_(scale)\n        dv = p.transpose(-1, -2) @ grad_out\n",
    function="gqa_attention", tier="T3", component="backward",
    bug="To save memory the backward turns the recomputed weights p into ds in place (p.mul_), and only then "
        "computes the value gradient from p, which by now holds ds instead of the attention weights.",
    where="gradient of v (any call where v requires grad)",
    names=["in place", "value gradient", "weights overwritten", "mul_", "custom backward"])

bug("eval_branch_keeps_forward_tuple", F,
    "out = _GroupedAttention.forward(q, k, v, causal)[0]",
    "out = _GroupedAttention.forward(q, k, v, causal)",
    function="gqa_attention", tier="T1", component="output",
    bug="The graph-free branch calls the Function's static forward directly, which returns (out, lse), and "
        "keeps the tuple: .transpose is then called on a tuple and the call raises.",
    where="calls that build no graph: under no_grad or inference_mode, or with no input requiring grad",
    names=["static forward", "tuple", "(out, lse)", "no_grad", "inference"])

bug("backward_recompute_default_causal", F,
    "p = torch.exp(_scores(qh, kh, scale, ctx.causal) - lse)",
    "p = torch.exp(_scores(qh, kh, scale) - lse)",
    function="gqa_attention", tier="T3", component="backward",
    bug="The backward recomputes the scores through the _scores helper without passing the saved flag, so the "
        "helper's default causal=True applies: for a non-causal call the recomputed weights hide the future "
        "and every gradient belongs to causal attention.",
    where="causal=False with T >= 2, all gradients",
    names=["recompute", "default argument", "causal flag", "backward", "causal=False"])

bug("chunk_keys_cut_at_chunk_end", C,
    "stop = qe if causal else t",
    "stop = qe",
    function="gqa_attention", tier="T2", component="mask",
    bug="Every query chunk reads keys only up to its own last token, also without the causal mask, so with "
        "causal=False the queries of every chunk but the last miss the keys after their chunk.",
    where="causal=False with T > 37 (more than one query chunk)",
    names=["query chunk", "key prefix", "causal=False", "chunk end", "missing keys"])

bug("mha_branch_values_not_transposed", S,
    "kh, vh = k.transpose(1, 2), v.transpose(1, 2)",
    "kh, vh = k.transpose(1, 2), v",
    function="gqa_attention", tier="T1", component="layout",
    bug="In the branch for Hkv == Hq (no repeat needed) the values are left in the [B, T, H, D] layout while "
        "the weights are heads-first, so the weights-values matmul broadcasts the wrong axes and raises (or, "
        "when T == H, mixes tokens and heads).",
    where="Hkv == Hq (plain multi-head attention), including the G == 2 streams of diff_v2_attention",
    names=["Hkv == Hq branch", "values layout", "transpose", "multi-head", "heads-first"])

bug("backward_weights_as_exp_ratio", F,
    "p = torch.exp(_scores(qh, kh, scale, ctx.causal) - lse)",
    "p = torch.exp(_scores(qh, kh, scale, ctx.causal)) / torch.exp(lse)",
    function="gqa_attention", tier="T3", component="stability",
    bug="The backward recomputes the weights as exp(s) / exp(lse) instead of exp(s - lse): the forward is fine, "
        "but once the scaled logits exceed ~88 in float32 both exponentials overflow and the gradients become "
        "inf / inf = NaN (or 0 when they underflow below ~-103).",
    where="gradients when scaled logits exceed ~88 (or lie below ~-103) in float32, ~709 in float64",
    names=["exp ratio", "overflow", "recompute weights", "NaN gradient", "large logits"])

bug("eval_path_relies_on_kv_broadcast", E,
    "    kh = k.transpose(1, 2).repeat_interleave(g, dim=1)\n    vh = v.transpose(1, 2).repeat_interleave(g, dim=1)\n"
    "    s = torch.matmul(qh, kh.transpose(-1, -2))\n",
    "    kh, vh = k.transpose(1, 2), v.transpose(1, 2)\n"
    "    s = torch.matmul(qh, kh.transpose(-1, -2))\n",
    function="gqa_attention", tier="T1", component="grouping",
    bug="The graph-free path drops the kv repeat and relies on matmul broadcasting the kv heads over the query "
        "heads, which only works when there is one kv head (or one per query head); with 1 < Hkv < Hq the "
        "matmul raises.",
    where="calls that build no graph (no_grad, inference_mode, no input requiring grad) with 1 < Hkv < Hq",
    names=["broadcast", "kv repeat", "eval path", "no_grad", "grouping"])

# ------------------------------------------------------------------ diff_v2_attention
bug("gate_unflattened_pair_rank_major", L,
    "gate = torch.sigmoid(lambda_logits).unflatten(-1, (hkv, half))",
    "gate = torch.sigmoid(lambda_logits).unflatten(-1, (half, hkv)).transpose(-1, -2)",
    function="diff_v2_attention", tier="T2", component="gate",
    bug="The gates are unflattened as (G/2, Hkv) and transposed to [B, T, Hkv, G/2], so pair m of kv group j "
        "gets gate m * Hkv + j instead of j * G/2 + m.",
    where="Hkv >= 2 and G >= 4 (two or more groups of two or more pairs)",
    names=["gate order", "unflatten", "group", "pair index", "transpose"])

bug("gate_multiplied_into_saved_output", F,
    "return att[:, :, 0::2] - att[:, :, 1::2] * gate",
    "return att[:, :, 0::2] - att[:, :, 1::2].mul_(gate)",
    function="diff_v2_attention", tier="T3", component="graph",
    bug="The odd heads are gated in place on the attention output, which the custom Function saved for its "
        "backward; the values are right, but backward finds the saved output modified and raises.",
    where="backward with q, k or v requiring grad (values and graph-free calls are right)",
    names=["in place", "saved output", "mul_", "version counter", "backward raises"])

bug("pair_weights_gate_negated_in_place", P,
    "weights = torch.cat((torch.ones_like(gate), -gate), dim=-1)",
    "weights = torch.cat((torch.ones_like(gate), gate.neg_()), dim=-1)",
    function="diff_v2_attention", tier="T3", component="graph",
    bug="The gate is negated in place (neg_) on a view of the softmax output that softmax saved for its "
        "backward, so with lambda_logits requiring grad backward raises (values are right).",
    where="backward with lambda_logits requiring grad",
    names=["neg_", "in place", "softmax output", "saved tensor", "lambda gradient"])

bug("positional_only_parameters", P,
    "    lambda_logits: torch.Tensor,\n    causal: bool = True,\n) -> torch.Tensor:\n    check_diff_v2_inputs",
    "    lambda_logits: torch.Tensor,\n    causal: bool = True,\n    /,\n) -> torch.Tensor:\n    check_diff_v2_inputs",
    function="diff_v2_attention", tier="T1", component="mask",
    bug="The signature ends with '/', making every parameter positional-only, so a call that passes "
        "causal=... (or any argument) by keyword raises a TypeError.",
    where="causal passed by keyword",
    names=["positional-only", "keyword argument", "signature", "causal", "TypeError"])

bug("stable_sigmoid_maximum_tie", C,
    "pos = 1.0 / (1.0 + torch.exp(-x.clamp(min=0)))",
    "pos = 1.0 / (1.0 + torch.exp(-torch.maximum(x, torch.zeros_like(x))))",
    function="diff_v2_attention", tier="T3", component="gate",
    bug="The clamp of the positive branch is written torch.maximum(x, 0); at a tie torch.maximum splits the "
        "gradient half and half between its arguments, so where lambda_logits is exactly 0 the gate's "
        "derivative is 1/8 instead of 1/4.",
    where="lambda_logits exactly 0, gradient of lambda_logits",
    names=["torch.maximum", "tie", "gradient split", "logit 0", "gate derivative"])

bug("gate_grad_buffer_default_dtype", M,
    "g_logits = torch.zeros_like(gate[..., 0])",
    "g_logits = torch.zeros(gate.shape[:-1])",
    function="diff_v2_attention", tier="T3", component="dtype",
    bug="The gate gradient is accumulated into torch.zeros(shape), which has the default float32 dtype, so for "
        "float64 inputs the lambda_logits gradient is rounded to float32 (autograd casts it back silently).",
    where="float64 inputs, gradient of lambda_logits",
    names=["default dtype", "float32 buffer", "gate gradient", "float64", "zeros"])

bug("odd_map_rebuilt_from_output", M,
    "        ctx.save_for_backward(odd, gate)\n        return even - gate * odd\n\n    @staticmethod\n"
    "    def backward(ctx, grad):\n        odd, gate = ctx.saved_tensors\n",
    "        out = even - gate * odd\n        ctx.save_for_backward(even, out, gate)\n        return out\n\n"
    "    @staticmethod\n    def backward(ctx, grad):\n        even, out, gate = ctx.saved_tensors\n"
    "        odd = (even - out) / gate\n",
    function="diff_v2_attention", tier="T3", component="backward",
    bug="To avoid keeping the odd map, the forward saves (even, out, gate) and the backward rebuilds it as "
        "(even - out) / gate; once the gate underflows (to 0 or a subnormal) the product gate * odd is lost "
        "and the rebuilt map is 0 / 0 = NaN or garbage, and so is the lambda_logits gradient.",
    where="lambda_logits below about -88 in float32 or -709 in float64 (e.g. -1000), gradient of lambda_logits",
    names=["rebuilt odd map", "divide by gate", "cancellation", "NaN", "negative logits"])

bug("backward_grad_negated_in_place", M,
    "return grad, -gate * grad, g_logits",
    "return grad, grad.mul_(-gate), g_logits",
    function="diff_v2_attention", tier="T3", component="backward",
    bug="The odd heads' gradient is formed in place on the incoming gradient (grad.mul_(-gate)), which is the "
        "very tensor returned for the even heads, so the even heads also receive -gate * grad.",
    where="gradients of q, k and v",
    names=["in place", "incoming gradient", "aliasing", "even heads", "mul_"])

bug("eval_path_drops_causal", E,
    "            att = gqa_attention(q, k, v, causal)\n",
    "            att = gqa_attention(q, k, v)\n",
    function="diff_v2_attention", tier="T2", component="mask",
    bug="The graph-free branch of diff_v2_attention calls gqa_attention(q, k, v) without the flag, so under "
        "no_grad / inference_mode (or with nothing requiring grad) a non-causal call is computed causally.",
    where="causal=False with T >= 2 in calls that build no graph",
    names=["no_grad path", "causal flag", "default", "causal=False", "inference"])

bug("eval_path_returns_whole_buffer", E,
    "            odd.mul_(torch.sigmoid(lambda_logits).unsqueeze(-1))\n            return att[:, :, 0::2] - odd\n",
    "            odd.mul_(torch.sigmoid(lambda_logits).unsqueeze(-1))\n            att[:, :, 0::2].sub_(odd)\n"
    "            return att\n",
    function="diff_v2_attention", tier="T1", component="output",
    bug="The graph-free branch subtracts in place into the even heads of the attention buffer and returns the "
        "whole buffer, which still has 2H heads (the gated odd heads in between).",
    where="calls that build no graph: under no_grad or inference_mode, or with no input requiring grad",
    names=["in-place buffer", "2H heads", "returns buffer", "no_grad", "shape"])

bug("signed_map_gate_on_key_axis", X,
    "gate = torch.sigmoid(lambda_logits).transpose(1, 2).unsqueeze(-1)",
    "gate = torch.sigmoid(lambda_logits).transpose(1, 2).unsqueeze(-2)",
    function="diff_v2_attention", tier="T2", component="gate",
    bug="The [B, H, T] gate is unsqueezed at -2, so it broadcasts along the query axis of the [B, H, T, S] "
        "signed map: column s is weighted by the gate of key token s instead of row t by the gate of query "
        "token t.",
    where="T >= 2 with gates that differ across tokens",
    names=["key axis", "query token", "signed map", "broadcast", "unsqueeze"])

bug("pair_kv_head_divided_by_hkv", X,
    "kv_of = torch.arange(h, device=q.device) * 2 // g",
    "kv_of = torch.arange(h, device=q.device) * 2 // hkv",
    function="diff_v2_attention", tier="T1", component="grouping",
    bug="The kv head of pair i is computed as 2i // Hkv instead of 2i // G; this is right only when Hkv == G, "
        "otherwise the index runs past the kv heads (IndexError) or picks the wrong kv head.",
    where="Hkv != G (e.g. G = 4 with Hkv = 2, multi-query Hkv = 1, G = 2 with Hkv = 4)",
    names=["group size", "Hkv", "kv head of pair", "2i // G", "index"])

bug("sequence_first_gate_batch_major", S,
    "gate = torch.sigmoid(lambda_logits).transpose(0, 1).reshape(t * b, h, 1)",
    "gate = torch.sigmoid(lambda_logits).reshape(t * b, h, 1)",
    function="diff_v2_attention", tier="T2", component="layout",
    bug="The streams are flattened sequence-first (row t * B + b) but the gate is flattened batch-major "
        "(row b * T + t), so with several sequences each row is gated by another (token, sequence)'s gate.",
    where="B >= 2 and T >= 2",
    names=["sequence-first", "batch-major", "gate rows", "flatten", "transpose"])

bug("gate_log_sigmoid_via_softplus_threshold", K,
    "gate = torch.exp(-torch.nn.functional.softplus(-lambda_logits))",
    "gate = torch.exp(lambda_logits - torch.nn.functional.softplus(lambda_logits))",
    function="diff_v2_attention", tier="T2", component="gate",
    bug="The gate is exp(l - softplus(l)); softplus switches to the identity above its default threshold=20, "
        "so for logits above 20 the gate is exactly 1 instead of 1 - exp(-l), an error float64 resolves.",
    where="float64 with lambda_logits between 20 and about 38",
    names=["softplus", "threshold", "linear regime", "float64", "gate equals 1"])

bug("clamped_sigmoid_denominator_unclamped", C,
    "neg = e / (1.0 + e)",
    "neg = e / (1.0 + torch.exp(x))",
    function="diff_v2_attention", tier="T3", component="stability",
    bug="The negative branch clamps the exponential of its numerator but recomputes the denominator with an "
        "unclamped exp(x); the branch is discarded for x >= 0, yet for large logits exp(x) overflows and its "
        "backward is 0 * inf = NaN, which torch.where passes on to the lambda_logits gradient.",
    where="lambda_logits above ~88 in float32 (~709 in float64), gradient of lambda_logits; values are right",
    names=["unclamped exp", "discarded branch", "NaN gradient", "overflow", "torch.where"])

bug("graph_check_ignores_gate", E,
    "    if not _needs_graph(q, k, v, lambda_logits):\n",
    "    if not _needs_graph(q, k, v):\n",
    function="diff_v2_attention", tier="T1", component="graph",
    bug="diff_v2_attention decides whether a graph is needed from q, k and v only, so when only lambda_logits "
        "trains the graph-free branch runs under torch.no_grad() and the output is detached from lambda_logits.",
    where="grad mode with q, k and v frozen and lambda_logits requiring grad",
    names=["graph check", "lambda_logits", "frozen q k v", "detached output", "fast path"])
