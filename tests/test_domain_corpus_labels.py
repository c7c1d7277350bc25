"""Verify the labels of the independent domain corpus in tests/corpus/domain/.

Every wrong file must be exposed by its witness scenario (score > 10, i.e. an
error more than ten times the dtype tolerance against a float64 oracle), and
every correct file must stay within tolerance (score <= 1) on a varied battery.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import torch
from conftest import load_module

DOMAIN = Path(__file__).resolve().parent / "corpus" / "domain"
WRONG = sorted((DOMAIN / "wrong").glob("*.py"))
CORRECT = sorted((DOMAIN / "correct").glob("*.py"))
ALLOWED_IMPORTS = {"math", "torch", "numpy", "__future__"}
WITNESS_MIN = 10.0


def _load(path: Path, tag: str = ""):
    return load_module(path, f"_domain_{path.parent.name}_{path.stem}{tag}")


WITNESS_MODULE = _load(DOMAIN / "witnesses.py")


@pytest.fixture(autouse=True, scope="module")
def _single_thread():
    """Small matmuls on a shared 2-core machine run far faster on one thread."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
LABELS = json.loads((DOMAIN / "labels.json").read_text())


def _header_and_imports(path: Path):
    tree = ast.parse(path.read_text())
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            roots.add((node.module or "").split(".")[0])
    funcs = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    return ast.get_docstring(tree).splitlines()[0], roots, funcs


def test_corpus_sizes_and_labels():
    """Corpus has enough files and labels.json covers exactly those files."""
    assert len(WRONG) >= 32 and len(CORRECT) >= 12
    files = {f"wrong/{p.name}" for p in WRONG} | {f"correct/{p.name}" for p in CORRECT}
    assert set(LABELS) == files
    assert set(WITNESS_MODULE.WITNESSES) == {p.stem for p in WRONG}
    cats = {}
    for key, lab in LABELS.items():
        if key.startswith("wrong/"):
            assert lab["function"] in ("differential_lambda", "differential_attention")
            assert lab["component"] in ("values", "gradients", "signature", "state")
            cats[lab["category"]] = cats.get(lab["category"], 0) + 1
    assert len(cats) == 7 and min(cats.values()) >= 3


@pytest.mark.parametrize("path", WRONG + CORRECT, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_file_shape(path):
    """Each file has the right docstring tag, both functions and only allowed imports."""
    first, roots, funcs = _header_and_imports(path)
    tag = "BUG: " if path.parent.name == "wrong" else "CORRECT: "
    assert first.startswith(tag)
    assert roots <= ALLOWED_IMPORTS
    assert {"differential_lambda", "differential_attention"} <= funcs
    assert len(path.read_text().splitlines()) <= 80


@pytest.mark.parametrize("path", WRONG, ids=lambda p: p.stem)
def test_wrong_file_exposed_by_witness(path):
    """A wrong file's witness discrepancy exceeds ten times the tolerance."""
    witness = WITNESS_MODULE.WITNESSES[path.stem]
    assert witness(_load(path)) > WITNESS_MIN


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("path", CORRECT, ids=lambda p: p.stem)
def test_correct_file_within_tolerance(path, seed):
    """A correct file stays within tolerance on the varied battery."""
    assert WITNESS_MODULE.check_correct(_load(path, f"_{seed}"), seed) <= 1.0


@pytest.mark.parametrize("name", sorted(WITNESS_MODULE.WITNESSES))
def test_witness_passes_a_correct_file(name):
    """Each witness scenario scores a plain correct implementation within tolerance."""
    module = _load(DOMAIN / "correct" / "naive_masked_fill.py", f"_w_{name}")
    assert WITNESS_MODULE.WITNESSES[name](module) <= 1.0
