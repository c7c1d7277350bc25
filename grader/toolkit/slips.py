"""Contract slips: the usual causes of a contract failure, read from the calls the checks already made.

No extra call is made. For each function, :func:`findings` looks at what its
calls returned or raised and names:

* a Python number, a tuple or another object returned instead of one tensor
  (``.item()``, ``float()``, ``math.exp`` on the way; the student's line when
  the source shows one);
* an output of the wrong shape or dtype;
* an exception, classified by torch's own wording (``.view`` on a strided
  input, an in-place operation on a leaf that requires grad, mismatched
  dtypes or sizes) or, failing that, by the one way of calling that alone
  makes it happen (only strided inputs, only a tensor coefficient, ...);
  with the student's line from the traceback;
* an input modified in place (values, version counter, place in memory, requires_grad or .grad changed), with the
  line that does it when the source shows one;
* an output without autograd history although its inputs require grad.

An :class:`Observed` call carries the attributes of how it was made, which
the exercise chooses and maps to components (a strided layout: ``strided``).
"""

from __future__ import annotations

import ast
import itertools
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from grader.core.invoke import SKIPPED, Outcome, Returned
from grader.toolkit.rootcause import ASPECTS, UNPLACED, Finding
from grader.toolkit.verdicts import OVERWRITTEN

SHARED_MEMORY_WRITE = "more than one element of the written-to tensor refers to a single memory location"
FRAME = re.compile(r'File "[^"\n]*", line (\d+), in ([^\n]+)\n[ \t]+([^\n]+)')
MARKED = re.compile(r'File "[^"\n]*", line \d+, in [^\n]+\n([ \t]+[^\n]+)\n([ \t]*)([~^]+)[ \t]*(?:\n|$)')
"""A frame whose code line is followed by the markers Python puts under the failing operation: (the code line as printed,
the markers' indentation, the markers)."""
OUT_OF_BOUNDS = "out of bounds for dimension"
"""torch's wording of an index past the end of an axis."""
# torch's wording of an exception -> (component, what it means, what to do)
EXCEPTION_KINDS: tuple[tuple[tuple[str, ...], str, str, str], ...] = (
    (("view size is not compatible", "use .reshape("), "strided",
     "`.view` needs memory laid out contiguously, and non-contiguous inputs (transposed, permuted or sliced views) are not",
     "use `.reshape` (or `.contiguous()` first) instead of `.view`"),
    (("out of bounds for storage of size",), "strided",
     "a view made with strides of the code's own choosing (`as_strided`) reaches past the input's memory: the input is not laid "
     "out as the code assumes (transposed, permuted, sliced or expanded)",
     "do not assume a memory layout: use the tensor's own view operations (`reshape`, `permute`, `transpose`), never `as_strided` "
     "with strides computed for contiguous memory"),
    ((SHARED_MEMORY_WRITE,), "strided",
     "a write into a buffer made with an input's strides (`empty_strided`, `as_strided`), whose elements share memory when "
     "the input is expanded over the batch (stride 0)",
     "write only into tensors you create densely (`torch.empty(shape)`, `torch.empty_like(x)`, `.clone()`), never into an input "
     "or a buffer that copies an input's strides"),
    (("leaf variable that requires grad is being used in an in-place operation",
      "a view of a leaf variable that requires grad is being used in an in-place",
      "has been modified by an inplace operation"), "mutation",
     "an in-place operation changes a tensor that autograd needs, here an input",
     "compute on new tensors (`x = x / s`, not `x /= s` or `x.div_(s)`); never modify an input"),
    (("inference tensors cannot be saved for backward", "inference tensors do not track version counter"), "graph",
     "a tensor made during an earlier call under `torch.inference_mode()` (kept between calls, e.g. a cached mask) meets autograd",
     "keep nothing between calls, or make what you keep outside inference mode: build the mask in each call"),
    (("does not require grad and does not have a grad_fn", "numpy() on tensor that requires grad"), "graph",
     "the result was cut off from autograd", "keep every step in torch: no `.detach()`, `.numpy()` or `torch.no_grad()` on the way"),
    (("only change requires_grad flags of leaf variables",), "graph",
     "`requires_grad_(False)` is called on a tensor computed from inputs that require grad, which autograd refuses (only a leaf's "
     "flag can be changed)",
     "leave the flag alone: a tensor computed from the inputs must stay in the graph so that its gradient reaches them"),
    (("can't retain_grad on tensor that has requires_grad=false",), "graph",
     "`retain_grad()` is called on a tensor that does not require grad (an input the caller froze), which autograd refuses",
     "leave the inputs' autograd state to the caller: no retain_grad(), requires_grad_() or .grad on an input"),
    (("arguments don't support automatic differentiation",), "graph",
     "an operation writes into a given buffer (`out=`), which autograd cannot differentiate",
     "return new tensors (`a @ v`, not `torch.matmul(a, v, out=buffer)`), and keep no buffer between calls"),
    (("expected scalar type", "expected dtype", "same dtype", "found dtype", "expected both vectors to have same dtype", "but got double",
      "but got float", "expected m1 and m2 to have the same dtype"), "dtype",
     "tensors of different dtypes meet in one operation", "create every tensor with the inputs' dtype (`dtype=q1.dtype`)"),
    (("without overflow",), "dtype",
     "a number too large for the inputs' dtype is written into a tensor of that dtype (e.g. float64's `finfo.min` into float32)",
     "take such numbers from the inputs' dtype (`torch.finfo(scores.dtype).min`) or use `float('-inf')`"),
    (("must match the size", "must match the existing size", "shapes cannot be multiplied", "size mismatch", "dimension out of range",
      "inconsistent tensor size", "is invalid for input of size", "doesn't match the broadcast shape",
      "expected size", "mat1 and mat2 shapes", "does not match the number of dimensions", "do not broadcast",
      "sizes of tensors must match", "too many indices", "number of dims don't match"), "shape",
     "tensor sizes that do not fit together meet in one operation", "check the shapes of every step against the contract"),
    ((OUT_OF_BOUNDS,), "shape", "an index reaches past the end of a tensor's axis (an index made for other sizes, "
     "or one taken from a tensor that is empty for these sizes)", "build every index from the sizes of the tensor it indexes"),
    (("'tuple' object has no attribute",), "type",
     "a tuple (several results, e.g. a function's output and its saved statistics) is used as one tensor",
     "take the tensor out of the tuple (`out, _ = ...`) before using it"),
    (("only one element tensors can be converted", "cannot be converted to scalar"), "type",
     "a tensor of several elements was turned into a Python number", "keep tensors: no `.item()` or `float()`"),
)  # fmt: skip
_TO_FLOAT = r"\bfloat\((?!\s*[\"'])"  # float(x), not float("-inf")
NUMBER_AS_TENSOR = re.compile(r"'(?:float|int)' object has no attribute|must be Tensor, not (?:float|int)\b")
"""Wordings of an exception raised where a Python number was used as a tensor (`x.to(...)`, `torch.exp(x)` on a float)."""
TENSOR_AS_NUMBER = re.compile(r"must be (?:Number|float|int|bool), not (?:Tensor|Parameter)\b")
"""Wordings of an exception raised where a tensor was passed to an argument torch takes as a Python number only (`alpha=` of
`torch.sub` or `torch.add` when the tensor requires grad, `torch.full`'s fill value)."""
CANNOT_RUN = ("NameError", "UnboundLocalError", "ImportError", "ModuleNotFoundError", "AttributeError")
"""Exceptions that, raised by every call, mean the function cannot run at all (a typo, a missing import)."""
NUMBER_SLIPS = re.compile(rf"\.item\(\)|\bmath\.(exp|log|sqrt)\(|{_TO_FLOAT}|\.tolist\(\)")
GRAPH_SLIPS = re.compile(rf"\.detach\(\)|no_grad|\.numpy\(\)|torch\.tensor\(|\.data\b|\.item\(\)|{_TO_FLOAT}")
MODE_SWITCHES = re.compile(r"set_grad_enabled\(|\.__enter__\(|_C\._set_grad_enabled")
INFERENCE_MODE = re.compile(r"\binference_mode\b")
INPLACE = r"\b{name}\b\s*(\.\w+_\(|[-+*/]=|\[[^\]]*\]\s*=(?!=))"
GRAD_WRITE = re.compile(r"\.grad\s*=(?!=)|\.grad\.\w+_\(|\bsetattr\(.*['\"]grad['\"]")  # code that sets or resets a .grad
ASPECT_OF = {"type": "type", "shape": "type", "dtype": "dtype", "strided": "strided", "coefficient": "coefficient",
             "mutation": "mutation", "graph": "graph", "load": None,
             "backward": "mutation"}  # a contract finding of the backward pass: it changed the inputs  # fmt: skip


