"""grader.toolkit.softmax: the vectorised oracles' maps, head by head in extended precision, independent of torch."""

from __future__ import annotations

import ast
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from grader.toolkit import softmax


def _python_maps(queries: np.ndarray, keys: np.ndarray, causal: bool) -> np.ndarray:
    """The same maps row by row in Python floats, sums with math.fsum."""
    *lead, t, d = queries.shape
    flat_q, flat_k = queries.reshape(-1, t, d).tolist(), keys.reshape(-1, keys.shape[-2], d).tolist()
    maps = []
    for query_rows, key_rows in zip(flat_q, flat_k):
        head = []
        for i, query in enumerate(query_rows):
            visible = key_rows[: i + 1] if causal else key_rows
            logits = [math.fsum(a * b for a, b in zip(query, key)) / math.sqrt(d) for key in visible]
            peak = max(logits)
            weights = [math.exp(x - peak) for x in logits]
            total = math.fsum(weights)
            head.append([w / total for w in weights] + [0.0] * (len(key_rows) - len(visible)))
        maps.append(head)
    return np.array(maps).reshape(*lead, t, keys.shape[-2])


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("lead", [(1,), (2, 3), ()])
def test_maps_match_python_floats_to_a_few_ulps(lead: tuple[int, ...], causal: bool) -> None:
    """Every head's map equals the plain-Python one to a few float64 ulps (of the element, or of 1 for weights far below
    it, whose Python-float exponent is rounded), hidden keys exactly 0, the leading axes kept."""
    rng = np.random.default_rng(7)
    queries, keys = rng.normal(0, 3, (*lead, 9, 5)), rng.normal(0, 3, (*lead, 9, 5))
    got = softmax.softmax_maps(queries, keys, causal)
    expected = _python_maps(queries, keys, causal)
    assert got.shape == (*lead, 9, 9) and got.dtype == np.float64
    np.testing.assert_allclose(got, expected, rtol=4e-15, atol=4e-16)
    assert np.array_equal(got == 0, expected == 0)


def test_large_logits_neither_overflow_nor_lose_the_largest_key() -> None:
    """Scaled logits of thousands give finite rows that sum to 1, the largest logit's key taking all the weight."""
    queries = np.full((1, 2, 4), 60.0)
    keys = np.array([[[60.0] * 4, [-60.0] * 4]])
    got = softmax.softmax_maps(queries, keys, causal=False)
    np.testing.assert_array_equal(got, [[[1.0, 0.0], [1.0, 0.0]]])


def test_imports_only_numpy_and_the_standard_library() -> None:
    """softmax.py imports numpy and standard-library modules only, and importing it loads no torch (the oracles rely on it)."""
    tree = ast.parse(Path(softmax.__file__).read_text(encoding="utf-8"))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert imported and imported <= set(sys.stdlib_module_names) | {"numpy"}, imported
    code = "import sys, grader.toolkit.softmax; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
