"""The probes of DIFF V2: what they call, on which inputs, and what their answers mean.

Small float64 inputs of the probes' own (B = 2, T = 17, Hq = 8, Hkv = 2,
D = 34: G = 4, four pairs, two in each group, so that pairing within a
group, across groups and by halves all differ; two batch elements, so that
mixing them shows; D ≥ 2T so that one-hot values give each key/value
head its own block of columns; T > 16 so that a blocked softmax has
three blocks of 8; 1/√D, 1/D, 1/√(2D) and 1/√T differ), so what they show may be shown
to students. Per function, in order, each stopping the search for the
forward's fault once one has localised it:

* **randomness**: two identical calls agree bit for bit (toolkit);
* **gqa_attention's maps**: with one-hot values ``v[s, g] = e_{gT + s}`` the
  output of query head ``h`` *is* its map, in the block of the key/value head
  it reads; the block says which value head it reads, and
  :func:`grader.toolkit.attention_maps.explain` which keys, mask, scale,
  softmax axis and transposition built the map; an output that is not 0 for
  v = 0 has something added; with values the same at every token (each
  feature coded by a number of its own) every output *is* the value feature
  it reads, whatever the map, which tells features moved between heads;
* **the causal flag**: with ``causal`` omitted the output is the causal one,
  with False the unmasked one;
* **which input matters** (gqa_attention): a change of token 0's keys must
  reach later tokens, of the last token's keys no earlier one, and of one
  query only its own token and head (and batch element);
* **diff_v2_attention's pairs and gate**: with one-hot values and one gate
  logit ℓ everywhere, each output head is fitted as a combination of the
  maps of every query head with every key/value head: which query heads are
  paired (2i and 2i + 1) and which key/value head each reads (h // G), the
  weights of the two (1 and −σ(ℓ): a factor, a gate of another form, a gate
  on both heads or an added head are told apart by their values), the
  output linear in v (nothing added, no norm after); one gate logit changed
  must move its own token, batch element and head only;
* **saturated gates** (ℓ at ±100 to ±1000, float32 and float64): finite
  outputs (else the gate overflows), right to the dtype's precision (else it
  stops short of 0 and 1: a clamp or an ε), and a finite gradient for ℓ;
  then float64 logits from −60 to 60, one per token and pair: a band of
  large logits alone wrong is the gate's (a softplus threshold, a clamp);
* **groupings** (when the output is right at the probes' own G = 4): at
  G = 3, 5 and 6, three key/value heads, and G = 1 and 2 beside them,
  values coded per key/value head say which one each query head reads, and
  random values which groupings are wrong;
* **long sequences, stability, layouts, precision** (T = 33, 65, 100 and 300,
  causal and not, past common block sizes; float32 logits of hundreds, also
  at 300 tokens;
  strided memory; a float64 result right only to float32's accuracy) when
  the plain output is right or nothing else localised the fault;
* **gradients** against finite differences of the function's own forward
  (toolkit), with inputs frozen in turn and at ℓ = 0, the sigmoid's steepest
  point, where a gate built on ``|ℓ|`` has a kink.
"""

from __future__ import annotations

import functools
import math
from typing import Sequence

import numpy as np

from grader.core.invoke import Call, Request, TensorInput
from grader.exercises.diffv2 import oracle
from grader.exercises.diffv2.cases import DIFF_V2, EXPANSIONS, GQA, TENSORS, tied_pairs
from grader.toolkit import attention_maps, domain, findings, probes
from grader.toolkit.attention_maps import MapModel
from grader.toolkit.domain import exact
from grader.toolkit.findings import (
    FLOAT32_LIKE, RIGHT, Found, GradientRun, gradients_probe, is_right, layout_probe, precision_finding, randomness_probe, unexplained_maps,
    half_precision_finding, causal_nan_finding, CAUSAL_PATH, causal_path_first, rounding_probe,
)  # fmt: skip
from grader.toolkit.probes import Built, Layout, Perturbation, Subject, Values, layout_of
from grader.worker.client import Worker

B, T, HQ, HKV, D = 2, 17, 8, 2, 34
G, H = HQ // HKV, HQ // 2
GATES = (-2.0, 0.0, 1.5)  # the constant gate logits of the pair readouts
HEAD_GATES = np.array([GATES[i % len(GATES)] for i in range(H)])
"""A gate logit for each output head (the same at every token): head i's weights must be those it has when every head's logit is its own."""
GATE_ON = 1000.0  # σ(1000) is 1 in float64: output head i is the even head's attention less the odd head's
GATE_OFF = -1000.0  # σ(−1000) is 0 in float64: the odd heads vanish from the output, which is then the even heads' attention
SCALES = {"1/√D": 1 / math.sqrt(D), "1/D": 1 / D, "1/√(2D)": 1 / math.sqrt(2 * D), "1/√T": 1 / math.sqrt(T),
          "1 (no scaling)": 1.0, "√D": math.sqrt(D), "2/√D": 2 / math.sqrt(D), "ln 2/√D": math.log(2) / math.sqrt(D)}  # fmt: skip
SCALE_WORDS = {"1/D": "divided by √D twice", "1/√(2D)": "D taken twice as large", "1/√T": "T is the sequence length, not the head width",
               "1 (no scaling)": "no division by √D at all", "√D": "multiplied instead of divided"}  # fmt: skip
# The gates students write instead of σ(ℓ): name, function, advice.
GATE_FORMS = (
    ("λ = ℓ: lambda_logits is used without the sigmoid", lambda x: x, "λ = torch.sigmoid(lambda_logits)"),
    ("λ = exp(ℓ), DIFF V1's re-parameterisation", np.exp, "DIFF V2's gate is λ = torch.sigmoid(lambda_logits), bounded to (0, 1)"),
    ("λ = 1 − σ(ℓ): the complement of the sigmoid", lambda x: 1.0 - oracle.sigmoids(x), "λ = torch.sigmoid(lambda_logits) itself"),
)  # fmt: skip
GQA_RUNS = (("q", "k", "v"), ("k", "v"), ("q",), ("q", "k"))
DIFF_V2_RUNS = (("q", "k", "v", "lambda_logits"), ("q", "k", "v"), ("lambda_logits",), ("k", "v", "lambda_logits"))
SHARED_OFFSET = 3.0  # added to every value of the offset readout: the output must move by (1 − σ(ℓ)) times it
FITS = 1e-6  # a readout is a combination of the true heads' outputs when no entry is further than this from the fit


def _request(function: str, values: Values, grads: tuple[str, ...], cotangent: np.ndarray | None, causal: bool | None, dtype: str,
             layout: Layout) -> Built:  # fmt: skip
    """``function``(q, k, v[, lambda_logits][, causal=...]) on ``values``, those in ``grads`` requiring grad."""
    names = TENSORS[function]
    tensors = tuple(TensorInput(exact(values[n], dtype), dtype, n in grads, layout_of(layout, n)) for n in names)
    call = Call(function, tensors, {} if causal is None else {"causal": causal})
    positions = {n: i for i, n in enumerate(names) if n in grads}
    if cotangent is None:
        return Built(Request((call,), inputs=tensors), positions)
    return Built(Request((call,), backward_from=0, cotangent=exact(cotangent, dtype), inputs=tensors), positions)


INPUT_PARTS = {DIFF_V2: {"lambda_logits": "gate"}}
"""Per function, the inputs one part of it handles, and that part: named when a call answers with that input of an earlier
call (stale_input_probe), or when only that input's gradient is hidden from autograd (gradients_probe)."""


def subject(function: str, causal: bool | None = True, dtype: str = "float64", layout: Layout = "contiguous") -> Subject:
    """``function`` with ``causal`` given (None: omitted), inputs in ``dtype`` and memory ``layout``."""
    return Subject(function, lambda values, grads, cotangent: _request(function, values, grads, cotangent, causal, dtype, layout))