@dataclass(frozen=True)
class Observed:
    """One call a check made: its function, the contract's output shape and dtype, how it was made, what came of it.

    ``index`` is the call's position in its request; ``inputs`` names the
    request's input tensors by number ("" for those of the request's other
    calls); ``grads``: its inputs required grad;
    ``public``: the call belongs to a check students see.
    """

    function: str
    outcome: Outcome
    index: int
    shape: tuple[int, ...]
    dtype: str
    attributes: Mapping[str, str]
    inputs: tuple[str, ...]
    grads: bool
    public: bool = True

    @property
    def result(self) -> Returned | None:
        """What the call returned or raised (None: the request failed, or an earlier call did)."""
        if self.outcome.failure is not None or self.index >= len(self.outcome.results):
            return None
        earlier = self.outcome.results[: self.index]
        return None if any(r.raised is not None for r in earlier) else self.outcome.results[self.index]


# (function, the shape returned, the shape expected, how the call was made) -> (component, title, evidence, advice) or None
ShapeNames = Callable[[str, tuple[int, ...], tuple[int, ...], Mapping[str, str]], "tuple[str, str, str, str] | None"]
"""(function, shape got, shape expected) -> (component, title, evidence, advice) for a wrong shape the exercise can name, or None."""


@dataclass(frozen=True)
class Declarations:
    """What the exercise tells the slip analysis: attribute -> component, and how to name a wrong shape."""

    components: Mapping[str, str]  # attribute of a call (e.g. "layout") -> the component a failure only there points at
    shapes: ShapeNames
    # a pattern of the student's line where tensors of sizes that do not fit met, or an error torch words in no known way
    # was raised -> the component that line belongs to (e.g. the mask's operations); the exception's wording names it otherwise
    lines: Mapping[str, str] = field(default_factory=dict)
    # (attribute, value) of a call whose input another graded function made (e.g. a coefficient computed by it) -> that function
    made_by: Mapping[tuple[str, str], str] = field(default_factory=dict)
    # an input -> the component that handles it, when that is not the graph itself (e.g. "coefficient"): an output cut off
    # from autograd only when that input alone requires grad is that component's fault (it was made a number, detached)
    inputs: Mapping[str, str] = field(default_factory=dict)
    # a function -> the component of its input that callers may pass as a Python number (e.g. a coefficient): an exception
    # that says a Python number was used as a tensor is that component's fault
    numbers: Mapping[str, str] = field(default_factory=dict)
    # a function -> the component its returned tensor belongs to: a buffer it returns and overwrites on its next call is
    # that component's fault (the function's "output" when not given)
    answers: Mapping[str, str] = field(default_factory=dict)
    # a pattern of the code that made an operand of a failing operation (traced back from it, never the failing line itself)
    # -> the component that operand belongs to (e.g. a table of scales made with a square root)
    operands: Mapping[str, str] = field(default_factory=dict)
    # the graded functions: an operand one of them made is not traced into its body (it is judged on its own calls)
    functions: Collection[str] = ()
    # a parameter that is no main tensor -> the component that reads it (e.g. "lambda_init" -> "lambda"): an exception the
    # student's own check (a raise or assert of theirs) raises, naming it alone, is that component's, whatever calls it hit
    parameters: Mapping[str, str] = field(default_factory=dict)
    # the functions the stub supplies (its validation): what they raise refuses inputs the contract does not allow
    supplied: Collection[str] = ()
    # a function that is one component throughout (e.g. λ's formula) -> that component: an error its own code raises on
    # every call (not a missing name or import) is that component's, whatever line raises it
    whole: Mapping[str, str] = field(default_factory=dict)
    # a function -> the letters of its main inputs' axes in order (e.g. "BHTD"): sizes unpacked from an input under those
    # letters in another order (``B, T, H, D = q.shape``) read one axis for another, the layout's fault
    layouts: Mapping[str, str] = field(default_factory=dict)


SCALE_MAKERS = {r"\br?sqrt_?\(|\*\*\s*\(?\s*-?\s*0?\.5\b": "scale"}
"""Operand makers of attention exercises: an operand made with a square root (a table or factor of 1/√D) is the scale's."""


def tokens_lost(got: list[int], expected: list[int], axes: str) -> tuple[str, str]:
    """(evidence, advice) for an output of the right shape but for fewer tokens (``axes``: the contract's, e.g. "[B, T, H, D]")."""
    return (f"It returned shape {got} where {axes} = {expected} is expected: every axis is right but the tokens', which are "
            "fewer, so the output is put together from pieces (chunks or blocks of queries) that lose tokens (a slice end off by "
            "one, a last partial block left out?).",
            "give every query exactly one output row: chunks of queries cut as x[s:s + block] for s in range(0, T, block), joined "
            "with torch.cat along the token axis")  # fmt: skip


Placement = Callable[[Finding], Finding]
"""How an exercise places an :data:`UNPLACED` finding (the finding unchanged when it cannot tell)."""


def _as_it_is(finding: Finding) -> Finding:
    """``finding`` unchanged: no placement."""
    return finding


TRAINED = "what requires grad"
"""The call attribute that lists the inputs requiring grad (:func:`trained`; the exercises record it for calls with gradients)."""
ONLY = " only"


def trained(names: Iterable[str]) -> str:
    """The value of the :data:`TRAINED` attribute of a call whose inputs ``names`` require grad: "q, k only"."""
    return ", ".join(names) + ONLY


ORIGIN = "the kind of inputs that require grad"
"""The call attribute that says whether the inputs requiring grad were leaves (holding a .grad or not) or activations (:func:`origin`)."""


def origin(activations: bool, held_grads: bool = False, parameters: bool = False) -> str:
    """The value of the :data:`ORIGIN` attribute: "activations (non-leaf views)", "leaves already holding a .grad",
    "leaves given as torch.nn.Parameter" or "leaves"."""
    if activations:
        return "activations (non-leaf views)"
    if held_grads:
        return "leaves already holding a .grad"
    return "leaves given as torch.nn.Parameter" if parameters else "leaves"


# ---- the submission's source ----------------------------------------------------------------------


