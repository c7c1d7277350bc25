"""Assemble the corpus files and labels.json from the parts (run from this folder)."""

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _parts_lam import LAM_OK, LAM_BAD          # noqa: E402
from _parts_att_ok import ATT_OK                # noqa: E402
from _parts_att_bad import ATT_BAD              # noqa: E402

HEADER = (HERE / "_header.txt").read_text()
LAM = "differential_lambda"
ATT = "differential_attention"

STYLES = {
    "tril_log_bias_addcmul": ("additive bias log(tril(ones)) added to ellipsis-free einsum logits, signed map via addcmul with a dtype-matched coefficient tensor", "expm1"),
    "difference_plus_residual": ("output rewritten as (A1 - A2) V + (1 - lambda) A2 V with an arange-comparison mask", "max_shift"),
    "function_recompute_autograd_grad": ("torch.autograd.Function whose backward recomputes the forward under enable_grad and calls autograd.grad for the inputs that need it only", "signed_weights"),
    "block_diag_packed_segments": ("all B*H*T tokens packed into one sequence, segment ids by repeat_interleave and a block-diagonal (plus causal) mask, one [N, N] softmax per branch", "bmm_pairs"),
    "tiles_q48_k32_online": ("online softmax with mismatched query tiles of 48 and key tiles of 32, causal key range per tile, position-based masks on every tile", "function"),
    "as_strided_key_transpose": ("transposed keys as an as_strided alias built from the key's own strides and storage offset, torch.where mask, each branch aggregated then combined", "float64_accumulate"),
    "number_tensor_dispatch": ("Python-number coefficients combined with torch.sub(alpha=...), tensor coefficients multiplied after a dtype cast", "matmul_operator"),
    "prescaled_keys_value_halves": ("keys prescaled by 1/sqrt(D), ~tril mask, the value split into its two D-wide halves with unflatten and re-concatenated", "expm1"),
    "function_chunked_manual_backward": ("torch.autograd.Function with a hand-written backward over query chunks of 64 that accumulates the key gradients", "max_shift"),
    "function_flat_bmm_backward": ("torch.autograd.Function on [B*H, T, *] reshaped tensors with bmm and a hand-written backward that reshapes the incoming gradient", "signed_weights"),
    "inference_sdpa_fast_path": ("scaled_dot_product_attention with an explicit float bias when no graph is recorded, a manual softmax otherwise", "bmm_pairs"),
    "batch_packed_branches": ("both branches packed along the batch axis, one softmax, branch weights [1, -lambda] expanded with repeat_interleave", "function"),
}
LAM_STYLE = {
    "expm1": "lambda as expm1(a) - expm1(b) + lambda_init with tensordot",
    "max_shift": "lambda shifted by the detached larger dot product",
    "signed_weights": "lambda as exp of the stacked dot products times [1, -1]",
    "bmm_pairs": "lambda from a bmm of the stacked [2, 1, D] and [2, D, 1] vectors",
    "function": "lambda as a custom autograd Function with a gated backward",
    "float64_accumulate": "lambda accumulated in float64 and cast back",
    "matmul_operator": "lambda with the @ operator",
}

