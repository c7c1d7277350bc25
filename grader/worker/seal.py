"""What keeps the worker's observations its own, in a process the submission shares.

A submission runs in the worker's interpreter, so it can reassign anything
Python reaches: torch.Tensor's properties and methods, the worker's classes
and functions, the modules its replies are written with. Two defences, both
set up before the submission is loaded:

* :class:`TensorFacts` reads a tensor's facts (dtype, shape, version counter,
  autograd state) and copies its values through torch's C base class, whose
  attributes cannot be reassigned: a patched ``torch.Tensor`` changes nothing
  it reads.
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

import types
from collections.abc import Iterable, Mapping
from typing import Any

ATTRIBUTES = ("dtype", "shape", "_version", "requires_grad", "grad_fn", "is_leaf", "grad", "device", "layout")
"""Tensor attributes the worker reads, each through the C base class's descriptor."""
METHODS = ("detach", "clone", "numel", "cpu", "contiguous", "resolve_conj", "resolve_neg", "numpy", "to", "is_complex", "is_floating_point")
"""Tensor methods the worker calls on results and inputs, each the C base class's own."""
_ABSENT = object()


class TensorFacts:
    """A tensor's attributes and methods as torch's C base class defines them, bound once.

    ``facts.dtype(t)`` is ``t.dtype`` and ``facts.detach(t)`` is ``t.detach()``,
    whatever the submission assigned to ``torch.Tensor`` since; ``facts.set_grad(t, g)``
    sets ``t.grad``.
    """

    def __init__(self, torch: Any) -> None:
        base = torch._C.TensorBase
        for name in ATTRIBUTES:
            setattr(self, name.lstrip("_"), base.__dict__[name].__get__)
        for name in METHODS:
            setattr(self, name, base.__dict__[name])
        self.set_grad = base.__dict__["grad"].__set__

    def __getattr__(self, name: str) -> Any:  # for type checkers: every fact is bound in __init__
        raise AttributeError(name)


class Seal:
    """What each name of some namespaces referred to, and each of their functions' code, when it was made.

    ``spaces``: name -> namespace (a module's, a class's or an object's
    ``vars``); ``left_out``: names of those namespaces that the worker itself
    sets later (the loaded module, say). Names added later (lazy imports add
    them) are not changes.
    """

    def __init__(self, spaces: Mapping[str, Mapping[str, Any]], left_out: Iterable[str] = ()) -> None:
        skipped = set(left_out)
        self.noted = [(where, space, {k: v for k, v in space.items() if k not in skipped}) for where, space in spaces.items()]
        self.codes = [(f"{where}.{name}", value, value.__code__) for where, _, kept in self.noted for name, value in kept.items()
                      if isinstance(value, types.FunctionType)]  # fmt: skip

    def broken(self) -> str | None:
        """The first name (``where.name``) rebound, deleted or given other code since the seal was made, or None."""
        for where, space, kept in self.noted:
            for name, value in kept.items():
                if space.get(name, _ABSENT) is not value:
                    return f"{where}.{name}"
        for name, function, code in self.codes:
            if function.__code__ is not code:
                return name
        return None