def _function_node(source: str | None, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The module-level function ``name`` of ``source``, or None (not found, or a file that does not parse)."""
    try:
        tree = ast.parse(source or "")
    except (SyntaxError, ValueError):
        return None
    return next((node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name), None)


def function_lines(source: str | None, name: str) -> list[tuple[int, str]]:
    """The numbered lines of the module-level function ``name`` (every line of the file when it is not found)."""
    if not source:
        return []
    lines = source.splitlines()
    node = _function_node(source, name)
    if node is None:
        return list(enumerate(lines, start=1))
    return [(n, lines[n - 1]) for n in range(node.lineno, (node.end_lineno or node.lineno) + 1)]


def matching_line(source: str | None, name: str, pattern: re.Pattern[str]) -> tuple[int, str] | None:
    """The number and code (without its comment) of the first line of function ``name`` matching ``pattern`` outside comments, or None."""
    for number, text in function_lines(source, name):
        code = text.split("#", 1)[0]
        if pattern.search(code):
            return number, code.strip()
    return None


def first_line(source: str | None, name: str, pattern: re.Pattern[str]) -> str:
    """" (line N: `code`)" for the first line of function ``name`` matching ``pattern`` outside comments, or ""."""
    found = matching_line(source, name, pattern)
    return f" (line {found[0]}: `{found[1]}`)" if found else ""


def frame(traceback: str) -> str:
    """" at line N (in f): `code`" for the innermost frame of the student's code in a traceback, or ""."""
    frames = FRAME.findall(traceback or "")
    if not frames:
        return ""
    line, where, code = frames[-1]
    return f" at line {line} (in {where.strip()}): `{code.strip()}`"


def function_of_line(source: str | None, line: int) -> str | None:
    """The module-level function whose definition holds ``line``, its decorators included (found by indentation, so a file
    that does not parse works too)."""
    current = None
    lines = (source or "").splitlines()
    for number, text in enumerate(lines, start=1):
        if number > line:
            break
        match = re.match(r"(?:async\s+)?def\s+(\w+)", text)
        if match:
            current = match.group(1)
        elif text.startswith("@") and number == line:  # a decorator belongs to the function it decorates
            following = (re.match(r"(?:async\s+)?def\s+(\w+)", later) for later in lines[number:])
            return next((m.group(1) for m in following if m), None)
        elif text.strip() and not text[0].isspace() and not text.lstrip().startswith(("#", "@", ")")):
            current = None
    return current


# ---- the calls ------------------------------------------------------------------------------------


HEAD_WIDTH = "the head width D"
"""The call attribute giving the head width: a size that decides whether a table or buffer indexed by it reaches far enough
(an exception), never how a call is answered otherwise, so only exceptions are contrasted by it."""


def _contrasting(failing: Sequence[Observed], working: Sequence[Observed], sizes: bool = False) -> tuple[tuple[str, str], ...]:
    """:func:`separating` of the calls' attributes (``sizes``: of exceptions, which may also be set apart by several values
    of one attribute)."""
    return separating([c.attributes for c in failing], [c.attributes for c in working], sizes, several=sizes)


def separating(failing: Sequence[Mapping[str, str]], working: Sequence[Mapping[str, str]], sizes: bool = False,
               several: bool = False) -> tuple[tuple[str, str], ...]:  # fmt: skip
    """The attribute values every failing call has and no working call has together (calls given by their attributes): one
    alone if one will do, else (``several``) one attribute whose values in the failing calls no working call has ("a, b
    or c": a cast made for one dtype and not for the others), else two or three values, the rarest ways of calling first;
    or () when none do. ``sizes``: :data:`HEAD_WIDTH` may be one of them."""
    if not failing or not working:
        return ()
    shared = [(key, value) for key, value in failing[0].items()
              if all(c.get(key) == value for c in failing) and (sizes or key != HEAD_WIDTH)]  # fmt: skip
    for key, value in shared:
        if not any(c.get(key) == value for c in working):
            return ((key, value),)
    if sizes and (bound := _width_bound(failing, working)) is not None:
        return ((HEAD_WIDTH, bound),)
    for key in failing[0] if several else ():
        values = sorted({c.get(key) or "" for c in failing})
        if key != HEAD_WIDTH and all(key in c for c in failing) and not any(c.get(key) in values for c in working):
            return ((key, f"{', '.join(values[:-1])} or {values[-1]}"),)
    shared.sort(key=lambda kv: sum(c.get(kv[0]) == kv[1] for c in working))
    for size in (2, 3):
        for combined in itertools.combinations(shared, size):
            if not any(all(c.get(key) == value for key, value in combined) for c in working):
                return combined
    return ()


def _width_bound(failing: Sequence[Mapping[str, str]], working: Sequence[Mapping[str, str]]) -> str | None:
    """"N or more" (or "N or less") when every failing call has a head width of at least (at most) N and every working call
    a smaller (larger) one: a table or buffer sized for the widths below (above) N; None when the widths do not part so."""
    widths = [[int(c[HEAD_WIDTH]) for c in calls if c.get(HEAD_WIDTH, "").isdigit()] for calls in (failing, working)]
    if len(widths[0]) < len(failing) or not widths[1]:
        return None
    if min(widths[0]) > max(widths[1]):
        return f"{min(widths[0])} or more"
    if max(widths[0]) < min(widths[1]):
        return f"{max(widths[0])} or less"
    return None


def _contrast(failing: Sequence[Observed], working: Sequence[Observed]) -> tuple[str, str] | None:
    """:func:`_contrasting` in words (:func:`_in_words`)."""
    return _in_words(_contrasting(failing, working))


def _in_words(contrast: Sequence[tuple[str, str]]) -> tuple[str, str] | None:
    """A contrast as (attribute, value), or ("a is x and b", "y") for several; or None for none."""
    if not contrast:
        return None
    *first, (key, value) = contrast
    return (f"{', '.join(f'{k} is {v}' for k, v in first)} and {key}" if first else key), value


def _declared(contrast: Sequence[tuple[str, str]], declared: Declarations) -> tuple[str, str] | None:
    """The attribute of ``contrast`` the exercise gives a component (the first, when several all give the same one), with
    that component, or None (none, or several components: the other attributes, such as how arguments are bound, say how
    the call was made, not which part is wrong)."""
    placed = [(key, declared.components[key]) for key, _ in contrast if key in declared.components]
    return placed[0] if placed and len({component for _, component in placed}) == 1 else None


DTYPE_NAMES = re.compile(r"\b(?:torch\.)?(float(?:16|32|64)?|double|half|bfloat16|long|int(?:8|16|32|64)?|bool|complex(?:64|128)?)\b", re.IGNORECASE)
"""The dtypes torch's messages name (Float, double, torch.float32, ...): a message that names two of them is about a mismatch."""


def exception_kind(text: str) -> tuple[str, str, str, str] | None:
    """(component, meaning, advice, the words that told) of an exception's "Type: message" from torch's wording, or None: a
    known fragment, else a message that names two different dtypes (whatever the operation's own wording), else one that
    speaks of sizes and quotes them (:data:`SIZE_WORDS`)."""
    lowered = text.lower()
    for fragments, component, meaning, advice in EXCEPTION_KINDS:
        for fragment in fragments:
            if fragment.lower() in lowered:
                return component, meaning, advice, fragment
    message = text.split(":", 1)[-1]
    named = list(dict.fromkeys(m.group(1).lower() for m in DTYPE_NAMES.finditer(message)))
    if len(named) >= 2:
        _, component, meaning, advice = next(kind for kind in EXCEPTION_KINDS if kind[1] == "dtype")
        return component, meaning, advice, message.strip()[:60]
    if SIZE_WORDS.search(message) and len(set(QUOTED_SIZES.findall(message))) >= 2:
        _, component, meaning, advice = next(kind for kind in EXCEPTION_KINDS if kind[1] == "shape")
        return component, meaning, advice, re.split(r"\d", message.strip(), maxsplit=1)[0] or message.strip()[:40]
    return None


SIZE_WORDS = re.compile(r"\b(?:shape|size|sizes|dimension|dimensions|dims?)\b", re.IGNORECASE)
"""The words of an exception that speaks of sizes (with :data:`QUOTED_SIZES`)."""
QUOTED_SIZES = re.compile(r"[\[(]\s*(\d+(?:\s*,\s*\d+)*)\s*,?\s*[\])]|\bsizes?\s+(\d+)\b", re.IGNORECASE)
"""What tells an exception about sizes in words of no known operation (a library's own check, "the shape of the 2D attn_mask
is torch.Size([5, 5]), but should be (2, 2)", "subscript h has size 2 ... previously seen size 4"): it speaks of a shape,
size or dimension and quotes two different sizes, in brackets or after the word "size" (a message that quotes one shape
twice describes a tensor, not a mismatch). Its words up to the first number, the same from call to call, tell it."""


MASK_LINE = r"masked_fill|\btril\(|\btriu\(|\]\s*=\s*(?:float\(\s*[\"']-inf[\"']\s*\)|-\s*(?:math|torch|np|numpy)\.inf\b)"
"""A line that builds or applies a causal mask, for an exercise's :attr:`Declarations.lines`: a triangle of the sequence, a
masked fill, or −∞ written into chosen positions of a tensor (``scores[..., rows, cols] = float("-inf")``)."""
OWN_CHECK = re.compile(r"\s*(?:raise|assert)\b")


def _own_check(code: Sequence[tuple[str, str, str]], source: str | None, declared: Declarations) -> list[str] | None:
    """The statement that raised (the last of ``code``) and the if over it, when it is a check of the student's own: an
    assert, or a raise directly under an if (not in an except block, which passes another error on), not in a function
    the stub supplies; None otherwise."""
    if not code:
        return None
    line, function, text = code[-1]
    if function.strip() in declared.supplied or not OWN_CHECK.match(text):
        return None
    if not text.lstrip().startswith("raise"):
        return [text]
    lines = dict(function_lines(source, function.strip()))
    raising = lines.get(int(line), text)
    indent = len(raising) - len(raising.lstrip())
    header = next((lines[n] for n in range(int(line) - 1, 0, -1) if n in lines and lines[n].strip() and not lines[n].lstrip().startswith("#")
                   and len(lines[n]) - len(lines[n].lstrip()) < indent), "")  # fmt: skip
    return [text, header] if re.match(r"\s*(?:el)?if\b", header) else None


SIZE_READS = r"\.shape\b|\.size\(|\.ndim\b|\.dim\(\)|\.numel\(\)"
ASSIGNMENT = re.compile(r"\s*([A-Za-z_][\w, ]*?)\s*=(?!=)(.*)")
"""A line that assigns names (``b, t, h, d = q.shape``): the names, then what they are given."""


def _assigned(assignment: re.Match[str]) -> set[str]:
    """The names an :data:`ASSIGNMENT` assigns."""
    return {name.strip() for name in assignment.group(1).split(",")}


def _tests_sizes(own: Sequence[str], frame: tuple[str, str, str], source: str | None) -> bool:
    """Whether a check of the student's own (:func:`_own_check`: its statement and the if over it) tests sizes: it reads
    them (``.shape``, ``.size()``, ``len()`` of a parameter of its function), or tests a name its function took from them
    (``b, t, h, d = q.shape``)."""
    lengths = "|".join(rf"\blen\(\s*{re.escape(name)}\s*\)" for name in _parameters(source, frame[1].strip()))
    sizes = re.compile(f"{SIZE_READS}|{lengths}" if lengths else SIZE_READS)
    tested = STRING_LITERAL.sub("", " ".join(own))  # (not the words of its message)
    if sizes.search(tested):
        return True
    names = set(re.findall(r"\b[A-Za-z_]\w*\b", tested))
    for _, text in function_lines(source, frame[1].strip()):
        assigned = ASSIGNMENT.match(text)
        if assigned and sizes.search(assigned.group(2)) and _assigned(assigned) & names:
            return True
    return False


def _parameters(source: str | None, name: str) -> list[str]:
    """The parameters of the module-level function ``name`` of ``source`` (none when it is not found)."""
    node = _function_node(source, name)
    if node is None:
        return []
    return [a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)]


