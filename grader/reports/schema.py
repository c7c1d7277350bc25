"""The JSON report's schema (a JSON Schema subset) and a validator for it.

The schema is the contract other tools rely on (docs/report-schema.md).
``SCHEMA_VERSION`` changes on any breaking change. The validator understands
exactly the keywords used here: type, enum, properties, required,
additionalProperties, items and minimum, and one of its own, ``rules``: the
name of a function in :data:`RULES` that states what the other keywords
cannot (for the experiment section, that every series has one value per x
value).
"""

from __future__ import annotations

from typing import Any

from grader.core import experiment
from grader.reports.audience import AUDIENCES
from grader.toolkit.rootcause import COMPONENTS

SCHEMA_VERSION = 3

_NUMBER = {"type": "number"}
_NULLABLE_NUMBER = {"type": ["number", "null"]}
_STRING = {"type": "string"}
_NULLABLE_STRING = {"type": ["string", "null"]}
_NUMBERS = {"type": "array", "items": _NUMBER}
_STRINGS = {"type": "array", "items": _STRING}
# Checks that the other keywords cannot state, named by a schema's "rules" keyword.
RULES = {"experiment": experiment.problems}


def _object(properties: dict[str, Any], nullable: bool = False, rules: str | None = None) -> dict[str, Any]:
    found = {
        "type": ["object", "null"] if nullable else "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }
    return found | ({"rules": rules} if rules else {})


_VALUES = {"type": ["array", "number", "null"]}  # nested lists of numbers, null for a non-finite one
_NULLABLE_INTEGER = {"type": ["integer", "null"], "minimum": 0}
_COUNTEREXAMPLE = _object(
    {
        "found": {"type": "boolean"},
        "note": _STRING,
        "function": _STRING,
        "size": {"type": ["object", "null"]},
        "call": _NULLABLE_STRING,
        "inputs": {
            "type": ["array", "null"],
            "items": _object(
                {
                    "name": _STRING,
                    "shape": {"type": "array", "items": {"type": "integer", "minimum": 0}},
                    "dtype": _STRING,
                    "layout": _STRING,
                    "requires_grad": {"type": "boolean"},
                    "values": _VALUES,
                }
            ),
        },
        "cotangent": _VALUES,
        "result": {"type": ["string", "null"], "enum": ["output", "gradient", None]},
        "with_respect_to": _NULLABLE_STRING,
        "expected": _VALUES,
        "got": _VALUES,
        "difference": _VALUES,
        "allowed": _VALUES,
        "mismatched": _NULLABLE_INTEGER,
        "elements": _NULLABLE_INTEGER,
        "worst_ratio": _NULLABLE_NUMBER,
        "searched": {"type": "integer", "minimum": 0},
    },
    nullable=True,
)

_CHECK = _object(
    {
        "id": _STRING,
        "title": _STRING,
        "tier": _STRING,
        "status": {"type": "string", "enum": ["passed", "failed", "error", "skipped"]},
        "score": {"type": "number", "minimum": 0},
        "max_score": {"type": "number", "minimum": 0},
        "message": _STRING,
        "duration_s": {"type": "number", "minimum": 0},
        "worst_ratio": _NULLABLE_NUMBER,
        "visibility": {"type": "string", "enum": ["public", "hidden"]},
        "hint": {"type": ["object", "null"]},
        "counterexample": _COUNTEREXAMPLE,
    }
)

_TIER = _object(
    {
        "name": _STRING,
        "title": _STRING,
        "score": {"type": "number", "minimum": 0},
        "max_score": {"type": "number", "minimum": 0},
        "passed": {"type": "integer", "minimum": 0},
        "total": {"type": "integer", "minimum": 0},
        "checks": {"type": "array", "items": _CHECK},
    }
)

_EXPERIMENT = _object(
    {
        "name": _STRING,
        "title": _STRING,
        "summary": _STRINGS,
        "inputs": {"type": "array", "items": _object({"label": _STRING, "values": _NUMBERS})},
        "panels": {
            "type": "array",
            "items": _object(
                {
                    "id": _STRING,
                    "title": _STRING,
                    "caption": _STRING,
                    "x": _object({"label": _STRING, "values": _NUMBERS}),
                    "y_label": _STRING,
                    "y_includes": _NUMBERS,
                    "series": {
                        "type": "array",
                        "items": _object(
                            {
                                "label": _STRING,
                                "role": {"type": "string", "enum": list(experiment.ROLES)},
                                "values": {"type": ["array", "null"], "items": _NULLABLE_NUMBER},
                                "note": _NULLABLE_STRING,
                            }
                        ),
                    },
                }
            ),
        },
        "notes": _STRINGS,
    },
    nullable=True,
    rules="experiment",
)

_DIAGNOSIS = _object(
    {
        "root_causes": {
            "type": "array",
            "items": _object(
                {
                    "function": _NULLABLE_STRING,
                    "component": {"type": "string", "enum": list(COMPONENTS)},
                    "title": _STRING,
                    "evidence": _STRING,
                    "advice": _STRING,
                    "checks": _STRINGS,
                    "visibility": {"type": "string", "enum": ["public", "hidden"]},
                }
            ),
        },
        "unexplained": _STRINGS,
        "probes": _STRINGS,
        "maps": {"type": "array", "items": _object({"function": _STRING, "title": _STRING, "expected": {"type": "array"}, "got": {"type": "array"}})},
        "duration_s": {"type": "number", "minimum": 0},
    }
)

SCHEMA: dict[str, Any] = _object(
    {
        "schema_version": {"type": "integer", "enum": [SCHEMA_VERSION]},
        "grader_version": _STRING,
        "exercise": _STRING,
        "exercise_title": _STRING,
        "exercise_version": _STRING,
        "audience": {"type": "string", "enum": list(AUDIENCES)},
        "submission": _object(
            {
                "path": _STRING,
                "sha256": _NULLABLE_STRING,
                "size_bytes": {"type": ["integer", "null"], "minimum": 0},
                "load_error": _NULLABLE_STRING,
                "notes": {"type": "array", "items": _STRING},
            }
        ),
        "seed": {"type": "integer", "minimum": 0},
        "tiers_selected": {"type": "array", "items": _STRING},
        "score": {"type": "number", "minimum": 0},
        "max_score": {"type": "number", "minimum": 0},
        "status": {"type": "string", "enum": ["passed", "failed", "error"]},
        "diagnosis": _DIAGNOSIS,
        "tiers": {"type": "array", "items": _TIER},
        "experiment": _EXPERIMENT,
        "worker": _object(
            {
                "stdout": _STRING,
                "stderr": _STRING,
                "restarts": {"type": "integer", "minimum": 0},
                "warnings": {"type": "array", "items": _STRING},
                "protections": {"type": "object"},
                "submission_cpu_s": {"type": "number", "minimum": 0},
            }
        ),
        "environment": _object(
            {
                "python": _STRING,
                "platform": _STRING,
                "numpy": _STRING,
                "torch": _NULLABLE_STRING,
                "pytest": _STRING,
                "jinja2": _STRING,
                "grader": _STRING,
            }
        ),
        "started_at": _STRING,
        "duration_s": {"type": "number", "minimum": 0},
    }
)

_TYPES = {
    "boolean": bool,
    "object": dict,
    "array": list,
    "string": str,
    "integer": int,
    "number": (int, float),
    "null": type(None),
}


def _is(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return name == "boolean"
    return isinstance(value, _TYPES[name])  # type: ignore[arg-type]  # a class or a tuple of classes


def validate(instance: Any, schema: dict[str, Any] = SCHEMA, path: str = "$") -> list[str]:
    """Every way ``instance`` violates ``schema``, as "path: problem" lines (empty when valid)."""
    kinds = schema.get("type")
    if kinds is not None:
        kinds = [kinds] if isinstance(kinds, str) else kinds
        if not any(_is(instance, kind) for kind in kinds):
            return [f"{path}: must be {' or '.join(kinds)} (got {type(instance).__name__} {instance!r:.60})"]
    problems = []
    if "enum" in schema and instance not in schema["enum"]:
        problems.append(f"{path}: must be one of {schema['enum']} (got {instance!r})")
    if "minimum" in schema and _is(instance, "number") and instance < schema["minimum"]:
        problems.append(f"{path}: must be >= {schema['minimum']} (got {instance!r})")
    if isinstance(instance, dict):
        properties = schema.get("properties", {})
        problems += [f"{path}: missing required key {key!r}" for key in schema.get("required", []) if key not in instance]
        if schema.get("additionalProperties") is False:
            problems += [f"{path}: unexpected key {key!r}" for key in instance if key not in properties]
        for key, value in instance.items():
            if key in properties:
                problems += validate(value, properties[key], f"{path}.{key}")
    if isinstance(instance, list) and "items" in schema:
        for index, item in enumerate(instance):
            problems += validate(item, schema["items"], f"{path}[{index}]")
    if "rules" in schema:
        problems += RULES[schema["rules"]](instance, path)
    return problems