WRONG = {
    # ---------------------------------------------------------------- lambda
    "lam_init_folded_into_logaddexp": (LAM, "T2", "lambda", "tiles_q48_k32_online",
        "lambda_init is folded into the first exponential as exp(logaddexp(q1 . k1, log(lambda_init))), which is exact for lambda_init >= 0 (log 0 = -inf) but gives log of a negative number, NaN, whenever lambda_init < 0.",
        "negative lambda_init (the contract allows any Python float)",
        ["lambda_init", "negative", "log", "logaddexp", "nan"]),
    "lam_backward_out_buffer_aliased": (LAM, "T3", "backward", "tril_log_bias_addcmul",
        "the custom backward writes both gradients of a pair into one scratch tensor with torch.mul(..., out=scratch), so the tensor returned for q1 (and q2) is overwritten by the key's gradient w * q instead of w * k.",
        "gradients of q1 and q2 (k1 and k2 are right)",
        ["out=", "scratch", "buffer", "alias", "gradient of q1"]),
    "lam_sinh_midpoint_overflow": (LAM, "T2", "stability", "difference_plus_residual",
        "exp(a) - exp(b) is evaluated as 2 exp((a+b)/2) sinh((a-b)/2), which overflows to inf when |a - b| is large (about 178 in float32, 1420 in float64) although exp(a) and exp(b) are both finite.",
        "dot products far apart, e.g. q1 . k1 = 85 and q2 . k2 = -95 in float32 (700 and -750 in float64)",
        ["sinh", "overflow", "inf", "large dot product", "midpoint"]),
    "lam_log_abs_difference_tie_nan_grad": (LAM, "T3", "stability", "as_strided_key_transpose",
        "exp(a) - exp(b) is computed in log space as sign(a-b) exp(max + log1p(-exp(-|a-b|))); the forward is right, but at a tie a = b the log1p(-1) = -inf makes every gradient NaN (0 * inf).",
        "q1 . k1 == q2 . k2 exactly (e.g. identical pairs or all-zero vectors)",
        ["tie", "log1p", "nan", "gradient", "equal dot products"]),
    "lam_backward_weight_bound_in_other_guard": (LAM, "T3", "backward", "number_tensor_dispatch",
        "in the custom backward the weight w2 = -grad * exp(q2 . k2) is only assigned inside the branch for q2's gradient but also used in k2's branch, so when q2 is frozen and k2 trainable backward raises UnboundLocalError.",
        "q2 frozen (no grad) while k2 requires grad",
        ["needs_input_grad", "unbound", "w2", "frozen q2", "k2"]),
    "lam_pairwise_sum_drops_odd": (LAM, "T2", "lambda", "prescaled_keys_value_halves",
        "the pairwise (tree) summation adds x[:half] and x[half:2*half] and drops the last element whenever a level has an odd length, so the dot products are wrong unless D_lambda is a power of two.",
        "D_lambda not a power of two (3, 5, 6, 7, ...)",
        ["pairwise", "odd", "dropped element", "dot product", "power of two"]),
    "lam_frozen_vectors_flagged_trainable": (LAM, "T1", "mutation", "inference_sdpa_fast_path",
        "vectors that do not require grad are switched to requires_grad=True in place with requires_grad_(), which changes the caller's frozen tensors (they become trainable and later receive .grad).",
        "any call with a vector that does not require grad",
        ["requires_grad_", "in place", "frozen", "caller", "flag"]),
    "lam_vectors_positional_only": (LAM, "T2", "lambda", "block_diag_packed_segments",
        "the / in the signature makes q1, k1, q2 and k2 positional-only, so a call that passes the vectors by keyword (q1=..., k1=...) raises TypeError although the contract names them.",
        "vectors passed by keyword",
        ["positional-only", "signature", "keyword", "typeerror", "slash"]),
    # ---------------------------------------------------------------- attention
    "att_empty_like_reshape_copy_dropped": (ATT, "T1", "strided", "float64_accumulate",
        "the output is allocated with empty_like(value) and filled through out.reshape(B*H, T, 2D); for a token-major value ([B, T, H, *] storage seen as [B, H, T, 2D]) empty_like keeps that stride order, reshape returns a copy, and the writes never reach the returned uninitialised tensor.",
        "value laid out token-major (permuted [B, T, H, *] storage, dense or a slice of a fused projection) with B > 1",
        ["empty_like", "reshape", "copy", "uninitialised", "permuted value"]),
    "att_kblock_count_extra_empty_block": (ATT, "T2", "softmax", "expm1",
        "the number of key blocks is T // 32 + 1 instead of ceil(T / 32), so when T is a multiple of 32 the last block is empty and its row maximum (amax over zero keys) raises.",
        "T a multiple of 32 (32, 64, 128, 256, ...)",
        ["key block", "block count", "empty block", "amax", "multiple of 32"]),
    "att_shift_by_diagonal_logit": (ATT, "T2", "stability", "max_shift",
        "the softmax is shifted by each row's diagonal logit (always visible) instead of the row maximum, so exp overflows to inf and the rows become NaN when an off-diagonal logit exceeds the diagonal one by more than about 88 (float32) or 709 (float64).",
        "large logits (float32 of several hundred, float64 of a few thousand)",
        ["diagonal", "shift", "row maximum", "overflow", "nan"]),
    "att_scale_from_padded_width": (ATT, "T2", "scale", "signed_weights",
        "queries and keys are zero-padded to a multiple of 8 (harmless for the dot products) but the scale is then computed from the padded width, 1/sqrt(8 ceil(D/8)) instead of 1/sqrt(D).",
        "D not a multiple of 8 (e.g. D = 1 to 7)",
        ["padding", "scale", "padded width", "sqrt", "multiple of 8"]),
    "att_branch_weights_repeat_not_interleave": (ATT, "T2", "coefficient", "bmm_pairs",
        "the branch weights [1, -lambda] of the batch-packed maps are expanded with .repeat(B) ([1, -l, 1, -l]) instead of .repeat_interleave(B) ([1, 1, -l, -l]), so for B > 1 the coefficient multiplies the wrong batch elements' maps.",
        "B > 1",
        ["repeat", "repeat_interleave", "branch weights", "batch", "coefficient"]),
    "att_coef_decorator_positional_slot": (ATT, "T2", "coefficient", "function",
        "the decorator that turns a number coefficient into a tensor only looks at the sixth positional argument, so a Python number passed as coefficient=... by keyword reaches the body, whose coefficient.to(...) raises AttributeError.",
        "Python-number coefficient passed by keyword",
        ["decorator", "keyword", "args[5]", "coefficient", "python float"]),
    "att_backward_grad_output_view": (ATT, "T3", "backward", "float64_accumulate",
        "the hand-written backward flattens the incoming gradient with grad.view(B*H, T, 2D), which raises when that gradient is non-contiguous, e.g. when the output is consumed through transpose(1, 2) (the usual [B, T, H*2D] merge).",
        "incoming gradient non-contiguous in a way view cannot merge, e.g. the output consumed through transpose(1, 2) with B > 1 and H > 1",
        ["grad_output", "view", "non-contiguous", "reshape", "transpose"]),
    "att_backward_value_grad_in_branch2_guard": (ATT, "T3", "backward", "matmul_operator",
        "the custom backward subtracts the second branch's term lambda A2^T dO from the value gradient inside the block guarded by needs_input_grad of q2/k2, so when both are frozen the value gradient is A1^T dO only.",
        "q2 and k2 frozen while value requires grad",
        ["value gradient", "needs_input_grad", "frozen", "second branch", "guard"]),
    "att_backward_chunked_dk_assigned": (ATT, "T3", "backward", "expm1",
        "the chunked backward assigns each query chunk's key gradient with dk[...] = instead of accumulating it with +=, so only the last chunk of 64 queries contributes to the gradients of k1 and k2.",
        "T > 64 (gradients of k1 and k2)",
        ["chunk", "accumulate", "dk", "key gradient", "+="]),
    "att_backward_branch2_rowsum_reused": (ATT, "T3", "backward", "max_shift",
        "the hand-written softmax backward reuses the first branch's row sums sum_j A1_ij dP_ij (scaled by -lambda) for the second branch instead of computing sum_j A2_ij dA2_ij, so q2 and k2 get wrong gradients.",
        "gradients of q2 and k2 whenever the coefficient is non-zero",
        ["row sum", "softmax backward", "second branch", "a2", "reused"]),
    "att_backward_autograd_grad_frozen_inputs": (ATT, "T3", "backward", "function",
        "the recomputing backward passes every input to torch.autograd.grad, including frozen ones recreated with requires_grad False, and autograd.grad raises 'One of the differentiated Tensors does not require grad' (allow_unused does not help).",
        "any tensor input frozen while another requires grad",
        ["autograd.grad", "frozen", "does not require grad", "allow_unused", "recompute"]),
    "att_grad_mode_not_restored_early_return": (ATT, "T1", "graph", "signed_weights",
        "the mask helper calls torch.set_grad_enabled(False) and restores the previous mode only on the causal path; the early return for causal=False leaves gradients disabled, so that call's output (and every later computation) is not attached to the graph.",
        "causal=False (and every call made after one)",
        ["set_grad_enabled", "early return", "grad mode", "not restored", "causal=false"]),
    "att_online_max_replaced_by_block_max": (ATT, "T2", "stability", "bmm_pairs",
        "the online softmax replaces the running maximum by each key block's own maximum (s.amax) instead of max(m, block max); the rescaling stays consistent, but exp(m_old - m_new) overflows when a later block's maximum is more than about 88 below an earlier one.",
        "float32 large logits with T > 64 (more than one key block)",
        ["running maximum", "block maximum", "online softmax", "overflow", "rescale"]),
    "att_tile_mask_only_when_ks_equals_qs": (ATT, "T2", "mask", "float64_accumulate",
        "the causal mask is only applied to the key tile that starts at the query tile's start (ks == qs), which assumes equal tile sizes; with query tiles of 64 and key tiles of 32 the second key tile inside the diagonal region is left unmasked and queries see future keys.",
        "causal=True with T > 32",
        ["tile", "diagonal tile", "tile sizes", "future keys", "mask"]),
    "att_key_blocks_chunk_not_split": (ATT, "T2", "mask", "matmul_operator",
        "the keys are cut with torch.chunk(k, ceil(T/32)), whose pieces have ceil(T/n) rows, not 32, while the mask positions assume blocks starting at j*32, so the causal mask is misaligned whenever the chunk size differs from 32.",
        "causal=True with T > 32 where ceil(T / ceil(T/32)) != 32 (e.g. 33, 65, 100, 129)",
        ["torch.chunk", "torch.split", "block size", "positions", "causal mask"]),
    "att_qtile_mask_rows_unclamped": (ATT, "T2", "mask", "function",
        "the row positions of each query tile are arange(qs, qs + 128) without clamping to T, so for the last, shorter tile the causal mask has 128 rows and masked_fill fails to broadcast.",
        "causal=True with T > 128 not a multiple of 128",
        ["query tile", "last tile", "unclamped", "arange", "broadcast"]),
    "att_dedupe_keys_by_storage_pointer": (ATT, "T1", "strided", "expm1",
        "the transposed keys are memoised per call under (untyped_storage().data_ptr(), shape) to share them between branches, but k1 and k2 sliced from one fused projection share the storage pointer, so the second branch uses k1.",
        "k1 and k2 slices of one buffer (fused projection)",
        ["storage", "data_ptr", "fused", "memo", "k2"]),
    "att_branch_weights_coefficient_dtype": (ATT, "T2", "coefficient", "max_shift",
        "for a tensor coefficient the branch weights are stacked in the coefficient's own dtype, and einsum with the maps requires one dtype, so a float32 or int64 0-dim coefficient with float64 inputs raises.",
        "tensor coefficient whose dtype differs from the inputs' (float32 or int64 with float64 inputs)",
        ["einsum", "dtype", "coefficient tensor", "weights", "float32"]),
    "att_partial_binds_causal_keyword": (ATT, "T2", "mask", "signed_weights",
        "differential_attention is defined as functools.partial(_attention, causal=True), so a call that passes causal as the seventh positional argument raises 'got multiple values for argument causal'.",
        "causal passed positionally",
        ["functools.partial", "positional", "causal", "multiple values", "keyword"]),
    "att_vmap_heads_out_dims_default": (ATT, "T1", "shape", "float64_accumulate",
        "torch.vmap maps over the heads with in_dims=1 but keeps the default out_dims=0, so the head axis comes out first: the output is [H, B, T, 2D] instead of [B, H, T, 2D].",
        "B != H (B = H > 1 has the right shape but batch and heads swapped)",
        ["vmap", "out_dims", "head axis", "shape", "[h, b, t, 2d]"]),
    "att_bias_per_batch_broadcasts_on_heads": (ATT, "T1", "shape", "function",
        "the causal bias is built with shape [B, T, T], which broadcasts against the [B, H, T, T] logits by aligning B with the head axis, so with B > 1 and H != B the maps and the output get an extra or mismatched axis.",
        "causal=True with B > 1 and H != B",
        ["bias shape", "broadcast", "[b, t, t]", "head axis", "causal"]),
    "att_splitk_scale_per_chunk": (ATT, "T2", "scale", "bmm_pairs",
        "the logits are accumulated over 32-wide slabs of the head width, each slab divided by sqrt of its own width, so for D > 32 the logits are scaled by 1/sqrt(32) (and 1/sqrt of the tail width) instead of 1/sqrt(D).",
        "D > 32",
        ["slab", "split", "scale", "head width", "d > 32"]),
    "att_mask_scratch_rewritten_next_call": (ATT, "T3", "backward", "expm1",
        "the causal mask is written with out= into a module-level scratch buffer; masked_fill saves it for backward, so a second causal call before the first call's backward rewrites it in place and that backward raises a version-counter error.",
        "a second causal call before the first call's backward (e.g. two layers)",
        ["scratch", "out=", "saved for backward", "inplace", "second call"]),
    "att_promote_types_with_coefficient": (ATT, "T1", "dtype", "signed_weights",
        "the working dtype is torch.promote_types(input dtype, coefficient dtype), which treats the 0-dim coefficient like a full tensor, so float32 inputs with a float64 0-dim coefficient (e.g. a lambda from float64 vectors) are computed and returned in float64.",
        "float32 inputs with a float64 tensor coefficient",
        ["promote_types", "dtype", "0-dim", "coefficient", "float64 output"]),
}