def _refused_parameter(own: Sequence[str], code: Sequence[tuple[str, str, str]], source: str | None, message: str,
                       declared: Declarations) -> str | None:  # fmt: skip
    """The parameter a check of the student's own (``own``: :func:`_own_check` of the traceback's frames ``code``) refused,
    or None: that statement, its condition, its message and the calls that led to it name one of
    :attr:`Declarations.parameters` (or several of one component), else what made the values its condition reads does."""
    if not declared.parameters:
        return None
    # the calls that led there, but not a call into a graded function, which passes its arguments along untested
    passed = [earlier for _, _, earlier in code[:-1] if not any(re.search(rf"\b{name}\s*\(", earlier) for name in declared.functions)]
    guard = [own[0], message, *passed, *own[1:]]
    named = [name for name in re.findall(r"\b\w+\b", " ".join(guard)) if name in declared.parameters]
    if not named:  # the check tests a value the function made: what made it (``gate = torch.sigmoid(lambda_logits)``)
        named = [name for name in re.findall(r"\b\w+\b", " ".join(_made_of(own[-1], code[-1], source))) if name in declared.parameters]
    components = {declared.parameters[name] for name in named}
    return named[0] if len(components) == 1 else None


STRING_LITERAL = re.compile(r"""[rbfu]*("|')(?:\\.|(?!\1).)*?\1""", re.IGNORECASE)
"""A string literal on one line (a check's message): no name it holds is read."""


def _made_of(condition: str, frame: tuple[str, str, str], source: str | None) -> list[str]:
    """The right-hand sides of the lines of ``frame``'s function before it that assign a name ``condition`` reads (its
    code outside strings): what the values a check tests were made of."""
    read = set(re.findall(r"\b[A-Za-z_]\w*\b", STRING_LITERAL.sub("", condition.split("#", 1)[0])))
    made = []
    for number, text in function_lines(source, frame[1].strip()):
        assigned = ASSIGNMENT.match(text.split("#", 1)[0])
        if number < int(frame[0]) and assigned and _assigned(assigned) & read:
            made.append(assigned.group(2))
    return made


SHAPE_UNPACK = re.compile(r"^\s*\(?\s*(\w+(?:\s*,\s*\w+)+)\s*,?\s*\)?\s*=\s*(\w+)\.(?:shape\b|size\(\s*\))")
"""A line that unpacks a tensor's sizes into names (``b, t, h, d = q.shape``): the names, then the tensor."""


def misread_layout(function: str, source: str | None, declared: Declarations) -> str | None:
    """Evidence, in one sentence, when ``function`` unpacks the sizes of one of its parameters into names whose initials are
    the letters of its layout (:attr:`Declarations.layouts`) in another order; or None."""
    layout = declared.layouts.get(function)
    if not layout:
        return None
    parameters = set(_parameters(source, function))
    for number, text in function_lines(source, function):
        unpacked = SHAPE_UNPACK.match(text.split("#", 1)[0])
        if unpacked is None or unpacked.group(2) not in parameters:
            continue
        names = [name.strip() for name in unpacked.group(1).split(",")]
        initials = "".join(name[0].upper() for name in names)
        if initials != layout and sorted(initials) == sorted(layout):
            return (f"Line {number} unpacks the sizes of {unpacked.group(2)} as {', '.join(names)}, but {unpacked.group(2)} is laid out "
                    f"[{', '.join(layout)}]: each of those names holds the size of another axis")  # fmt: skip
    return None


def _parameter_parts(frame: tuple[str, str, str], source: str | None, declared: Declarations, *, traced: bool) -> set[str]:
    """The components :attr:`Declarations.parameters` gives the parameters the code line of ``frame`` reads (``traced``: also
    through names earlier lines of its function assigned from them)."""
    code = STRING_LITERAL.sub("", frame[2].split("#", 1)[0])
    read = re.findall(r"\b\w+\b", " ".join([code, *(_made_of(code, frame, source) if traced else ())]))
    return {declared.parameters[name] for name in read if name in declared.parameters}


