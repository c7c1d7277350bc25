"""What keeps the worker's observations its own, in a process the submission shares.

A submission runs in the worker's interpreter, so it can reassign anything
Python reaches: torch.Tensor's properties and methods, the worker's classes
and functions, the modules its replies are written with. Two defences, both
set up before the submission is loaded:

* :class:`TensorFacts` reads a tensor's facts (dtype, shape, version counter,
  autograd state) and copies its values through torch's C base class, whose
  attributes cannot be reassigned, with torch's function and dispatch modes
  switched off: a patched ``torch.Tensor`` or a mode left active changes
  nothing it reads.
* :class:`Seal` notes what every name of the worker's modules, classes and
  objects refers to, and every function's code; :meth:`Seal.broken` names what
  was replaced since. The worker checks it after loading the submission and
  after every request, and stops answering once it is broken.

Neither is a proof: code in the same process can in principle write any
memory (ctypes). They close the ways a line of Python (a patched attribute or
function) would forge what the grader is told; the grader's own checks of each
reply (an array's dtype and shape against the facts sent with it) close more.
"""

from __future__ import annotations

import operator
import types
from collections.abc import Callable, Iterable, Mapping
from itertools import repeat
from typing import Any

ATTRIBUTES = ("dtype", "shape", "_version", "requires_grad", "grad_fn", "is_leaf", "grad", "device", "layout")
"""Tensor attributes the worker reads, each through the C base class's descriptor."""
METHODS = ("detach", "clone", "numel", "cpu", "contiguous", "resolve_conj", "resolve_neg", "numpy", "to", "is_complex", "is_floating_point",
           "data_ptr", "storage_offset", "stride", "is_inference")
"""Tensor methods the worker calls on results and inputs, each the C base class's own."""
_ABSENT = object()
CODE = operator.attrgetter("__code__")


class TensorFacts:
    """A tensor's attributes and methods as torch's C base class defines them, bound once and read past any torch mode.

    ``facts.dtype(t)`` is ``t.dtype`` and ``facts.detach(t)`` is ``t.detach()``,
    whatever the submission assigned to ``torch.Tensor`` since; ``facts.set_grad(t, g)``
    sets ``t.grad`` and ``facts.equal(a, b)`` is ``torch.equal(a, b)``. Each runs with
    torch's function and dispatch modes switched off: a mode the submission left
    active (``torch.set_default_device`` leaves one, so a mode is no fault in
    itself) intercepts even the base class's getters, and could answer for them.
    """

    def __init__(self, torch: Any) -> None:
        base = torch._C.TensorBase
        unintercepted = _past_modes(torch)
        for name in ATTRIBUTES:
            setattr(self, name.lstrip("_"), unintercepted(base.__dict__[name].__get__))
        for name in METHODS:
            setattr(self, name, unintercepted(base.__dict__[name]))
        self.set_grad = unintercepted(base.__dict__["grad"].__set__)
        self.equal = unintercepted(torch.equal)

    def __getattr__(self, name: str) -> Any:  # for type checkers: every fact is bound in __init__
        raise AttributeError(name)


def _past_modes(torch: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A wrapper that calls a function with torch's function and dispatch modes switched off whenever one is active."""
    function_modes, dispatch_modes = torch._C._len_torch_function_stack, torch._C._len_torch_dispatch_stack
    no_function_modes, no_dispatch_modes = torch._C.DisableTorchFunction, torch._C._DisableTorchDispatch

    def unintercepted(function: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            if not (function_modes() or dispatch_modes()):  # the common case: two C calls, not two context managers
                return function(*args)
            with no_function_modes(), no_dispatch_modes():
                return function(*args)

        return call

    return unintercepted


class Seal:
    """What each name of some namespaces referred to, and each of their functions' code, when it was made.

    ``spaces``: name -> namespace (a module's, a class's or an object's
    ``vars``); ``left_out``: names of those namespaces that the worker itself
    sets later (the loaded module, say); ``only``: for some namespaces, the
    names to seal (those the worker's code uses of a large module). Names
    added later (lazy imports add them) are not changes.
    """

    def __init__(self, spaces: Mapping[str, Mapping[str, Any]], left_out: Iterable[str] = (), only: Mapping[str, set[str]] | None = None) -> None:
        skipped, only = set(left_out), only or {}
        self.noted = []
        for where, space in spaces.items():
            kept = {k: v for k, v in space.items() if k not in skipped and (where not in only or k in only[where])}
            self.noted.append((where, space.get, tuple(kept), tuple(kept.values())))
        functions = [(f"{where}.{name}", value) for where, _, names, values in self.noted for name, value in zip(names, values)
                     if isinstance(value, types.FunctionType)]  # fmt: skip
        self.functions = tuple(function for _, function in functions)
        self.function_names = tuple(name for name, _ in functions)
        self.codes = tuple(function.__code__ for function in self.functions)

    def broken(self) -> str | None:
        """The first name (``where.name``) rebound, deleted or given other code since the seal was made, or None."""
        # C-level loops (map, operator.is_): this runs after every request
        for where, get, names, values in self.noted:
            if not all(map(operator.is_, map(get, names, repeat(_ABSENT)), values)):
                return next(f"{where}.{name}" for name, value in zip(names, values) if get(name, _ABSENT) is not value)
        if not all(map(operator.is_, map(CODE, self.functions), self.codes)):
            return next(name for name, function, code in zip(self.function_names, self.functions, self.codes) if function.__code__ is not code)
        return None


def names_used(functions: Iterable[types.FunctionType]) -> set[str]:
    """Every global and attribute name the code of ``functions`` (nested code included) refers to."""
    found: set[str] = set()
    pending = [function.__code__ for function in functions]
    while pending:
        code = pending.pop()
        found.update(code.co_names)
        pending += [constant for constant in code.co_consts if isinstance(constant, types.CodeType)]
    return found