CORR_LAM_FOR_ATT = {k: v[1] for k, v in STYLES.items()}


def student(code_parts):
    body = "".join(code_parts)
    imports = "\nimport functools\n" if "functools." in body else ""
    return HEADER + imports + body


def main():
    labels = {}
    for d in ("correct", "wrong"):
        for p in (HERE / d).glob("*.py"):
            p.unlink()
    for name, (style, lam) in STYLES.items():
        text = student([LAM_OK[lam], ATT_OK[name]])
        (HERE / "correct" / f"{name}.py").write_text(text)
        labels[f"correct/{name}"] = {"correct": True, "style": f"{style}; {LAM_STYLE[lam]}"}
    for name, (fn, tier, comp, partner, bug, where, names) in WRONG.items():
        if fn == LAM:
            parts = [LAM_BAD[name], ATT_OK[partner]]
        else:
            parts = [LAM_OK[partner], ATT_BAD[name]]
        (HERE / "wrong" / f"{name}.py").write_text(student(parts))
        labels[f"wrong/{name}"] = {"correct": False, "function": fn, "tier": tier, "component": comp,
                                   "bug": bug, "where": where, "names": names}
    assert set(LAM_BAD) | set(ATT_BAD) == set(WRONG), set(LAM_BAD) ^ set(ATT_BAD) ^ set(WRONG)
    (HERE / "labels.json").write_text(json.dumps(labels, indent=2) + "\n")
    print(len(STYLES), "correct,", len(WRONG), "wrong")


if __name__ == "__main__":
    main()