VALUE_QUOTED = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?", re.IGNORECASE)
"""A number an exception's message quotes: a refused value or a size, which differ from call to call while the message
says the same thing (an attention mask of [5, 5] that should be [2, 2], and one of [6, 6] that should be [3, 3])."""


def _stable_part(text: str) -> str:
    """The start of an exception's text up to its first number (a message that quotes the refused value differs from call
    to call), or its first 120 characters when that start is too short to tell one message from another."""
    start = re.match(r"\D*", text)
    stable = start.group(0) if start is not None else ""
    return stable[:120] if len(stable) >= 24 else text[:120]


def _finding(function: str, component: str, title: str, evidence: str, advice: str, *, blocks: bool = False,
             explains: frozenset[str] = frozenset(), note: str | None = None, public: bool = True) -> Finding:  # fmt: skip
    """A contract finding, its aspect from its component."""
    return Finding(function, component, "contract", title, evidence, advice, aspect=ASPECT_OF.get(component, "type"),
                   explains=explains, blocks=blocks, note=note, public=public)  # fmt: skip


def _raised(function: str, calls: Sequence[Observed], source: str | None, declared: Declarations,
            raisers: Collection[str] = (), place: Placement = _as_it_is) -> list[Finding]:  # fmt: skip
    """Findings for the exceptions a function raised, one per kind of exception. An exception raised in the code of another
    graded function (one this function calls) that raises on its own calls too (``raisers``: those functions) is that
    function's fault, whatever it raised there: the sizes this function hands it differ from its own calls', and so may the
    error a fault of its code gives. Otherwise it stays this function's (it may hand the other one wrong inputs).
    ``place``: as for :func:`findings`."""
    groups: dict[tuple[str, str], list[Observed]] = {}
    for call in calls:
        result = call.result
        if result is not None and result.raised is not None and result.raised is not SKIPPED:
            told = exception_kind(f"{result.raised['type']}: {result.raised['message']}")
            groups.setdefault((result.raised["type"], told[0] if told else VALUE_QUOTED.sub("…", result.raised["message"])[:80]), []).append(call)
    found = []
    for (kind, _), failing in groups.items():
        error = failing[0].result.raised if failing[0].result is not None else None
        assert error is not None
        working = [c for c in calls if c.result is not None and c.result.raised is None]
        contrast = _contrasting(failing, working, sizes=True)
        if len(failing) == 1 and len(contrast) > 1:
            contrast = ()  # some two of its ways of being called set one call apart from any others: no kind of call raises
        only = _in_words(contrast)
        placed = _declared(contrast, declared)
        classified = exception_kind(f"{kind}: {error['message']}")
        message = error["message"].strip().splitlines()[0] if error["message"].strip() else ""
        where = frame(error.get("traceback", ""))
        evidence = f"It raised {kind}: {message}{where}" + (f", only when {only[0]} is {only[1]}" if only else "") + "."
        everywhere = len(failing) == sum(c.result is not None for c in calls)  # (a call after another that raised has no result)
        code = FRAME.findall(error.get("traceback", "") or "")
        own = None if everywhere else _own_check(code, source, declared)
        refused = None if own is None else _refused_parameter(own, code, source, message, declared)
        refusal: tuple[str, str, str] | None = None  # (tested, accepted, component)
        if refused is not None:
            refusal = (refused, refused, declared.parameters[refused])
        elif own is not None and _tests_sizes(own, code[-1], source):
            refusal = ("the sizes of its inputs", "size of its inputs", placed[1] if placed is not None else "shape")  # (the part those sizes tell)
        elif own is not None and function in declared.whole:
            refusal = (f"the inputs of {function}", f"input of {function}", declared.whole[function])  # a function of one part: that part refuses
        elif own is not None and (made := _line_component(declared, code[-1], source, trace=True, operation=STRING_LITERAL.sub("", own[-1]))):
            refusal = ("values the function made", "input", made)  # what the check tests was made by a part the exercise names
        if refusal is not None:  # the student's message and line say what it refused: a contrast of the calls would guess
            (tested, accepted, component), signature = refusal, _stable_part(f"{kind}: {message}")
            owner = code[-1][1].strip() if code[-1][1].strip() in raisers else function
            title = f"{owner} raises {kind}: a check of its own refuses calls the contract allows" + (f" (called by {function})" if owner != function else "")
            which = f", only when {only[0]} is {only[1]}" if only and refused is None else ""
            found.append(replace(_finding(owner, component, title, f"It raised {kind}: {message}{where}{which}. The check tests {tested}, and "
                                          f"the calls it refused are within the contract.", f"remove that check or widen it to the contract: "
                                          f"accept every {accepted} the contract allows", explains=frozenset({ASPECT_OF.get(component) or "type"})),
                                 signature=signature, via=declared.made_by.get(only) if only else None))  # fmt: skip
            continue
        if kind == "NotImplementedError":
            found.append(replace(_finding(function, "load", f"{function} is not implemented yet", evidence, f"write the body of {function}",
                                          blocks=everywhere), signature="NotImplementedError"))  # fmt: skip
            continue
        on_line = _line_component(declared, code[-1], source, trace=False) if code else None
        # sizes that do not fit, on a line of no known part, are placed by the sizes the function works for (``place``), else by
        # the kind of call that alone raises, else traced to the operation that made an operand (one assignment back); other
        # errors stay on their line
        sized = classified is not None and classified[0] == "shape" and on_line is None
        unworded = classified is None and on_line is None and only is not None  # raised for some kinds of call alone
        traced = _line_component(declared, code[-1], source, trace=True, operation=marked_operation(error.get("traceback", "")),
                                 operands=unworded) if code and (sized or unworded) else None  # fmt: skip
        if classified is not None:
            component, meaning, advice, _ = classified
            if component == "shape" and (misread := misread_layout(function, source, declared)) is not None:
                component, meaning, evidence = "layout", "its sizes are read from the wrong axes", f"{evidence} {misread}."
                advice = f"unpack the sizes in the order of the layout: {', '.join(declared.layouts[function])} = x.shape"
            elif component == "shape" and classified[3] == OUT_OF_BOUNDS and code and len(parts := _parameter_parts(code[-1], source, declared,
                                                                                                            traced=False)) == 1:  # fmt: skip
                component = on_line or parts.pop()  # an index past the end of a value made of one parameter: that parameter's part
            elif component == "shape":
                component = on_line or component
                meaning += f", only when {only[0]} is {only[1]}" if only else ""
            if classified[3] == SHARED_MEMORY_WRITE and code and _writes_own_expansion(code[-1], source):
                component, meaning, advice = "strided", OWN_EXPANSION_WRITE, ("apply that operation out of place (`x.neg()`, not "
                                                                               "`x.neg_()`), or expand after it")  # fmt: skip
            elif classified[3] == SHARED_MEMORY_WRITE and not (code and _writes_made_with(code[-1], source, STRIDED_BUFFER)):
                component, meaning, advice = "mutation", INPUT_WRITE, next(kind[3] for kind in EXCEPTION_KINDS if kind[1] == "mutation")
            if component == "mutation" and code and _writes_made_with(code[-1], source, "requires_grad"):
                component, meaning, advice = "graph", OWN_LEAF, "build the result from new tensors (torch.stack or torch.cat of the parts), " \
                    "or fill a buffer made without requires_grad: autograd records what is written into it"  # fmt: skip
            if component == "dtype" and placed is not None and placed[1] in declared.inputs.values():
                component = placed[1]  # dtypes that clash only for one kind of a declared input: that input is not cast
        elif function in declared.numbers and NUMBER_AS_TENSOR.search(message):
            component, meaning = declared.numbers[function], "a Python number it was given is used as a tensor"
            advice = "accept a Python number as the contract allows: turn it into a tensor (`torch.as_tensor(x, dtype=q.dtype)`) however it is passed"
        elif function in declared.numbers and TENSOR_AS_NUMBER.search(message) and code and \
                declared.numbers[function] in _parameter_parts(code[-1], source, declared, traced=True):
            component, meaning = declared.numbers[function], "a tensor it was given is passed where torch takes a Python number only"
            advice = ("accept a tensor as the contract allows: combine it with tensor arithmetic (`a - c * b`), which takes a Python "
                      "number too and carries the tensor's gradient")  # fmt: skip
        elif on_line is not None:  # an error torch words in no known way, on a line the exercise can place
            component, meaning, advice = on_line, "the call fails on that line", "make that line work for every input the contract allows"
        elif only is not None and (by_call := placed[1] if placed is not None else traced) is not None:
            component, meaning = by_call, f"the call fails only when {only[0]} is {only[1]}"
            advice = "make the function accept every input the contract allows"
        elif kind not in CANNOT_RUN and function in declared.whole:  # a function of one part: whatever the calls, that part raises
            component, advice = declared.whole[function], "make the line the traceback points at work for every call the contract allows"
            meaning = "it fails on every call" if everywhere else "it fails on calls the contract allows"
        elif everywhere:  # whatever the error, a function that raises on every call cannot run at all: its line says where
            component, meaning = "load", "it cannot run at all"
            advice = "fix the name or import the traceback points at" if kind in CANNOT_RUN else "make the line the traceback points at work"
        else:
            continue
        signature = classified[3] if classified else f"{kind}: {message}"[:120]
        owner = code[-1][1].strip() if code and code[-1][1].strip() in raisers else function
        title = f"{owner} raises {kind}: {meaning}" + (f" (called by {function})" if owner != function else "")
        finding = replace(_finding(owner, component, title, evidence, advice, blocks=everywhere and owner == function,
                                   explains=frozenset({ASPECT_OF.get(component) or "type"})), signature=signature,
                          via=declared.made_by.get(only) if only else None)  # fmt: skip
        if sized:  # placed by the sizes that work, else by the one kind of call that alone raises, else by an operand's line
            finding = place(finding)
            for candidate in (placed[1] if placed is not None else None, traced):
                finding = replace(finding, component=candidate) if finding.component == UNPLACED and candidate is not None else finding
        found.append(finding)
    return found