def draw(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Queries, keys and values of logits about 1 in size, and gate logits about N(0, 1.5²)."""
    return {"q": rng.standard_normal((B, T, HQ, D)), "k": rng.standard_normal((B, T, HKV, D)), "v": rng.standard_normal((B, T, HKV, D)),
            "lambda_logits": 1.5 * rng.standard_normal((B, T, H))}  # fmt: skip


def one_hot() -> np.ndarray:
    """Values v[s, g] = e_{gT + s}: the output of a query head is its map, in the columns of the key/value head it reads."""
    value = np.zeros((B, T, HKV, D))
    for g in range(HKV):
        value[:, np.arange(T), g, g * T + np.arange(T)] = 1.0
    return value


def truth(function: str, values: Values, causal: bool) -> np.ndarray:
    """The oracle's output for probe inputs."""
    if function == GQA:
        return oracle.gqa_attention(values["q"], values["k"], values["v"], causal)
    return oracle.diff_v2_attention(values["q"], values["k"], values["v"], values["lambda_logits"], causal)


def _shaped(out: np.ndarray | None, function: str) -> np.ndarray | None:
    """``out`` when it has the function's output shape, else None."""
    return out if out is not None and out.shape == (B, T, HQ if function == GQA else H, D) else None


# ---- gqa_attention ------------------------------------------------------------------------


def _heads_finding(found: Found, keys: Sequence[int], values: Sequence[int]) -> bool:
    """A finding when query heads read other key or value heads than h // G; whether there was one."""
    right = [h // G for h in range(HQ)]
    wrong_keys, wrong_values = list(keys) != right, list(values) != right
    if not wrong_keys and not wrong_values:
        return False
    tiled = [h % HKV for h in range(HQ)]
    which = "keys and values" if wrong_keys and wrong_values else "keys" if wrong_keys else "values"
    read = values if wrong_values else keys
    how = " (h % Hkv, what Tensor.repeat or expand over a leading group axis gives)" if list(read) == tiled else ""
    found.add(GQA, "heads", "forward", f"Query heads read the wrong key/value heads ({which})",
              f"Read out of your output with one-hot values, query heads 0 to {HQ - 1} (Hq = {HQ}, Hkv = {HKV}, G = {G}) read the {which} of "
              f"heads {list(read)}{how}, not h // G = {right}.",
              "give query head h key/value head h // G: the G query heads of a group are contiguous "
              "(k.repeat_interleave(G, dim=2), the same for k and v)")  # fmt: skip
    return True


def _map_findings(found: Found, fits: Sequence[attention_maps.MapFit], function: str = GQA) -> bool:
    """Findings for what the fitted maps change from softmax(q kᵀ/√D + M) other than the key head; whether there was any."""
    changes = {name: fit for fit in fits for name in fit.changes if name not in ("query", "key")}
    for name, fit in changes.items():
        model = fit.model
        if name == "mask":
            title, advice = attention_maps.MASK_TEXT[model.mask]
            found.add(function, "mask", "forward", title[0].upper() + title[1:],
                      f"The maps read out of your output have {attention_maps.MASKS[model.mask]}.", advice)
        elif name == "scale" and fit.scale_name == "ln 2/√D":
            found.add(function, "softmax", "forward", "The softmax takes powers of 2 of logits not rescaled by log2(e)",
                      "The maps read out of your output fit softmax(s·q kᵀ) with s = ln 2/√D: 2^x is e^(x·ln 2), so exp2 of the "
                      "logits is a softmax at another temperature.", "multiply the logits by log2(e) = 1/ln 2 before exp2, or use exp")  # fmt: skip
        elif name == "scale":
            value = fit.scale_name or f"{model.scale:.4g}"
            said = f" ({SCALE_WORDS[value]})" if value in SCALE_WORDS else ""
            found.add(function, "scale", "forward", f"The logits are scaled by {value} instead of 1/√D",
                      f"The maps read out of your output fit softmax(s·q kᵀ) with s = {value}{said}, not 1/√D (D = {D}, the head width).",
                      "divide q kᵀ by √D once, with D = q.shape[-1]")  # fmt: skip
        elif name == "axis":
            found.add(function, "softmax", "forward", "The softmax normalises over the queries, not the keys",
                      "In the maps read out of your output the columns sum to 1, not the rows.", "use softmax(..., dim=-1), over the key axis")
        elif name == "transposed":
            found.add(function, "softmax", "forward", "The attention map is transposed",
                      "The maps read out of your output are the transposes of the right ones.", "compute q kᵀ (queries × keys) and apply it to v untransposed")
        elif name == "factor" and (named := attention_maps.named_scale(model.factor, SCALES)) is not None:
            found.add(function, "scale", "forward", f"The weights are scaled by {named} after the softmax",
                      f"The maps read out of your output are {named} times a softmax ({model.factor:.4g}): their rows sum to that, not "
                      "to 1, so a scale meant for the logits also multiplies the weights or v.",
                      "scale q kᵀ by 1/√D before the softmax and nothing else: neither the weights nor v")  # fmt: skip
        elif name == "factor":
            found.add(function, "softmax", "forward", f"The weights are multiplied by {model.factor:.4g}",
                      f"The maps read out of your output are {model.factor:.4g} times a softmax: their rows do not sum to 1.",
                      "scale the logits before the softmax and leave the weights as the softmax gives them")  # fmt: skip
    return bool(changes)


def _with_tensors(values: Values, maps: Sequence[np.ndarray]) -> list[tuple[np.ndarray, dict[str, np.ndarray]]]:
    """Each query head's map of batch element 0 with the queries and keys it comes from."""
    return [(got, {"q": values["q"][0, :, h], "k": values["k"][0, :, h // G]}) for h, got in enumerate(maps)]


def _float32_scale(found: Found, tensors: Sequence[tuple[np.ndarray, dict[str, np.ndarray]]]) -> bool:
    """A scale finding when the maps (:func:`_with_tensors`) fit softmax(s·q kᵀ) with s slightly off 1/√D; whether they do."""
    right = SCALES["1/√D"]
    scale = attention_maps.rounded_scale(tensors, MapModel("q", "k", "causal"), right)
    if scale is None:
        return False
    found.add(GQA, "scale", "forward", *attention_maps.scale_slip(scale, right, "q kᵀ"))
    return True


def _denominator_epsilon(found: Found, tensors: Sequence[tuple[np.ndarray, dict[str, np.ndarray]]]) -> bool:
    """A finding when the maps (:func:`_with_tensors`) are softmax(q kᵀ/√D + M) with an ε added to each row's sum of
    exponentials; whether they are."""
    epsilon = attention_maps.denominator_epsilon(tensors, MapModel("q", "k", "causal", scale=SCALES["1/√D"]))
    if epsilon is None:
        return False
    component, *said = attention_maps.epsilon_slip(epsilon, "float64")
    found.add(GQA, component, "forward", *said)
    return True


def _added_term(found: Found, function: str, zero: np.ndarray | None) -> bool:
    """An output finding when the output for v = 0 is not 0 (attention only ever weights v); whether there was one."""
    if zero is None or not np.isfinite(zero).all() or np.abs(zero).max() <= FITS:
        return False
    found.add(function, "output", "forward", "Something besides the attention-weighted values is added to the output",
              f"With v = 0 your output is not 0 (entries up to {np.abs(zero).max():.3g}): attention only weights v, so a term that does "
              "not come through v (a residual of q?) is added.", "return the attention-weighted values alone")  # fmt: skip
    return True


def coded_values() -> np.ndarray:
    """Values the same at every token, each key/value head's feature c of head g coded 1 + g·D + c: the rows of an attention
    map sum to 1, so the output of query head h at feature c is the code of the value feature it reads, whatever the map."""
    return np.broadcast_to(1.0 + np.arange(HKV * D, dtype=np.float64).reshape(HKV, D), (B, T, HKV, D)).copy()


def _coded_reads(queries: np.ndarray) -> np.ndarray:
    """[1, 1, len(queries), D]: with :func:`coded_values`, what query heads ``queries`` read (feature c of head h // G)."""
    return 1.0 + ((queries // G)[:, None] * D + np.arange(D)[None, :])[None, None]


def _moved_features(found: Found, out: np.ndarray | None, function: str = GQA, odd: bool = False) -> bool:
    """A finding when, with :func:`coded_values` (and for diff_v2_attention the gate off, so that output head i is the even
    head 2i's; ``odd``: the odd head 2i + 1's, read as the even head's output less the output with the gate at 1), output
    heads receive other key/value heads' features, or features at other positions, than feature c of the head their query
    head reads (h // G); whether there was one."""
    if out is None or not np.isfinite(out).all():
        return False
    codes = np.round(out - 1.0)
    if np.abs(out - 1.0 - codes).max() > FITS or codes.min() < 0 or codes.max() >= HKV * D:
        return False  # not every output is one value feature: the maps' rows do not sum to 1, or features are mixed
    heads, features = np.divmod(codes.astype(int), D)
    queries = np.arange(HQ) if function == GQA else 2 * np.arange(H) + int(odd)
    right_heads = (queries // G)[None, None, :, None]
    right_features = np.arange(D)[None, None, None, :]
    wrong = np.argwhere((heads != right_heads) | (features != right_features))
    if not len(wrong):
        return False
    b, t, h, c = (int(i) for i in wrong[0])
    what = "query head" if function == GQA else "output head"
    reading = (f"{len(wrong)} of {out.size} outputs read another one ({what} {h}, feature {c} reads key/value head {heads[b, t, h, c]}, "
               f"feature {features[b, t, h, c]}; head {int(queries[h]) // G}, feature {c} is right)")
    if odd:
        shifted = bool((heads == right_heads).all())
        found.add(function, "layout" if shifted else "heads", "forward", "The odd heads are cut from the wrong features",
                  f"With values the same at every token and the gate at 1 (ℓ = {GATE_ON:g}), each output is the even head's value feature "
                  f"less the odd head's, and the even heads are right: for the odd heads {reading}. The odd heads are taken from the query "
                  "heads at the wrong place: " + ("the right heads at an offset of features, not of whole heads (a slice or unfold of "
                  "a flattened heads × features axis?)." if shifted else "features of other heads mixed in."),
                  "take the odd heads as whole heads, A[:, :, 1::2] of [B, T, Hq, D], never by feature offsets of a flattened axis")  # fmt: skip
        return True
    found.add(function, "heads", "forward", f"{'Query' if function == GQA else 'Output'} heads receive the wrong key/value features",
              f"With values the same at every token{'' if function == GQA else ' and the gate off'}, each output is the value feature it "
              f"reads: {reading}. Heads are repeated, reshaped or paired in an order that mixes their features with the heads.",
              "repeat each key/value head over its group next to the head axis (k.repeat_interleave(G, dim=2)), and pair whole heads "
              "(A[:, :, 0::2] and A[:, :, 1::2] of [B, T, Hq, D]), never neighbouring features of a flattened axis")  # fmt: skip
    return True


def _explained(values: Values, maps: Sequence[np.ndarray], heads: Sequence[int], causal: bool = True) -> list[attention_maps.MapFit] | None:
    """Each map (of query head ``heads[n]``, read with one-hot values and ``causal``) explained from any query head with any
    key/value head, or None when one cannot be."""
    tensors = {**{f"q{j}": values["q"][0, :, j] for j in range(HQ)}, **{f"k{g}": values["k"][0, :, g] for g in range(HKV)}}
    sources = [(f"q{j}", f"k{g}") for j in range(HQ) for g in range(HKV)]
    fits = []
    for h, got in zip(heads, maps):
        fit = attention_maps.explain(got, tensors, MapModel(f"q{h}", f"k{h // G}", "causal" if causal else "none", scale=SCALES["1/√D"]), sources, SCALES)
        if fit is None:
            return None
        fits.append(fit)
    return fits


def gqa_maps_probe(worker: Worker, values: Values, found: Found, causal: bool = True, layout: Layout = "contiguous") -> bool:
    """Read each query head's map out of the output with one-hot values (``causal``, inputs in memory ``layout``) and explain
    it; whether the forward was localised."""
    found.probes.append(f"{GQA}: maps read out with one-hot values, v = 0 and values the same at every token" + ("" if causal else ", causal=False"))
    points = [{**values, "v": one_hot()}, {**values, "v": np.zeros_like(values["v"])}, {**values, "v": coded_values()}]
    out, zero, coded = (_shaped(o, GQA) for o in probes.sweep(worker, subject(GQA, causal, layout=layout), points))
    if _added_term(found, GQA, zero):
        return True
    if out is None or not np.isfinite(out).any():
        return False
    blocks = [[out[0, :, h, g * T:(g + 1) * T] for g in range(HKV)] for h in range(HQ)]
    read = [int(np.argmax([np.nansum(np.abs(b)) for b in heads])) for heads in blocks]
    if any(np.nan_to_num(np.abs(blocks[h][g])).max() > FITS for h in range(HQ) for g in range(HKV) if g != read[h]):
        return _moved_features(found, coded)  # a head mixes the values of several heads: not a map
    maps = [blocks[h][read[h]] for h in range(HQ)]
    fits = _explained(values, maps, list(range(HQ)), causal)
    if fits is None:
        how = "one-hot values" + ("" if causal else " and causal=False")
        return _heads_finding(found, [h // G for h in range(HQ)], read) or \
            findings.row_scale_finding(found, GQA, _with_tensors(values, maps), MapModel("q", "k", "causal" if causal else "none"), SCALES["1/√D"]) or \
            unexplained_maps(found, GQA, np.array(maps), how, oracle.attention_maps(values["q"], values["k"], causal)[0], causal)  # fmt: skip
    queries, keys = [int(fit.model.query[1:]) for fit in fits], [int(fit.model.key[1:]) for fit in fits]
    if queries != list(range(HQ)):
        found.add(GQA, "heads", "forward", "Output heads hold other query heads' attention",
                  f"Read out of your output with one-hot values, output heads 0 to {HQ - 1} (Hq = {HQ}, Hkv = {HKV}, G = {G}) are the attention "
                  f"of query heads {queries} with key/value heads {keys}, not of query head h with key/value head h // G.",
                  "give output head h the attention of query head h: the query heads of group g are q[:, :, g·G:(g + 1)·G]")  # fmt: skip
        return True
    localised = _heads_finding(found, keys, read)
    if not localised and all(not fit.changes for fit in fits):
        found.maps.append({"function": GQA, "title": "Map of query head 0", "expected": oracle.attention_maps(values["q"], values["k"], causal)[0, 0].tolist(),
                           "got": maps[0].tolist()})  # fmt: skip
        tensors = _with_tensors(values, maps)
        return _float32_scale(found, tensors) or _denominator_epsilon(found, tensors)
    return _map_findings(found, fits) or localised


def _partly_masked(function: str, values: Values) -> list[np.ndarray]:
    """The outputs with causal=False when only some maps are masked: for gqa_attention the heads of one aligned block of
    1, 2 or 4 heads (a pair, a group, a half), every head but those, or the even or the odd heads; for diff_v2_attention
    the even or the odd heads of every pair."""
    q, k, v = values["q"], values["k"], values["v"]
    masked, plain = oracle.attention_maps(q, k, True), oracle.attention_maps(q, k, False)
    if function == GQA:
        found = []
        heads = np.arange(HQ)
        blocks = [heads // size == block for size in (1, 2, 4) for block in range(HQ // size)]
        for chosen in [*blocks, *(~b for b in blocks), heads % 2 == 0, heads % 2 == 1]:
            found.append(oracle.apply_maps(np.where(chosen[None, :, None, None], masked, plain), v, G))
        return found
    gates = np.swapaxes(oracle.sigmoids(values["lambda_logits"]), 1, 2)[..., None]
    return [oracle.apply_maps(even[:, 0::2] - gates * odd[:, 1::2], v, G // 2) for even, odd in ((masked, plain), (plain, masked))]


def _first_tokens(values: Values, n: int) -> Values:
    """``values`` cut to their first ``n`` tokens."""
    return {name: x[:, :n] for name, x in values.items()}


def causal_flag_probe(worker: Worker, function: str, values: Values, found: Found) -> bool:
    """With causal omitted the output must be the causal one, also right after a call with causal=False, and with
    causal=False the unmasked one; whether any is not."""
    found.probes.append(f"{function}: causal omitted, True, False, and omitted again")
    asked = probes.ask(worker, [subject(function, causal).request(values) for causal in (None, True, False, None)])
    outs = [_shaped(probes.output(o), function) for o in asked]
    omitted, masked, unmasked, again = outs
    right, plain = truth(function, values, True), truth(function, values, False)
    if causal_nan_finding(found, function, masked, right, unmasked, plain):
        return True
    return found.first(
        function,
        (is_right(omitted, plain) and is_right(masked, right), "mask", "causal defaults to False: a call without it is not masked",
         "Called without causal, your output is the unmasked one; with causal=True it is right.",
         "declare causal: bool = True, as the contract's signature does"),
        (is_right(unmasked, right) and is_right(masked, right), "mask", "The causal mask is applied although causal=False",
         "With causal=False your output is the causal one.", "apply the mask only when causal is True"),
        (is_right(masked, right) and any(is_right(unmasked, mixed) for mixed in _partly_masked(function, values)), "mask",
         "causal=False is not passed on to every attention call",
         "With causal=True your output is right; with causal=False some of its heads are the causal ones and the others not.",
         "pass causal on to every attention call (both heads of a pair, every gqa_attention call)"),
        (is_right(unmasked, plain) and masked is not None and not is_right(masked, right), *CAUSAL_PATH),
        (is_right(omitted, right) and is_right(unmasked, plain) and again is not None and not is_right(again, right), "mask",
         "A call without causal takes the flag of an earlier call",
         "Called without causal first, your output is the causal one; called without it again right after a call with "
         "causal=False, it is " + ("the unmasked one." if is_right(again, plain) else "wrong."),
         "let the signature's default (causal=True) apply whenever the argument is left out: keep no flag between calls"),
    )  # fmt: skip


def gqa_dependence_probe(worker: Worker, values: Values, rng: np.random.Generator, found: Found) -> bool:
    """Perturb one input at a time: token 0's keys must reach later tokens, the last token's keys no earlier one,
    one query only its own token and head; whether the forward was localised."""
    found.probes.append(f"{GQA}: which input matters")
    perturbations = [
        Perturbation("q", (0, T - 1, 0), "the last token's query of head 0"),
        Perturbation("k", (0, 0), "the keys of token 0", required=(0, slice(1, T))),
        Perturbation("k", (0, T - 1), "the keys of the last token", forbidden=(0, slice(0, T - 1))),
        Perturbation("q", (B - 1, T - 1, 0), "the last token's query of head 0 in batch element 1", forbidden=(0,)),
    ]
    effects = probes.dependence(worker, subject(GQA), values, perturbations, rng)
    if effects is None or len(effects) < len(perturbations):
        return False
    query, first, last, other_batch = effects
    own = np.zeros_like(query.moved)
    own[0, T - 1, 0] = True
    elsewhere = query.moved & ~own
    same_head = elsewhere[0, :, 0].any()
    other_heads = elsewhere[0, T - 1].any()
    return found.first(
        GQA,
        (not query.moved[0, T - 1, 0].any() and bool(elsewhere.any()) or first.ignored, "layout",
         "The [B, T, H, D] layout is misread: tokens and heads are mixed up",
         "Changing " + ("token 0's keys left every later token's output unchanged" if first.ignored else
                        "the last token's query of head 0 left its own output unchanged and moved other positions") +
         ": attention runs over the wrong axis, or the result is reshaped instead of transposed back.",
         "transpose(1, 2) to [B, H, T, D] before attending and transpose(1, 2) back (not reshape/view), or pass "
         "[B, H, T, D] tensors to scaled_dot_product_attention"),
        (bool(same_head), "softmax", "Each query's output depends on the other queries",
         "Changing the last token's query of head 0 changed the outputs of other tokens of head 0: the softmax normalises across queries.",
         "use softmax(..., dim=-1), over the keys"),
        (bool(other_heads), "heads", "The heads are mixed: one head's query changes other heads' outputs",
         "Changing the last token's query of head 0 changed the outputs of other heads.", "attend each query head on its own"),
        (other_batch.leaked, "layout", "The batch elements are mixed: one sequence's query changes another's outputs",
         "Changing the last token's query of head 0 in batch element 1 changed outputs of batch element 0: queries, keys and "
         "values are folded into one batch axis in different orders (batch-major for some, head-major for others), or the "
         "result is unfolded in another.",
         "fold every tensor the same way, e.g. [B, T, H, D] → transpose(1, 2) → reshape(B * H, T, D), and unfold the result "
         "in that same order"),
        (last.leaked, "mask", "Queries see future tokens: the causal mask does not hold",
         "Under causal=True, changing the last token's keys changed the outputs of earlier tokens.",
         "add −∞ to the logits where key s > query t, before the softmax"),
    )  # fmt: skip


def _large(rng: np.random.Generator, values: Values, kind: str) -> dict[str, np.ndarray]:
    """float32-exact inputs whose scaled logits reach hundreds as ``kind`` (:data:`~grader.toolkit.probes.LARGE_LOGITS`) says."""
    drawn = rng.standard_normal((np.shape(values["q"])[-1],))
    direction = drawn / np.linalg.norm(drawn)
    large = {n: np.array(x) for n, x in values.items()}
    large["q"], large["k"] = probes.large_logits(large["q"], large["k"], kind, direction, 1, 60.0)
    return {n: exact(x, "float32") for n, x in large.items()}


FUTURE_VALUES = Perturbation("v", (slice(None), T - 1, slice(None), 0), "the first feature of the last token's values", forbidden=(slice(None), slice(0, T - 1)))
"""The first feature of the last token's values, which under the causal mask reaches no earlier token's output."""


def stability_probe(worker: Worker, function: str, values: Values, rng: np.random.Generator, found: Found) -> bool:
    """float32 calls with logits of hundreds (a future one of ten thousands) against the oracle, at the probes' length and
    at :data:`STABLE_LENGTH` tokens (past key tiles whose partial results a tiled softmax merges), then, where all are
    right, a float64 call whose visible logits lie below finite mask constants
    (:func:`~grader.toolkit.findings.below_masks_finding`); whether one fails."""
    kinds = probes.LARGE_LOGITS
    long = _long_values(rng, STABLE_LENGTH)
    cases = {(kind, T): _large(rng, values, kind) for kind in kinds} | {(kind, STABLE_LENGTH): _large(rng, long, kind) for kind in kinds}
    ordinary, ordinary_long = ({n: exact(x, "float32") for n, x in point.items()} for point in (values, long))
    found.probes.append(f"{function}: float32 logits of hundreds, and of ordinary size, at {T} and {STABLE_LENGTH} tokens")
    *outs, plain, plain_long = probes.sweep(worker, subject(function, True, "float32"), [*cases.values(), ordinary, ordinary_long])
    if half_precision_finding(worker, subject(function, True, "float32"), ordinary, found, plain, truth(function, ordinary, True)):
        return True
    if not is_right(plain, truth(function, ordinary, True), FLOAT32_LIKE):
        return False  # (ordinary float32 logits wrong too, or raising: large ones tell nothing of stability)
    judged = [T] + ([STABLE_LENGTH] if is_right(plain_long, truth(function, ordinary_long, True), FLOAT32_LIKE) else [])  # likewise per length
    wrong, failing, bad = findings.large_logit_failures(kinds, cases, outs, judged, T, lambda out, case: not is_right(out, truth(function, case, True), FLOAT32_LIKE))
    if not failing and findings.unmasked_large_logits_finding(worker, subject(function, False, "float32"), kinds, cases, [ordinary, ordinary_long], T,
                                                             lambda point: truth(function, point, False), found, STABLE):  # fmt: skip
        return True
    if not failing:
        below = dict(values)
        below["q"], below["k"] = domain.far_below(np.asarray(values["q"]), np.asarray(values["k"]), findings.BELOW_MASKS)
        return findings.below_masks_finding(worker, subject(function), below, truth(function, below, True),
                                         lambda point: probes.leaks(worker, subject(function, True, "float64"), [point], FUTURE_VALUES, rng), found, STABLE)  # fmt: skip
    leaked = bad == "wrong" and probes.leaks(worker, subject(function, True, "float32"), [cases[key] for key in wrong if key[1] == T], FUTURE_VALUES, rng)
    findings.large_logit_finding(found, function, failing, bad, leaked, STABLE)
    return True


STABLE = "subtract each row's maximum over its visible keys (after the mask) before exp, or use torch.softmax"


# ---- diff_v2_attention --------------------------------------------------------------------


def _fit(readout: np.ndarray, basis: np.ndarray) -> tuple[np.ndarray, float]:
    """Least squares readout[t, :] ≈ Σ_h w_h basis[h, t, :] over every entry: (w, largest residual)."""
    design = basis.reshape(len(basis), -1).T
    weights = np.linalg.lstsq(design, readout.ravel(), rcond=None)[0]
    return np.asarray(np.round(weights, 9)), float(np.max(np.abs(design @ weights - readout.ravel())))


def _combination(even: np.ndarray, odd: np.ndarray) -> str:
    """The weights of a pair's two heads at each gate logit, in words."""
    return ", ".join(f"({e:.4g}, {o:.4g}) at ℓ = {g:g}" for g, e, o in zip(GATES, even[:, 0], odd[:, 0]))


def _routing_findings(found: Found, used: list[list[tuple[int, int]]]) -> bool:
    """Findings for output heads made of other (query head, key/value head) maps than (2i, 2i // G) and (2i + 1, (2i + 1) // G)."""
    right = [[(h, h // G) for h in (2 * i, 2 * i + 1)] for i in range(H)]
    if used == right:
        return False
    queries = [sorted({h for h, _ in u}) for u in used]
    if queries != [[2 * i, 2 * i + 1] for i in range(H)]:
        halves = all(q == [i, i + H] for i, q in enumerate(queries))
        kv = "" if all(g == h // G for u in used for h, g in u) else f" (reading key/value heads {[[g for _, g in u] for u in used]})"
        return found.first(DIFF_V2, (True, "heads", "Heads are paired as halves, not as even/odd neighbours" if halves else
                                     "Output heads combine the wrong query heads",
                                     f"Read out of your output (Hq = {HQ}, Hkv = {HKV}, G = {G}), output heads 0 to {H - 1} combine query heads "
                                     f"{queries}{kv}, not (2i, 2i + 1) = {[[2 * i, 2 * i + 1] for i in range(H)]}.",
                                     "pair query heads 2i and 2i + 1, in their original order: A[:, :, 0::2] and A[:, :, 1::2]"))  # fmt: skip
    return found.first(DIFF_V2, (True, "heads", "The pairs' query heads read the wrong key/value heads",
                                 f"Read out of your output (Hq = {HQ}, Hkv = {HKV}, G = {G}), the query heads of the pairs read key/value heads "
                                 f"{[[g for _, g in u] for u in used]}, not h // G = {[[g for _, g in u] for u in right]}.",
                                 "attend query head h with key/value head h // G (through gqa_attention on all Hq heads at once)"))  # fmt: skip


def _pair_findings(found: Found, even: np.ndarray, odd: np.ndarray) -> bool:
    """Findings for the weights of each pair's even and odd head at each gate logit (GATES × H each); whether there was any."""
    sigma = oracle.sigmoids(np.asarray(GATES))[:, None]
    if np.allclose(odd, 1.0, atol=1e-6) and np.allclose(even, -sigma, atol=1e-6):
        return found.first(DIFF_V2, (True, "heads", "The pair's roles are swapped: the even head is gated",
                                     "Read out of your output, each output head is A_2i+1 − σ(ℓ)·A_2i.",
                                     "out = A[:, :, 0::2] − σ(ℓ)·A[:, :, 1::2]: the odd head is the gated one"))  # fmt: skip
    weights = f"Read out of your output, each pair's (even, odd) heads are weighted {_combination(even, odd)}, not (1, −σ(ℓ))."
    if np.allclose(even, sigma, atol=1e-6) and np.allclose(odd, -sigma, atol=1e-6):
        return found.first(DIFF_V2, (True, "gate", "The gate multiplies the whole difference: σ(ℓ)·(A_2i − A_2i+1)", weights,
                                     "gate the odd head only: A_2i − σ(ℓ)·A_2i+1"))  # fmt: skip
    if np.allclose(odd, sigma * even, rtol=1e-6, atol=1e-9):
        return found.first(DIFF_V2, (True, "output", "The gated head is added, not subtracted", weights,
                                     "subtract the gated odd head: A_2i − σ(ℓ)·A_2i+1 (no lerp, no sum)"))  # fmt: skip
    factor = float(np.mean(even))
    if not np.allclose(even, factor, atol=1e-6) and np.allclose(odd, -sigma * even, rtol=1e-6, atol=1e-9):
        return found.first(DIFF_V2, (True, "output", "The gated difference is rescaled by a factor that depends on the gate",
                                     f"Read out of your output, each output head is f·(A_2i − σ(ℓ)·A_2i+1) with f = "
                                     f"{', '.join(f'{x:.4g} at ℓ = {g:g}' for g, x in zip(GATES, even[:, 0]))}: the difference is right, "
                                     "then multiplied by something the gate sets (a norm of the weights 1 and σ(ℓ), such as 1/√(1 + λ²)?).",
                                     "return A_2i − σ(ℓ)·A_2i+1 itself: DIFF V2 rescales nothing after the difference"))  # fmt: skip
    if not np.allclose(even, factor, atol=1e-6):
        gated = not np.allclose(even, even[:1], atol=1e-6)  # the even head's weight moves with the gate logit (the rows)
        return found.first(DIFF_V2, (True, "gate" if gated else "output", "The gate reaches the even head, whose weight must be 1" if gated
                                     else "The pair's heads are combined with the wrong weights", weights,
                                     "combine each pair as A_2i − σ(ℓ)·A_2i+1: the even head with weight 1, the odd one gated"))  # fmt: skip
    if abs(factor - 1.0) > 1e-6:
        v1 = " (1 − λ_init, DIFF V1's factor)" if round(factor, 6) in (0.8, 0.2) else ""
        return found.first(DIFF_V2, (True, "output", f"The output is multiplied by {factor:.4g}",
                                     f"Read out of your output, each output head is {factor:.4g}·(A_2i − σ(ℓ)·A_2i+1){v1}.",
                                     "return A_2i − σ(ℓ)·A_2i+1 itself: DIFF V2 has no factor after the difference"))  # fmt: skip
    gate = -odd / factor
    if np.allclose(gate, sigma, rtol=1e-6, atol=1e-9):
        return False
    logits = np.asarray(GATES)[:, None]
    for name, form, advice in GATE_FORMS:
        if np.allclose(gate, form(logits) * np.ones_like(gate), rtol=1e-6, atol=1e-9):
            return found.first(DIFF_V2, (True, "gate", f"The gate is wrong: {name}",
                                         f"Read out of your output at ℓ = {', '.join(f'{g:g}' for g in GATES)}, the odd head is weighted "
                                         f"by {', '.join(f'{x:.4g}' for x in gate[:, 0])}, not σ(ℓ) = {', '.join(f'{x:.4g}' for x in sigma[:, 0])}.",
                                         advice))  # fmt: skip
    return found.first(DIFF_V2, (True, "gate", "The gate is not σ(ℓ)",
                                 f"Read out of your output at ℓ = {', '.join(f'{g:g}' for g in GATES)}, the odd head is weighted by "
                                 f"{', '.join(f'{x:.4g}' for x in gate[:, 0])}, not σ(ℓ) = {', '.join(f'{x:.4g}' for x in sigma[:, 0])}.",
                                 "λ = torch.sigmoid(lambda_logits), one per token and pair"))  # fmt: skip


def _offset_scaled(found: Found, base: np.ndarray | None, shifted: np.ndarray | None) -> bool:
    """A finding when a value offset shared by every token (:data:`SHARED_OFFSET`, ℓ = 0) moves the output by one common
    factor other than 1 − σ(0) = 1/2, the row sum of every signed map; whether there was one. A factor of 0 is the odd
    head weighted 1 (the gate does not scale its map); any other, a term outside the gated difference."""
    factor = probes.common_factor(base, shifted, SHARED_OFFSET)
    if factor is None or abs(factor - 0.5) <= 1e-6:
        return False
    moved = (f"Adding {SHARED_OFFSET:g} to every token's value at ℓ = 0 moved your output by {round(factor * SHARED_OFFSET, 9) + 0.0:.4g} everywhere; "
             f"each row of A_2i − σ(ℓ)·A_2i+1 sums to 1 − σ(ℓ) = 0.5, so it must move by {0.5 * SHARED_OFFSET:g}")
    if abs(factor) <= 1e-6:
        return found.first(DIFF_V2, (True, "gate", "The gate does not weight the odd head's map: it is weighted 1, not σ(ℓ)",
                                     f"{moved}: the rows of your signed map sum to 0, as A_2i − A_2i+1's do (the gate applied to "
                                     "something a softmax normalises away, such as the odd head's queries or logits, or never applied).",
                                     "multiply the odd head's attention output by σ(ℓ): A_2i − σ(ℓ)·A_2i+1"))  # fmt: skip
    return found.first(DIFF_V2, (True, "output", f"A value offset shared by every token comes out scaled by {factor:.4g}, not 1 − σ(ℓ)",
                                 f"{moved}: a term added or removed outside the gated difference (a mean taken out and put back "
                                 "ungated?) is not scaled with it.",
                                 "everything that reaches the output goes through A_2i − σ(ℓ)·A_2i+1 applied to v"))  # fmt: skip


def _map_basis(values: Values, causal: bool) -> np.ndarray:
    """[HQ·HKV, T, D]: the output of query head h reading key/value head g (h·HKV + g) with one-hot values, batch element 0."""
    basis = np.zeros((HQ, HKV, T, D))
    for g in range(HKV):
        maps = oracle.attention_maps(values["q"], np.repeat(values["k"][:, :, g : g + 1], HKV, axis=2), causal)[0]  # every head reads g
        basis[:, g, :, g * T : (g + 1) * T] = maps
    return basis.reshape(HQ * HKV, T, D)


def _head_maps(found: Found, values: Values, read: np.ndarray, heads: Sequence[int], causal: bool, how: str) -> bool:
    """Explain the maps of query heads ``heads`` (one per output head), read out of ``read`` (output head i holds A_heads[i]
    v, with one-hot values) and ``causal``; whether that localised the fault (a map no softmax model explains included)."""
    blocks = [(h // G) * T for h in heads]
    maps = [read[0, :, i, start : start + T] for i, start in enumerate(blocks)]
    outside = max(float(np.abs(np.delete(read[0, :, i], np.arange(start, start + T), axis=-1)).max()) for i, start in enumerate(blocks))
    if outside > FITS:
        return False  # values of other heads: not one attention map per head, nothing to explain
    fits = _explained(values, maps, heads, causal) if min(float(m.min()) for m in maps) >= -FITS else None
    if fits is None:
        return unexplained_maps(found, DIFF_V2, np.array(maps), how + ("" if causal else ", causal=False"),
                                oracle.attention_maps(values["q"], values["k"], causal)[0][list(heads)], causal)  # fmt: skip
    return _map_findings(found, fits, DIFF_V2)


def _pair_maps(found: Found, values: Values, gate_off: np.ndarray, gated: np.ndarray, causal: bool) -> bool:
    """Explain the even heads' maps, read with the gate off (σ(ℓ) ≈ 0: output head i is A_2i v), then the odd heads', read as
    (gate off − gated) / σ(ℓ) with the gate at the last of :data:`GATES` (output head i is A_2i v − σ(ℓ)·A_2i+1 v there);
    whether that localised the fault."""
    pairs = range(H)
    if _head_maps(found, values, gate_off, [2 * i for i in pairs], causal, f"one-hot values and the gate off (ℓ = {GATE_OFF:g})"):
        return True
    sigma = float(oracle.sigmoids(np.asarray(GATES[-1])))
    return _head_maps(found, values, (gate_off - gated) / sigma, [2 * i + 1 for i in pairs], causal,
                      f"one-hot values, as the change of the output between the gate off and ℓ = {GATES[-1]:g}, divided by σ(ℓ)")  # fmt: skip


def pairs_probe(worker: Worker, values: Values, found: Found, causal: bool = True, layout: Layout = "contiguous") -> bool:
    """Read each output head out as a combination of every query head's map with every key/value head, at several constant
    gates, with v = 0, with v doubled and with v shifted by an offset shared by every token (``causal``, inputs in memory
    ``layout``); whether the forward was localised."""
    found.probes.append(f"{DIFF_V2}: output heads read out as combinations of the query heads' maps, at several gates" + ("" if causal else ", causal=False"))
    points = [{**values, "v": one_hot(), "lambda_logits": np.full((B, T, H), g)} for g in GATES]
    off = np.full((B, T, H), GATE_OFF)
    points += [{**points[1], "v": 2.0 * one_hot()}, {**points[1], "lambda_logits": off}, {**values, "v": coded_values(), "lambda_logits": off},
               {**points[1], "lambda_logits": off / 10.0}, {**points[1], "v": np.zeros_like(values["v"])},
               {**points[1], "v": one_hot() + SHARED_OFFSET}, {**points[1], "lambda_logits": np.broadcast_to(HEAD_GATES, (B, T, H))},
               {**values, "v": coded_values(), "lambda_logits": np.full((B, T, H), GATE_ON)}]  # fmt: skip
    outs = [_shaped(o, DIFF_V2) for o in probes.sweep(worker, subject(DIFF_V2, causal, layout=layout), points)]
    zero_v, offset, per_head, coded_on = outs[len(GATES) + 4 :]
    if _added_term(found, DIFF_V2, zero_v):
        return True
    if any(o is None or not np.isfinite(o).all() for o in outs[: len(GATES) + 1]):
        return False
    basis = _map_basis(values, causal)
    fitted = [[_fit(out[0, :, i], basis) for i in range(H)] for out in outs[: len(GATES)] if out is not None]
    if max(residual for row in fitted for _, residual in row) > FITS:
        doubled, gate_off, coded, nearly_off = outs[len(GATES) : len(GATES) + 4]
        assert doubled is not None and outs[1] is not None
        both = [o for o in (gate_off, nearly_off) if o is not None and np.isfinite(o).all()]
        if len(both) == 2 and not np.allclose(both[0], both[1], rtol=1e-9, atol=1e-12):  # σ(ℓ) is 0 at both gates
            change = float(np.abs(both[0] - both[1]).max())
            return found.first(DIFF_V2, (True, "gate", "The gate logits reach the output other than through σ(ℓ)",
                                         f"Changing every gate logit from {GATE_OFF / 10:g} to {GATE_OFF:g}, where σ(ℓ) is 0 at both, changed your "
                                         f"output by up to {change:.4g}: the logits themselves (not σ(ℓ), which lies in (0, 1)) multiply or are "
                                         "added to something.", "λ = torch.sigmoid(lambda_logits) multiplies the odd head's attention: A_2i − λ·A_2i+1"))  # fmt: skip
        if not np.allclose(doubled, 2.0 * outs[1], rtol=1e-6, atol=1e-9) and findings.scale_free(doubled, outs[1]):
            return found.first(DIFF_V2, (True, "output", "The output is normalised after the difference",
                                         "Doubling v left your output almost as it was: A_2i v − σ(ℓ)·A_2i+1 v is linear in v, so something scale-free "
                                         "(an RMSNorm, a layer norm: DIFF V1's head norm) rescales it.",
                                         "return the gated difference itself; DIFF V2 has no norm after it"))  # fmt: skip
        if _offset_scaled(found, outs[1], offset):
            return True
        gated = outs[len(GATES) - 1]
        if gate_off is None or not np.isfinite(gate_off).all() or gated is None:
            return False
        if _moved_features(found, coded, DIFF_V2):
            return True
        even_right = coded is not None and np.allclose(coded, _coded_reads(2 * np.arange(H)), rtol=0.0, atol=FITS)
        if even_right and coded_on is not None and _moved_features(found, coded - coded_on, DIFF_V2, odd=True):  # σ(ℓ) = 1: A_2i v − A_2i+1 v
            return True
        return _pair_maps(found, values, gate_off, gated, causal)
    weights = np.array([[w for w, _ in row] for row in fitted]).reshape(len(GATES), H, HQ, HKV)
    used = [[(int(h), int(g)) for h, g in np.argwhere(np.abs(weights[:, i]).max(axis=0) > 1e-6)] for i in range(H)]
    if _routing_findings(found, used):
        return True
    even, odd = _pair_weights(weights)
    return _gates_of_other_heads(found, per_head, basis, even, odd) or _pair_findings(found, even, odd)


def _pair_weights(weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each output head's weight on its own pair's even and odd query heads, each with its key/value head, from read-out
    ``weights`` (..., output head, query head, key/value head): two arrays (..., output head)."""
    pairs = np.arange(H)
    return weights[..., pairs, 2 * pairs, (2 * pairs) // G], weights[..., pairs, 2 * pairs + 1, (2 * pairs + 1) // G]


def _gates_of_other_heads(found: Found, out: np.ndarray | None, basis: np.ndarray, even: np.ndarray, odd: np.ndarray) -> bool:
    """A gate finding when, read out with :data:`HEAD_GATES`, some output head's (even, odd) weights differ from its weights
    when every head has that head's logit (``even``, ``odd``: GATES × H): the other heads' logits reach it. Whether so."""
    if out is None or not np.isfinite(out).all():
        return False
    fitted = [_fit(out[0, :, i], basis) for i in range(H)]
    if max(residual for _, residual in fitted) > FITS:
        return False
    got = np.stack(_pair_weights(np.array([w for w, _ in fitted]).reshape(H, HQ, HKV)), axis=1)
    alone = np.stack([[even[GATES.index(g), i], odd[GATES.index(g), i]] for i, g in enumerate(HEAD_GATES)])
    differ = [i for i in range(H) if not np.allclose(got[i], alone[i], rtol=1e-6, atol=1e-9)]
    if not differ:
        return False
    i = differ[0]
    return found.first(DIFF_V2, (True, "gate", "Each output head's gate mixes the other heads' logits",
                                 f"Read out of your output with a gate logit of its own for each output head ({', '.join(f'{g:g}' for g in HEAD_GATES)}), "
                                 f"output head {i}'s pair is weighted ({got[i, 0]:.4g}, {got[i, 1]:.4g}); with the same logit {HEAD_GATES[i]:g} on "
                                 f"every head it is weighted ({alone[i, 0]:.4g}, {alone[i, 1]:.4g}): the other heads' logits reach it (the gates "
                                 "summed or broadcast over the heads' axis: an einsum subscript or an unsqueeze on the wrong axis?).",
                                 "λ[b, t, i] = σ(lambda_logits[b, t, i]) weights the odd head of output head i alone"))  # fmt: skip


def pairs_apart_probe(worker: Worker, values: Values, rng: np.random.Generator, found: Found) -> bool:
    """The queries of the last batch element changed must leave batch element 0's output as it was: a heads finding when
    they do not (diff_v2_attention combines heads only to pair them, so pairs formed across batch elements); whether so."""
    found.probes.append(f"{DIFF_V2}: batch elements apart")
    effects = probes.dependence(worker, subject(DIFF_V2), values, [Perturbation("q", (B - 1,), "the queries of the last batch element", forbidden=(0,))], rng)
    if not effects or not effects[0].leaked:
        return False
    return found.first(DIFF_V2, (True, "heads", "Pairs are formed across batch elements: one sequence's queries change another's outputs",
                                 f"Changing every query of batch element {B - 1} changed outputs of batch element 0: the query heads are paired "
                                 "along an axis that holds the batch too (batch and heads folded head-major, [H·B, ...], before taking "
                                 "heads 2i and 2i + 1?).",
                                 "pair the query heads of each batch element on the heads axis of [B, T, Hq, D]: A[:, :, 0::2] and A[:, :, 1::2]"))  # fmt: skip


def gate_dependence_probe(worker: Worker, values: Values, rng: np.random.Generator, found: Found) -> bool:
    """One gate logit changed must move its own batch element, token and output head, and nothing else; whether it does not."""
    found.probes.append(f"{DIFF_V2}: which gate logit matters")
    spots = ((0, T // 2, H - 1), (0, T - 1, 0), (B - 1, T - 1, 1))
    perturbations = [Perturbation("lambda_logits", spot, f"lambda_logits[{', '.join(map(str, spot))}]") for spot in spots]
    effects = probes.dependence(worker, subject(DIFF_V2), values, perturbations, rng)
    if effects is None or len(effects) < len(perturbations):
        return False
    for (b, t, i), effect in zip(spots, effects):
        own = np.zeros_like(effect.moved)
        own[b, t, i] = True
        elsewhere = effect.moved & ~own
        if not effect.moved.any():
            return found.first(DIFF_V2, (True, "gate", f"The output ignores lambda_logits{'' if b == 0 else ' of later batch elements'}",
                                         f"Changing lambda_logits[{b}, {t}, {i}] left your whole output unchanged.",
                                         "gate the odd head of pair i at batch element b and token t with σ(lambda_logits[b, t, i])"))  # fmt: skip
        if effect.moved[b, t, i].any() and not elsewhere.any():
            continue
        spread = np.argwhere(elsewhere)
        batches, tokens, heads = (sorted({int(x) for x in spread[:, axis]}) for axis in range(3))
        if not effect.moved[b, t, i].any():
            return found.first(DIFF_V2, (True, "gate", "Each gate logit gates another position than its own",
                                         f"Changing lambda_logits[{b}, {t}, {i}] left your output at [{b}, {t}, {i}] unchanged and changed it at "
                                         f"batch elements {batches}, tokens {tokens}, heads {heads}: the logits are read in another order "
                                         "(batch, token and head axes flattened or transposed differently from the output's).",
                                         "λ[b, t, i] = σ(lambda_logits[b, t, i]) multiplies out[b, t, i]: index lambda_logits as [B, T, H] "
                                         "in the same order as the output"))  # fmt: skip
        where = "other tokens of the same head (averaged or reduced over tokens?)" if heads == [i] and batches == [b] else "other tokens or heads"
        return found.first(DIFF_V2, (True, "gate", "Each gate logit must act on its own token and head only",
                                     f"Changing lambda_logits[{b}, {t}, {i}] changed the output at {where}: batch elements {batches}, "
                                     f"tokens {tokens}, heads {heads}.",
                                     "λ[b, t, i] = σ(lambda_logits[b, t, i]) multiplies out[b, t, i] only: index it as [B, T, H] "
                                     "(unsqueeze(-1)), no mean, transpose or reshape"))  # fmt: skip
    return False


def saturated_probe(worker: Worker, values: Values, found: Found, gradients: bool, source: str | None) -> bool:
    """Gate logits at ±100 to ±1000, float32 and float64: the output finite and right, the gradient of ℓ finite; whether not.
    Called when the float64 output is right for ordinary logits; a float32 output is judged only when float32 inputs with
    ordinary logits give the right output too (else what is wrong is not the gate's saturation)."""
    found.probes.append(f"{DIFF_V2}: saturated gates")
    signs = np.where(np.arange(B * T * H).reshape(B, T, H) % 2 == 0, 1.0, -1.0)
    runs = []
    for dtype, size in (("float32", 150.0), ("float64", 800.0)):
        point = {n: exact(x, dtype) for n, x in {**values, "lambda_logits": signs * size}.items()}
        runs.append((dtype, point))
    built = [subject(DIFF_V2, True, dtype).request(point, ("lambda_logits",), np.ones((B, T, H, D))) for dtype, point in runs]
    ordinary = {n: exact(x, "float32") for n, x in values.items()}
    *outcomes, plain = probes.ask(worker, [*built, subject(DIFF_V2, True, "float32").request(ordinary)])
    float32_right = is_right(_shaped(probes.output(plain), DIFF_V2), truth(DIFF_V2, ordinary, True), FLOAT32_LIKE)
    for (dtype, point), outcome, request in zip(runs, outcomes, built):
        out = probes.output(outcome)
        if out is None or outcome.failure is not None or (dtype == "float32" and not float32_right):
            continue
        size, expected = point["lambda_logits"].max(), truth(DIFF_V2, point, True)
        if not np.isfinite(out).all():
            return found.first(DIFF_V2, (True, "stability", "The gate overflows for saturated logits",
                                         f"With {dtype} lambda_logits of ±{size:g}, your output is NaN or infinite: exp(±ℓ) overflows.",
                                         "use torch.sigmoid (or exp(−|ℓ|) with both branches) for the gate"))  # fmt: skip
        # the gate has saturated to 1 and 0 within the dtype's rounding there: an error the dtype does not explain is the gate's
        if not is_right(out, expected, RIGHT if dtype == "float64" else FLOAT32_LIKE):
            return found.first(DIFF_V2, (True, "gate", "The gate stops short of 0 and 1 for saturated logits",
                                         f"With {dtype} lambda_logits of ±{size:g}, your output is off by "
                                         f"{float(np.max(np.abs(out - expected))):.2g} while it is right for ordinary logits: σ(±{size:g}) is 1 "
                                         f"and 0 to {dtype}'s precision, and your gate is not (a clamp of the logits, or an ε that bounds the gate).",
                                         "apply torch.sigmoid to lambda_logits as they are: no clamp, no ε"))  # fmt: skip
        gradient = outcome.grads.get(request.positions["lambda_logits"])
        if gradients and outcome.backward_error is None and gradient is not None and not np.isfinite(np.asarray(gradient, dtype=np.float64)).all():
            said = f"With {dtype} lambda_logits of ±{point['lambda_logits'].max():g}, your output is right but the gradient of lambda_logits is not finite"
            if findings.uses_custom_backward(source):  # the student's own backward computed it
                found.add(DIFF_V2, "backward", "gradients", "Your backward's gradient for lambda_logits is NaN or infinite for saturated logits",
                          f"{said}: your hand-written backward divides by, or takes the logarithm of, something that reaches 0 or "
                          "infinity there (σ, 1 − σ, exp(±ℓ))?", "compute the gate's gradient as σ(1 − σ) from σ itself, which stays "
                          "finite for every logit", inputs=("lambda_logits",))  # fmt: skip
                return True
            found.add(DIFF_V2, "stability", "gradients", "The gate's gradient is NaN or infinite for saturated logits",
                      f"{said}: exp(−ℓ) overflows in the backward pass (1 / (1 + exp(−ℓ))).",
                      "use torch.sigmoid for the gate: its backward σ(1 − σ) never overflows", inputs=("lambda_logits",))  # fmt: skip
            return True
    return False


SWEPT = np.linspace(-60.0, 60.0, B * T * H).reshape(B, T, H)  # one gate logit per (batch, token, pair), none twice
# logits within ±1: σ(ℓ) near 1/2, where every gate formula is tried; an output right there and wrong for other logits is
# wrong in the gate alone (what else it computes weighs the odd head by σ(ℓ) at every logit)
CORE_GATES = 1.0
RESOLVED = 1e-12  # a float64 output of the sweep is wrong past this share of the largest true magnitude: σ(ℓ) to ℓ ≈ 27


def _bands(logits: np.ndarray, wrong: np.ndarray) -> list[tuple[float, float]] | None:
    """The wrong logits as at most one band on each side of 0 (sorted, no right logit inside), or None when they are not."""
    bands = []
    for side in (logits < 0, logits > 0):
        order = np.argsort(logits[side])
        flags, seen = wrong[side][order], logits[side][order]
        if not flags.any():
            continue
        where = np.flatnonzero(flags)
        if not flags[where[0] : where[-1] + 1].all():
            return None
        bands.append((float(seen[where[0]]), float(seen[where[-1]])))
    return bands


def gate_range_probe(worker: Worker, values: Values, found: Found) -> bool:
    """float64 gate logits from −60 to 60, one per (batch, token, pair), against the oracle: whether the output is wrong over
    bands of logits past ±:data:`CORE_GATES` alone (a clamp, a threshold of softplus, a branch of the formula, a tail
    approximation)."""
    found.probes.append(f"{DIFF_V2}: gate logits from −60 to 60, one per token and pair")
    point = {**values, "lambda_logits": SWEPT}
    out = _shaped(probes.sweep(worker, subject(DIFF_V2), [point])[0], DIFF_V2)
    if out is None:
        return False
    expected = truth(DIFF_V2, point, True)
    with np.errstate(invalid="ignore"):
        wrong = ~(np.abs(out - expected).max(axis=-1) <= RESOLVED * max(1.0, float(np.abs(expected).max())))
    logits, flags = SWEPT.ravel(), wrong.ravel()
    bands = _bands(logits, flags)
    if not bands or flags[np.abs(logits) <= CORE_GATES].any():
        return _undefined_gate(worker, values, out, found) or _gates_read(found, point, out)
    said = " and ".join(f"from {low:.4g} to {high:.4g}" for low, high in bands)
    broken = not np.isfinite(out).all()
    return found.first(DIFF_V2, (True, "stability" if broken else "gate", f"The gate is wrong for logits {said}",
                                 f"With float64 gate logits from −60 to 60, one per token and pair, your output is "
                                 f"{'NaN or infinite' if broken else 'wrong'} where ℓ is {said}, and right for every other logit: "
                                 "the gate is not σ(ℓ) there (a clamp, a threshold such as softplus's, or one branch of a formula?).",
                                 "λ = torch.sigmoid(lambda_logits) as the logits come: it is exact and finite for every logit"))  # fmt: skip


def _gates_read(found: Found, point: Values, out: np.ndarray) -> bool:
    """A gate finding when the sweep's output (``out`` at ``point``) is, at every (batch, token, output head), the true even
    head's output less some g times the true odd head's, and those g are σ(a·ℓ + c) with (a, c) ≠ (1, 0), or no such σ;
    whether so."""
    with np.errstate(over="ignore"):
        even = truth(DIFF_V2, {**point, "lambda_logits": np.full_like(point["lambda_logits"], GATE_OFF)}, True)
        odd = even - truth(DIFF_V2, {**point, "lambda_logits": np.full_like(point["lambda_logits"], GATE_ON)}, True)
    if not np.isfinite(out).all():
        return False
    norms = (odd * odd).sum(axis=-1)
    gates = ((even - out) * odd).sum(axis=-1) / np.where(norms > 0.0, norms, 1.0)
    scale = max(1.0, float(np.abs(even).max()))
    if float(np.abs(even - gates[..., None] * odd - out).max()) > FITS * scale:
        return False  # not the two heads' outputs weighed against each other: no gate to read
    logits = point["lambda_logits"]
    resolved = (norms > 1e-6) & (gates > 1e-9) & (gates < 1.0 - 1e-9)
    if resolved.sum() < 3:
        return False
    implied = np.log(gates[resolved] / (1.0 - gates[resolved]))
    (slope, intercept), *_ = np.linalg.lstsq(np.stack([logits[resolved], np.ones(int(resolved.sum()))], axis=1), implied, rcond=None)
    affine = float(np.abs(slope * logits[resolved] + intercept - implied).max()) <= 1e-6 * max(1.0, float(np.abs(implied).max()))
    if affine and abs(slope - 1.0) <= 1e-6 and abs(intercept) <= 1e-6:
        return False
    shown = [int(i) for i in np.flatnonzero(resolved.ravel())[:: max(1, int(resolved.sum()) // 3)][:3]]
    examples = ", ".join(f"ℓ = {logits.ravel()[i]:.4g} gets {gates.ravel()[i]:.4g} (σ(ℓ) = {float(oracle.sigmoids(logits.ravel()[i])):.4g})"
                         for i in shown).replace("-", "−")
    shift = "" if abs(intercept) <= 1e-6 else f" {'−' if intercept < 0 else '+'} {abs(intercept):.4g}"
    form = f"σ({slope:.4g}·ℓ{shift})" if affine else "no σ of ℓ"
    return found.first(DIFF_V2, (True, "gate", "The gate is not σ(ℓ) of each logit",
                                 f"With float64 gate logits from −60 to 60, one per token and pair, each output head of yours is its even head "
                                 f"less g times its odd head, but g is {form}: {examples}. The logits are rescaled, shifted or transformed "
                                 "before the sigmoid (by the largest logit of the call?), or the gate is another function of them.",
                                 "λ = torch.sigmoid(lambda_logits) as the logits come, each on its own"))  # fmt: skip


ORDER = np.random.default_rng(0).permutation(SWEPT.size)
RESWEPT = SWEPT.ravel()[ORDER].reshape(SWEPT.shape)
"""The logits of :data:`SWEPT` at other positions (position j holds the logit of position ``ORDER[j]``)."""


def _undefined_gate(worker: Worker, values: Values, out: np.ndarray, found: Found) -> bool:
    """A gate finding when the sweep's output (``out``) is NaN or infinite at the positions whose logits fall in bands that
    reach within ±:data:`CORE_GATES`, where σ(ℓ) is near 1/2 and nothing overflows, and finite elsewhere, and the same logits
    at other positions (:data:`RESWEPT`) break the same logits' outputs: the function applied to the logits is undefined
    there (a log or logit of them, a division). Whether there was one."""
    broken = ~np.isfinite(out).all(axis=-1).ravel()
    bands = _bands(SWEPT.ravel(), broken)
    if not bands or not broken[np.abs(SWEPT.ravel()) <= CORE_GATES].any() or broken.all():
        return False
    again = _shaped(probes.sweep(worker, subject(DIFF_V2), [{**values, "lambda_logits": RESWEPT}])[0], DIFF_V2)
    if again is None or not np.array_equal(~np.isfinite(again).all(axis=-1).ravel(), broken[ORDER]):
        return False  # the broken outputs follow positions, not logits
    said = " and ".join(f"from {low:.4g} to {high:.4g}" for low, high in bands)
    return found.first(DIFF_V2, (True, "gate", f"The gate is NaN or infinite for logits {said}",
                                 f"With float64 gate logits from −60 to 60, one per token and pair, your output is NaN or infinite exactly "
                                 f"where ℓ is {said}, and finite for the other logits; the same logits at other tokens break the same way. "
                                 "The function your code applies to lambda_logits is undefined there (a log, a logit or a division of the "
                                 "logits?), while σ(ℓ) is finite for every logit.",
                                 "λ = torch.sigmoid(lambda_logits) as the logits come: it is exact and finite for every logit"))  # fmt: skip


# ---- both ---------------------------------------------------------------------------------


STABLE_LENGTH = 300  # the stability probe's long calls: past key tiles of 32, 64, 128 and 256, a multiple of none
# the probes' own length, then past the block sizes 32 and 64, a length no power of two is near, past 256, 512, 1024 and
# 2048
LENGTHS = (T, 33, 65, 100, 300, *domain.PROBED_PAST_BUFFERS)


def _long_values(rng: np.random.Generator, tokens: int) -> dict[str, np.ndarray]:
    """Inputs of ``tokens`` tokens with one batch element, Hq = 4, Hkv = 2, D = 4."""
    return {"q": rng.standard_normal((1, tokens, 4, 4)) * 1.2, "k": rng.standard_normal((1, tokens, 2, 4)) * 1.2,
            "v": rng.standard_normal((1, tokens, 2, 4)), "lambda_logits": 1.5 * rng.standard_normal((1, tokens, 2))}  # fmt: skip


WIDTHS = (D, 32, 40, 72, 128)  # the probes' own head width; odd powers of two of at least T, where √D is none; past the slab widths 32 and 64


def width_probe(worker: Worker, function: str, rng: np.random.Generator, found: Found) -> bool:
    """The maps of one pair of query heads on one key/value head read out (one-hot values, causal=False; for diff_v2_attention
    the gate shut, so that the output is the even head's attention) at head widths :data:`WIDTHS`, against the oracle
    (:func:`~grader.toolkit.findings.width_probe`)."""
    points = []
    for d in WIDTHS:
        value = np.zeros((1, T, 1, d))
        value[0, np.arange(T), 0, np.arange(T)] = 1.0
        points.append({"q": rng.standard_normal((1, T, 2, d)), "k": rng.standard_normal((1, T, 1, d)), "v": value,
                       "lambda_logits": np.full((1, T, 1), GATE_OFF)})  # fmt: skip
    how = "one-hot values and causal=False" + ("" if function == GQA else ", the gate shut")
    return findings.width_probe(worker, function, subject(function, False), points, WIDTHS, lambda point: truth(function, point, False), T,
                                how, found)


SHORT_FIRST = (5, 16, *LENGTHS)
"""The lengths of the length probe when the probes' own output is wrong: from 5 and 16 tokens, within one block of 16, so
that a fault of every sequence past one block (T = 17 included) shows from where it starts."""


def length_probe(worker: Worker, function: str, rng: np.random.Generator, found: Found, lengths: Sequence[int] = LENGTHS) -> bool:
    """float64 outputs of ``function`` at ``lengths`` (one batch element, Hq = 4, Hkv = 2, D = 4), causal and not, against
    the oracle; whether long sequences alone are wrong."""
    drawn = domain.offshoot(rng, "long sequences")
    points = [_long_values(drawn, t) for t in lengths]
    if function == DIFF_V2 and _long_gates_probe(worker, points[list(lengths).index(domain.MODEL_LENGTHS[0])], found):
        return True
    return findings.length_probe(worker, function, functools.partial(subject, function), points, lengths,
                                 lambda values, causal: truth(function, values, causal), found, findings.TokenAxes("v", 1, 1, "output"))  # fmt: skip


def _long_gates_probe(worker: Worker, long: Values, found: Found) -> bool:
    """diff_v2_attention on a long sequence (``long``) with its own gate logit for every token, and with each head's first
    logit shared by every token; a gate finding when the first is wrong and the second right: some token's gate is another
    token's (one computed for a first chunk and reused). Whether there was one."""
    logits = np.asarray(long["lambda_logits"])
    shared = {**long, "lambda_logits": np.repeat(logits[:, :1], logits.shape[1], axis=1)}
    own, same = probes.sweep(worker, subject(DIFF_V2, True), [long, shared])
    expected = truth(DIFF_V2, long, True)
    if own is None or own.shape != expected.shape or is_right(own, expected) or not is_right(same, truth(DIFF_V2, shared, True)):
        return False
    errors = np.abs(own - expected).reshape(expected.shape[0], expected.shape[1], -1).max(axis=(0, 2))
    first = int(np.argmax(errors > RIGHT * max(1.0, float(np.abs(expected).max()))))
    found.add(DIFF_V2, "gate", "forward", "Past the first tokens, a token's gate is not its own",
              f"At T = {expected.shape[1]} your output is wrong from token {first} on when every token has a gate logit of its own, and "
              "right when every token shares one: those tokens are gated by another token's logit (a gate computed for a first "
              "chunk or block and reused, or read at another position).",
              "gate token t of pair i with sigmoid(lambda_logits[:, t, i]), its own logit, at every position")  # fmt: skip
    return True


# (Hq, Hkv) of the grouping probe: group sizes that are not powers of two (3, 5, 6, 10), a number of key/value heads that is
# not one either (3), and G = 1 and 2 beside them, so that what goes wrong with some groupings is told from what never works
GROUPINGS = {GQA: ((3, 1), (6, 2), (9, 3), (10, 2), (4, 4), (6, 3)), DIFF_V2: ((6, 1), (12, 2), (18, 3), (20, 2), (6, 3), (8, 2))}
GROUPING_T, GROUPING_D = 5, 3


def _grouping_points(function: str, rng: np.random.Generator) -> list[dict[str, np.ndarray]]:
    """For each grouping of :data:`GROUPINGS` (one batch element, :data:`GROUPING_T` tokens of :data:`GROUPING_D` features):
    values the same at every token, feature c of key/value head g coded 1 + g·D + c (with diff_v2_attention's gate shut,
    then at ℓ = 0), then random values and gate logits."""
    points = []
    for hq, hkv in GROUPINGS[function]:
        q, k = rng.standard_normal((1, GROUPING_T, hq, GROUPING_D)), rng.standard_normal((1, GROUPING_T, hkv, GROUPING_D))
        coded = np.broadcast_to(1.0 + np.arange(hkv * GROUPING_D, dtype=np.float64).reshape(hkv, GROUPING_D), (1, GROUPING_T, hkv, GROUPING_D))
        gates = (GATE_OFF, 0.0) if function == DIFF_V2 else (0.0,)
        points += [{"q": q, "k": k, "v": coded.copy(), "lambda_logits": np.full((1, GROUPING_T, hq // 2), gate)} for gate in gates]
        points.append({"q": q, "k": k, "v": rng.standard_normal(k.shape), "lambda_logits": 1.5 * rng.standard_normal((1, GROUPING_T, hq // 2))})
    return points


def _heads_read(out: np.ndarray | None, heads: int) -> list[int] | None:
    """Which key/value head each of ``heads`` output heads reads, from an output on coded values (each entry the code of
    the value feature it reads); None when some entry is not one feature (maps whose rows do not sum to 1, mixed heads) or a
    head reads features of several heads or at other positions."""
    if out is None or out.shape[2] != heads or not np.isfinite(out).all():
        return None
    codes = np.round(out - 1.0)
    if np.abs(out - 1.0 - codes).max() > FITS or codes.min() < 0:
        return None
    read, features = np.divmod(codes.astype(int), GROUPING_D)
    if (features != np.arange(GROUPING_D)).any() or (read != read[:, :1, :, :1]).any():
        return None
    return [int(g) for g in read[0, 0, :, 0]]


def grouping_probe(worker: Worker, function: str, rng: np.random.Generator, found: Found) -> bool:
    """``function`` at the groupings of :data:`GROUPINGS` (causal=False): a finding when query heads read other key/value
    heads than h // G (read out with coded values), or when the output is wrong at some groupings and right at others;
    whether there was one."""
    found.probes.append(f"{function}: key/value heads read at Hq, Hkv = " + ", ".join(f"{hq}, {hkv}" for hq, hkv in GROUPINGS[function]))
    points = _grouping_points(function, domain.offshoot(rng, "groupings"))
    outs = probes.sweep(worker, subject(function, False), points)
    per = 3 if function == DIFF_V2 else 2
    wrong_reads: list[tuple[int, int, list[int]]] = []
    right_values: list[tuple[int, int]] = []
    wrong_values: list[tuple[int, int]] = []
    for n, (hq, hkv) in enumerate(GROUPINGS[function]):
        coded, plain = outs[n * per:(n + 1) * per - 1], outs[(n + 1) * per - 1]
        if function == GQA:
            read = _heads_read(coded[0], hq)
        else:
            even = _heads_read(coded[0], hq // 2)
            odd = None if coded[0] is None or coded[1] is None or coded[0].shape != coded[1].shape else _heads_read(2.0 * (coded[0] - coded[1]), hq // 2)
            read = None if even is None or odd is None else [g for pair in zip(even, odd) for g in pair]
        if read is not None and read != [h // (hq // hkv) for h in range(hq)]:
            wrong_reads.append((hq, hkv, read))
        (right_values if is_right(plain, truth(function, points[(n + 1) * per - 1], False)) else wrong_values).append((hq, hkv))

    def described(hq: int, hkv: int) -> str:
        """A grouping in words."""
        return f"Hq = {hq}, Hkv = {hkv} (G = {hq // hkv})"

    if wrong_reads:
        hq, hkv, read = wrong_reads[0]
        others = [described(q, kv) for q, kv, _ in wrong_reads[1:]]
        fine = [described(q, kv) for q, kv in GROUPINGS[function] if all((q, kv) != (w[0], w[1]) for w in wrong_reads)]
        found.add(function, "heads", "forward", f"Query heads read the wrong key/value heads when G = {hq // hkv}",
                  f"With values the same at every token, each output is the value feature it reads{'' if function == GQA else ' (with the gate shut, then at ℓ = 0, which gives the odd heads too)'}. "
                  f"At {described(hq, hkv)} query heads 0 to {hq - 1} read key/value heads {read}, not h // G = "
                  f"{[h // (hq // hkv) for h in range(hq)]}" + (f"; also wrong at {', '.join(others)}" if others else "")
                  + (f"; right at {', '.join(fine)}." if fine else "."),
                  "give query head h key/value head h // G whatever G is: k.repeat_interleave(G, dim=2), the same for v")  # fmt: skip
        return True
    if wrong_values and right_values:
        found.add(function, "heads", "forward", "The output is wrong for some groupings of the heads only",
                  f"With random inputs (causal=False), your output is wrong at {', '.join(described(*w) for w in wrong_values)} and right at "
                  f"{', '.join(described(*r) for r in right_values)}: the heads are grouped, repeated or looped over in a way that "
                  "holds for some numbers of heads only.",
                  "treat Hq and Hkv as any sizes with Hq a multiple of Hkv: G = Hq // Hkv, query head h reads key/value head h // G")  # fmt: skip
        return True
    return False


REARRANGED = "build [B, T, H, D] by indexing and transposing, not by stacking on another axis and reshaping"
"""What to do when the output holds the right numbers in other places."""
PERMUTED = " with inputs, and so the incoming gradient, stored with tokens and heads swapped (an output read through a transpose)"
LONG = findings.LONG_RUN_TOKENS
TIED = " with query heads 2i and 2i + 1 equal in value (tied pairs, as from one initialisation)"


def _long_run(function: str, grads: tuple[str, ...], rng: np.random.Generator, tokens: int = LONG, causal: bool = True) -> GradientRun:
    """The gradients of ``function`` for ``grads`` at ``tokens`` tokens (one batch element, Hq = 4, Hkv = 2, D = 4): a backward
    pass computed in blocks of queries or keys goes wrong only past its first block (without the mask, past
    :data:`domain.ONE_PAST_BLOCKS` tokens, one that recomputes each block of queries against the keys before its end only).
    Drawn from a generator spawned from ``rng``, which leaves ``rng``'s own draws (the earlier runs' directions) as they were."""
    rng = rng.spawn(1)[0]
    values = {"q": rng.standard_normal((1, tokens, 4, 4)), "k": rng.standard_normal((1, tokens, 2, 4)), "v": rng.standard_normal((1, tokens, 2, 4)),
              "lambda_logits": 1.5 * rng.standard_normal((1, tokens, 2))}  # fmt: skip
    cotangent = rng.standard_normal((1, tokens, 4 if function == GQA else 2, 4))
    return findings.long_run(values, grads, cotangent, tokens, causal, subject(function, False), functools.partial(truth, function))


def _one_group(values: Values, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """``values`` with keys and values of one head per query head (Hkv = Hq, G = 1): q, k and v of one shape, as
    self-attention without grouping passes one tensor for several of them."""
    shape = np.shape(values["q"])
    return {**values, "k": rng.standard_normal(shape), "v": rng.standard_normal(shape)}


def padding_probe(worker: Worker, function: str, values: Values, found: Found) -> bool:
    """:func:`~grader.toolkit.findings.padding_probe` on ``function``: every key equal, the first key and one query of
    every head all zeros, then the first token's value all zeros."""
    zero_logits = {**values, "q": domain.padded(values["q"], [T // 2], axis=1), "k": domain.padded(values["k"], [0], axis=1)}
    zero_value = {**values, "v": domain.padded(values["v"], [0], axis=1)}
    tied = {**values, "k": domain.tied(values["k"], axis=1)}
    return findings.padding_probe(worker, function, subject(function), values, zero_logits, zero_value, tied,
                                  lambda v: truth(function, v, True), found)  # fmt: skip


def run(worker: Worker, function: str, rng: np.random.Generator, found: Found, forward: bool, gradients: bool, source: str | None,
        replayed: Sequence[tuple[str, ...]] = ()) -> None:  # fmt: skip
    """The probes of ``function``: randomness first (it spoils the others), then the forward (``forward``: a value check
    failed), then the gradients (``gradients``: a gradient check failed; also with each set of inputs requiring grad of
    ``replayed``, those of the checks' calls whose output came back cut off from autograd)."""
    values = draw(rng)
    names = TENSORS[function]
    base = randomness_probe(worker, subject(function), values, names, found, source)
    if base is None:
        return
    if forward and not is_right(base, truth(function, values, True)) and rounding_probe(worker, subject(function), values, base, found):
        return  # rounded to a lower precision: what the other probes would read out of the output, or differentiate, is its noise
    if forward:
        right = is_right(base, truth(function, values, True))
        if right and function in INPUT_PARTS and findings.stale_input_probe(worker, subject(function), values, draw(rng.spawn(1)[0]),
                                                                            lambda v: truth(function, v, True), INPUT_PARTS[function], found):
            localised = True
        elif findings.rearranged_finding(found, function, base, truth(function, values, True), "layout", REARRANGED):
            localised = True
        elif function == GQA:
            since = len(found.findings)
            localised = gqa_maps_probe(worker, values, found) or (not np.isfinite(base).all() and gqa_maps_probe(worker, values, found, causal=False))
            unmasked = _shaped(probes.sweep(worker, subject(GQA, False), [values])[0], GQA)
            if not right:  # wrong with causal=True only: the causal path, whatever the maps fitted
                localised = causal_path_first(found, GQA, since, base, truth(GQA, values, True), unmasked, truth(GQA, values, False),
                                              lambda n: probes.sweep(worker, subject(GQA, False), [_first_tokens(values, n)])[0], 1) or localised  # fmt: skip
            elif not is_right(unmasked, truth(GQA, values, False)):  # wrong with causal=False only: explain those maps
                localised = findings.hidden_rows_finding(found, GQA, unmasked, base, "causal=False", "your output (one per query and head)") or \
                    gqa_maps_probe(worker, values, found, causal=False)  # fmt: skip
            localised = localised or causal_flag_probe(worker, GQA, values, found) or gqa_dependence_probe(worker, values, rng, found)
        else:
            # maps whose causal readout is not finite (0 · −∞ where the mask meets a wrong softmax) are read without the mask
            localised = causal_flag_probe(worker, DIFF_V2, values, found) or pairs_probe(worker, values, found, bool(np.isfinite(base).all())) or \
                (np.isfinite(base).all() and (gate_dependence_probe(worker, values, rng, found) or pairs_apart_probe(worker, values, rng, found)))  # fmt: skip
        if not localised and function == DIFF_V2:  # (the sweep needs no right base: it is right over the ordinary logits or finds nothing)
            localised = (right and saturated_probe(worker, values, found, gradients, source)) or gate_range_probe(worker, values, found)
        if right and not localised:
            grouping_probe(worker, function, rng, found) or length_probe(worker, function, rng, found) or width_probe(worker, function, rng.spawn(1)[0], found) or \
                stability_probe(worker, function, values, rng, found) or \
                padding_probe(worker, function, values, found) or \
                findings.value_edges_probe(worker, subject(function, True, "float32"), {n: exact(x, "float32") for n, x in values.items()}, "v", 2,
                                           lambda v: truth(function, v, True), rng, found) or \
                layout_probe(worker, lambda **kw: subject(function, **kw), values, found, EXPANSIONS, alike=_one_group(values, rng) if function == GQA else None,
                             within=functools.partial(pairs_probe if function == DIFF_V2 else gqa_maps_probe, worker, values, found, True))  # fmt: skip
        elif not localised:
            precision_finding(found, function, base, truth(function, values, True)) or length_probe(worker, function, rng, found, SHORT_FIRST)
    elif function == DIFF_V2 and gradients and is_right(base, truth(function, values, True)):
        saturated_probe(worker, values, found, True, source)
    if gradients and not any(f.function == function and f.stage == "gradients" for f in found.findings):
        frozen = GQA_RUNS if function == GQA else DIFF_V2_RUNS
        runs = [GradientRun(values, grads) for grads in frozen] + findings.replayed_runs(values, replayed, frozen)
        if function == DIFF_V2:
            runs.append(GradientRun({**values, "lambda_logits": np.zeros((B, T, H))}, ("lambda_logits",), " at lambda_logits = 0 (where σ is steepest)",
                                    "gate"))  # fmt: skip
        cotangent = rng.standard_normal((B, T, HQ if function == GQA else H, D))
        runs += [GradientRun(values, frozen[0], " with causal=False", subject=subject(function, False)), _long_run(function, frozen[0], rng),
                 GradientRun(values, frozen[0], PERMUTED, subject=subject(function, layout="heads_permuted"))]
        if function == DIFF_V2:
            runs.append(GradientRun({**values, "q": tied_pairs(values["q"])}, frozen[0], TIED))
        runs.append(_long_run(function, frozen[0], rng, domain.ONE_PAST_BLOCKS, causal=False))
        runs += findings.expanded_runs(values, frozen[0], lambda layout: subject(function, layout=layout), EXPANSIONS)
        gradients_probe(worker, subject(function), runs, cotangent, rng, found, source, INPUT_PARTS.get(function))