OWN_LEAF = "an in-place write into a tensor the function made with requires_grad=True, a leaf autograd cannot record writes into"


INPUT_WRITE = "an in-place operation writes into an input or a view of it (here one expanded over the batch, whose elements share memory)"
EXPANSION = r"\.(?:expand|expand_as)\(|\bbroadcast_to\("
OWN_EXPANSION_WRITE = ("an in-place operation writes into a view the code itself expanded (`expand`, `expand_as`, `broadcast_to`), "
                       "whose elements along the expanded axes share one memory location")  # fmt: skip


def _writes_own_expansion(frame: tuple[str, str, str], source: str | None) -> bool:
    """Whether the student's failing line (``frame``) applies an in-place operation to an expansion it makes itself
    (``x.expand_as(y).neg_()``), or writes into a name an earlier line of its function made by expanding."""
    text = frame[2].split("#", 1)[0]
    expanded = re.search(EXPANSION, text)
    return (expanded is not None and re.search(r"\.\w+_\(", text[expanded.end():]) is not None) or _writes_made_with(frame, source, EXPANSION)


STRIDED_BUFFER = r"\b(empty_strided|new_empty_strided|as_strided)\("
"""Code that makes a tensor with strides of its choosing: written into, the only other way than an expanded input itself to meet
elements that share memory."""


def _written(text: str) -> set[str]:
    """The names a line of code writes into in place (``x.mul_(...)``, ``x /= ...``, ``x[...] = ...``)."""
    return {m.group(1) for m in re.finditer(INPLACE.format(name=r"([A-Za-z_]\w*)"), text.split("#", 1)[0])}


def _writes_made_with(frame: tuple[str, str, str], source: str | None, made: str) -> bool:
    """Whether the student's failing line (``frame``: its number, function and code) writes in place into a name that the
    latest earlier line of its function assigning it made with code matching ``made`` (e.g. a leaf of its own made with
    ``requires_grad``)."""
    line, function, text = frame
    written = _written(text)
    for number, earlier in reversed(function_lines(source, function.strip())):
        assigned = re.match(r"\s*([A-Za-z_]\w*)\s*=(?!=)", earlier)
        if number < int(line) and assigned is not None and assigned.group(1) in written:
            return re.search(made, earlier.split("#", 1)[0]) is not None
    return False


def marked_operation(traceback: str) -> str | None:
    """The code Python's markers underline in the innermost frame of a traceback (the operation that failed, e.g.
    ``table[d - 1]`` of ``x = q @ k * table[d - 1]``), or None when that frame has no markers."""
    frames = list(FRAME.finditer(traceback or ""))
    if not frames:
        return None
    found = MARKED.match(traceback, frames[-1].start())
    if found is None:
        return None
    code, indent, markers = found.groups()
    start = len(indent.expandtabs())
    return code.expandtabs()[start : start + len(markers)] or None


def _module_definitions(source: str | None) -> tuple[dict[str, str], dict[str, str]]:
    """The code of each name a module-level statement of ``source`` assigns (a table or buffer built once at import), and
    of each function it defines (a helper that makes an operand)."""
    try:
        tree = ast.parse(source or "")
    except (SyntaxError, ValueError):
        return {}, {}
    made: dict[str, str] = {}
    helpers: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            helpers[node.name] = ast.get_source_segment(source or "", node) or ""
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        for target in targets:
            if isinstance(target, ast.Name):
                made[target.id] = ast.get_source_segment(source or "", node) or ""
    return made, helpers


def _line_component(declared: Declarations, frame: tuple[str, str, str], source: str | None, *, trace: bool,
                    operation: str | None = None, operands: bool = False) -> str | None:  # fmt: skip
    """The component of the student's failing line (``frame``: its number, function and code) by the operation on it, else
    (with ``trace``) by the operation that made a name the failing ``operation`` (the whole line when not known) uses: the
    latest earlier line of its function that assigned it (``kt = k.T`` before the ``q @ kt`` that fails), else the
    module-level statement that did (a table built at import), each by its own operation or else by the body of a
    module-level helper it calls (``bias = _causal_bias(...)``; not a graded function's), with the patterns of
    :attr:`Declarations.operands` too
    when ``operands`` (not for sizes that do not fit: a scale is a number, whose size never clashes); or None."""
    line, function, text = frame

    def of(code: str, patterns: Mapping[str, str]) -> str | None:
        return next((component for pattern, component in patterns.items() if re.search(pattern, code)), None)

    found = of(text, declared.lines)
    if found is not None or not trace:
        return found
    patterns = {**declared.lines, **declared.operands} if operands else declared.lines
    definitions, helpers = _module_definitions(source)

    def made(code: str) -> str | None:  # by the code's own operation, else by a helper of the module it calls
        called = (helpers[name] for name in re.findall(r"\b([A-Za-z_]\w*)\s*\(", code)
                  if name in helpers and name != function and name not in declared.functions)
        return of(code, patterns) or next((c for body in called if (c := of(body, patterns)) is not None), None)

    wanted = set(re.findall(r"\b[A-Za-z_]\w*\b", (operation or text).split("#", 1)[0]))
    for number, earlier in reversed(function_lines(source, function)):
        assigned = ASSIGNMENT.match(earlier)
        if number >= int(line) or assigned is None:
            continue
        names = _assigned(assigned) & wanted
        if names:
            wanted -= names  # an earlier assignment of the same name is no longer the one the failing line reads
            if (component := made(earlier.split("#", 1)[0])) is not None:
                return component
    return next((component for name in sorted(wanted) if name in definitions if (component := made(definitions[name])) is not None), None)


def _not_tensors(function: str, calls: Sequence[Observed], source: str | None) -> list[Finding]:
    """A finding when the function returned something other than one plain tensor."""
    others = [c for c in calls if c.result is not None and c.result.raised is None and not c.result.exact_tensor]
    if not others:
        return []
    got = others[0].result
    assert got is not None
    everywhere = len(others) == len([c for c in calls if c.result is not None and c.result.raised is None])
    note = f"{function} returned a {got.type_name}, not a tensor"
    if got.length is not None:
        title = f"{function} returns a {got.type_name.rsplit('.', 1)[-1]} of {got.length} items instead of one tensor"
        evidence = f"It returned a {got.type_name} of {got.length} item(s){f', {got.repr},' if got.repr else ''} where one torch.Tensor is expected."
        advice = "return only the output tensor (no attention weights or other extra values)"
    elif got.type_name in ("builtins.float", "builtins.int"):
        title = f"{function} returns a Python number instead of a tensor"
        evidence = f"It returned {got.type_name} {got.repr}{first_line(source, function, NUMBER_SLIPS)}: `.item()`, `float()` and `math.exp` turn a tensor into a number, which has no dtype and no gradient."
        advice = "keep torch operations throughout (`torch.exp`, tensor arithmetic) and return the 0-dim tensor"
    elif got.is_tensor:
        title = f"{function} returns a subclass of torch.Tensor ({got.type_name})"
        evidence = f"It returned a {got.type_name}, not a plain torch.Tensor."
        advice = "return a plain torch.Tensor"
    else:
        title = f"{function} returns a {got.type_name} instead of a tensor"
        evidence = f"It returned {got.type_name} {got.repr}."
        advice = "return a torch.Tensor computed with torch operations"
    return [_finding(function, "type", title, evidence, advice, blocks=everywhere, explains=frozenset(ASPECTS), note=note)]


def _shapes(function: str, calls: Sequence[Observed], declared: Declarations) -> list[Finding]:
    """A finding when the function returned tensors of the wrong shape (or, of the right shape, the wrong dtype)."""
    tensors = [c for c in calls if c.result is not None and c.result.exact_tensor]
    wrong = [c for c in tensors if c.result is not None and c.result.shape != c.shape]
    if wrong:
        call = next((c for c in wrong if c.public), wrong[0])
        got = tuple(call.result.shape or ()) if call.result is not None else ()
        named = declared.shapes(function, got, call.shape, call.attributes)
        right = [c for c in tensors if c.result is not None and c.result.shape == c.shape]
        contrast = _contrasting(wrong, right) if named is None and right and len(wrong) > 1 else ()
        placed, only = _declared(contrast, declared), _in_words(contrast)
        when = f" It returns the wrong shape only when {only[0]} is {only[1]}." if only else ""
        component, title, evidence, advice = named or (
            placed[1] if placed else "shape", f"{function} returns the wrong shape",
            f"It returned shape {list(got)} where {list(call.shape)} is expected.{when}", "check the shape of every step against the contract",
        )  # fmt: skip
        note = f"{function} returned tensors of the wrong shape"
        return [Finding(function, component, "contract", title, evidence, advice, aspect="type", blocks=True, note=note,
                        public=any(c.public for c in wrong))]  # fmt: skip
    mistyped = [c for c in tensors if c.result is not None and c.result.dtype != c.dtype]
    if not mistyped:
        return []
    call = mistyped[0]
    assert call.result is not None
    only = _contrast(mistyped, [c for c in tensors if all(c is not m for m in mistyped)])
    when = f" for {only[1]} inputs" if only and only[0] == "dtype" else ""
    evidence = f"It returned {call.result.dtype} where the inputs are {call.dtype}{when}."
    note = f"{function} returned the wrong dtype"
    return [_finding(function, "dtype", f"{function} does not keep its inputs' dtype", evidence,
                     "compute in the inputs' dtype, or cast the result back with `.to(q1.dtype)`",
                     explains=frozenset({"dtype", "strided", "coefficient"}), note=note)]  # fmt: skip


def _mutations(function: str, calls: Sequence[Observed], source: str | None) -> list[Finding]:
    """A finding when calls changed their inputs (values, version counters or place in memory)."""
    def changed(call: Observed) -> list[str]:
        """The call's own inputs it changed (a request's other tensors belong to other calls)."""
        return [call.inputs[i] for i in call.outcome.changed_inputs if i < len(call.inputs) and call.inputs[i]]

    changing = [c for c in calls if c.outcome.failure is None and changed(c)]
    if not changing:
        return []
    names = sorted({name for c in changing for name in changed(c)})
    only = _contrast(changing, [c for c in calls if c.outcome.failure is None and not changed(c)])
    pattern = re.compile("|".join(INPLACE.format(name=re.escape(n)) for n in names) or r"(?!)")
    line = first_line(source, function, pattern)
    when = f", only when {only[0]} is {only[1]}" if only else ""
    if all(set(c.outcome.changed_inputs) <= set(c.outcome.changed_by_backward) for c in changing):
        line = first_line(source, function, GRAD_WRITE) or line
        evidence = (f"Only the backward pass changed its input(s) {', '.join(names)}{when}{line}: the forward calls left them "
                    "as they came.")
        return [_finding(function, "backward", f"{function}'s backward pass writes into its inputs", evidence,
                         "return each gradient from backward and leave the inputs and their .grad alone: autograd adds what "
                         "backward returns to .grad under .backward() (a gradient also added by hand counts twice) and "
                         "torch.autograd.grad must leave .grad as it was",
                         explains=frozenset({"mutation"}))]  # fmt: skip
    if only == (ORIGIN, origin(False, held_grads=True)):  # then what changed is the .grad the caller's tensors held
        line = first_line(source, function, GRAD_WRITE)
        evidence = f"Calls reset or changed the .grad that its input(s) {', '.join(names)} already held{when}{line}."
        return [_finding(function, "mutation", f"{function} resets or changes the .grad of its inputs", evidence,
                         "leave an input's .grad to the caller: gradient accumulation keeps it across calls, and clearing it "
                         "(`optimizer.zero_grad()`) is the training loop's job, never the function's",
                         explains=frozenset({"mutation"}))]  # fmt: skip
    evidence = f"Calls changed its input(s) {', '.join(names)} (values, version counter or place in memory){when}{line}."
    return [_finding(function, "mutation", f"{function} modifies its inputs in place", evidence,
                     "compute on new tensors (`q = q / s`, not `q /= s` or `q.mul_(s)`); never write into an input",
                     explains=frozenset({"mutation"}))]  # fmt: skip


def _cut(calls: Sequence[Observed]) -> tuple[list[Observed], list[Observed]]:
    """Of the calls made with inputs that require grad and answered with a tensor of the contract's shape: those whose
    output carries no autograd history, and the others."""
    graded = [c for c in calls if c.grads and c.result is not None and c.result.exact_tensor and c.result.shape == c.shape]
    attached = [c.result is not None and c.result.requires_grad and c.result.has_grad_fn for c in graded]
    return [c for c, kept in zip(graded, attached) if not kept], [c for c, kept in zip(graded, attached) if kept]


def cut_subsets(calls: Sequence[Observed], function: str) -> tuple[tuple[str, ...], ...]:
    """The sets of inputs requiring grad (each in the order of the call's inputs) of ``function``'s calls whose output came
    back cut off from autograd, for the gradient probes to replay: a set that no probe run chooses by itself still shows
    which path is cut."""
    cut, _ = _cut([c for c in calls if c.function == function])
    subsets = (tuple(n for n in call.inputs if n and call.attributes.get(n) == "trained") for call in cut)
    return tuple(dict.fromkeys(subset for subset in subsets if subset))


def _detached(function: str, calls: Sequence[Observed], source: str | None, declared: Declarations) -> list[Finding]:
    """A finding when outputs of inputs that require grad carry no autograd history: in every call, or only in calls that
    share how they were made (a shortcut for one token, a fast path for some inputs frozen; other partial cuts are for the
    gradient probes to name). Cut only when one input alone requires grad, it is the fault of that input's component,
    when the exercise declares one; when it declares none, the input is cut from the graph or never read by the forward
    (another branch's keys read in its place), so the finding is a gradients one, after any fault the probes find in the
    forward values."""
    cut, kept = _cut(calls)
    only = _contrast(cut, kept) if kept else None
    if not cut or (kept and only is None):
        return []
    when = f", when {only[0]} is {only[1]}" if only else ""
    evidence = (f"Its output has no autograd history (grad_fn is None) although inputs require grad{when}"
                f"{first_line(source, function, GRAPH_SLIPS)}.")  # fmt: skip
    alone = {c.attributes.get(TRAINED, "") for c in cut}
    trained_alone = alone.pop().removesuffix(ONLY) if len(alone) == 1 and only else None
    component = declared.inputs.get(trained_alone, "graph") if trained_alone is not None else "graph"
    unread = trained_alone is not None and component == "graph" and ", " not in trained_alone
    return [replace(_finding(function, component, f"{function}'s output is cut off from autograd{when}", evidence,
                             "keep every step in torch, for every input that may require grad: no `.detach()`, `.numpy()`, `.item()`, "
                             "`torch.tensor(...)`, `torch.no_grad()` or shortcut that leaves the inputs out on the way",
                             explains=frozenset({"graph", "gradients"}), note="no gradient can flow through an output without autograd history"),
                    public=all(c.public for c in cut), stage="gradients" if unread else "contract")]  # fmt: skip


SIZES = next(fragments for fragments, component, _, _ in EXCEPTION_KINDS if component == "shape")
"""torch's wordings of tensor sizes that do not fit together."""


def _placed_shapes(shapes: list[Finding], calls: Sequence[Observed], declared: Declarations) -> list[Finding]:
    """``shapes`` (a function's wrong-shape findings), an unnamed wrong shape taking the component of the operation on the
    very line where, in other calls of the function, sizes that do not fit meet (one fault seen twice: a tile or buffer of
    the wrong size returned by some calls, refused by that operation in others; a line merely reading an operand made
    elsewhere places nothing)."""
    for call in calls:
        error = call.result.raised if call.result is not None else None
        if not error or error is SKIPPED or not any(fragment.lower() in str(error.get("message", "")).lower() for fragment in SIZES):
            continue
        code = FRAME.findall(error.get("traceback", "") or "")
        component = _line_component(declared, code[-1], None, trace=False) if code else None
        if component is not None:
            seen = f"Other calls raised {error['type']}{frame(error.get('traceback', ''))}."
            return [replace(f, component=component, evidence=f"{f.evidence} {seen}") if f.component == "shape" else f for f in shapes]
    return shapes


def _grad_mode_left(function: str, calls: Sequence[Observed], source: str | None) -> list[Finding]:
    """A graph finding when a call returned with autograd's grad mode switched from the one it was called in: the mode is
    global, so the caller's later operations (and a function that called this one) are affected."""
    left = [c.result.grad_mode_left for c in calls if c.result is not None and c.result.grad_mode_left is not None]
    if not left:
        return []
    state = "off" if not left[0] else "on"
    return [_finding(function, "graph", f"{function} leaves autograd switched {state} for its caller",
                     f"{len(left)} of {len(calls)} calls returned with grad mode {state}, where they were called with it "
                     f"{'on' if state == 'off' else 'off'}{first_line(source, function, MODE_SWITCHES)}: the mode is global, so "
                     "every operation after the call (the caller's own, or a function calling this one) builds "
                     f"{'no' if state == 'off' else 'a'} graph.",
                     "switch the mode only inside a block that restores it: `with torch.no_grad():` or "
                     "`with torch.set_grad_enabled(flag):`, never `torch.set_grad_enabled(flag)` as a statement",
                     explains=frozenset({"graph", "gradients"}), note="grad mode left switched by an earlier call")]  # fmt: skip


def _inference_outside(function: str, calls: Sequence[Observed], source: str | None) -> list[Finding]:
    """A type finding when calls made outside inference mode returned inference tensors: the function switched the mode on
    for itself, and its caller can use the answer neither in autograd nor in place."""
    made = [c for c in calls if c.result is not None and c.result.inference_outside]
    if not made:
        return []
    return [_finding(function, "type", f"{function} returns inference tensors to callers outside inference mode",
                     f"{len(made)} of {len(calls)} calls, made with autograd on or under torch.no_grad(), returned a tensor made under "
                     f"torch.inference_mode(){first_line(source, function, INFERENCE_MODE)}: the caller, outside that mode, can "
                     "neither modify it in place nor use it in a computation autograd records.",
                     "leave the autograd mode to the caller: compute in the mode the function is called in (torch.no_grad() "
                     "inside it is harmless; torch.inference_mode() is the caller's choice)", explains=frozenset({"type"}))]  # fmt: skip


def _overwritten(function: str, calls: Sequence[Observed], declared: Declarations) -> list[Finding]:
    """A finding when a tensor the function returned was written into by a later call of the same request: a buffer kept
    between calls and returned to every caller."""
    if not any(c.result is not None and c.result.overwritten for c in calls):
        return []
    return [Finding(function, declared.answers.get(function, "output"), "forward", f"{function} returns a buffer that its later calls overwrite",
                    f"A tensor {function} returned changed when it was called again: every call writes its answer into one buffer kept "
                    "between calls (e.g. `torch.matmul(..., out=buffer)`), so a caller holding an earlier answer sees it replaced.",
                    "return a new tensor from every call; keep no output buffer between calls", aspect="values",
                    explains=frozenset({"values"}), signature=OVERWRITTEN)]  # fmt: skip


def findings(calls: Sequence[Observed], source: str | None, declared: Declarations, place: Placement = _as_it_is) -> list[Finding]:
    """The contract slips of every function in ``calls``, those that make its results unusable first. ``place``: how the
    exercise places a finding of sizes that do not fit that no line placed (:data:`UNPLACED`; e.g. by probing the sizes
    the function works for, :mod:`grader.toolkit.sizes`), before an operand's earlier line is looked for."""
    found: list[Finding] = []
    mine = {function: [c for c in calls if c.function == function] for function in dict.fromkeys(c.function for c in calls)}
    raisers = {function for function, made in mine.items() if _raised(function, made, source, declared)}
    for function, made in mine.items():
        found += _raised(function, made, source, declared, raisers, place) + _not_tensors(function, made, source)
        found += [place(f) if f.component == UNPLACED else f for f in _placed_shapes(_shapes(function, made, declared), made, declared)]
        found += _mutations(function, made, source) + _grad_mode_left(function, made, source) + _inference_outside(function, made, source)
        found += _detached(function, made, source, declared) + _overwritten(function, made, declared)
    # a callee's fault seen through its caller's calls too: keep the callee's own finding
    kept: dict[tuple[str | None, str, str], Finding] = {}
    for f in sorted(found, key=lambda f: "(called by" in f.title):
        kept.setdefault((f.function, f.component, f.signature or f.title), f)
    return sorted((f for f in found if kept[(f.function, f.component, f.signature or f.title)] is f), key=lambda f: not f.blocks)
