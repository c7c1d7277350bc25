"""What the summary writers (Gradescope, JUnit, Markdown) read from a report document.

Each writer is a pure function from the report document (docs/report-schema.md)
to text; this module holds what they share: walking the checks, one line per
tier, number formatting, and cleaning text that may come from a submission.
"""

from __future__ import annotations

import json
from typing import Any, Iterator

NO_MESSAGE = "(no message)"

# C0 and C1 controls except tab and newline, DEL, bidirectional overrides,
# lone surrogates and the non-characters U+FFFE and U+FFFF: dropped or replaced,
# so submitted text can neither drive a terminal nor make XML or UTF-8 invalid.
_DROPPED = [*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), *range(0x7F, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_REPLACED = [*range(0xD800, 0xE000), 0xFFFE, 0xFFFF]
_CLEAN = {**dict.fromkeys(_DROPPED), **dict.fromkeys(_REPLACED, "\ufffd")}


def clean(text: object) -> str:
    """``text`` as a string with line ends normalised to newlines and unsafe characters dropped."""
    plain = "" if text is None else str(text)
    return plain.replace("\r\n", "\n").replace("\r", "\n").translate(_CLEAN)


def first_line(text: object) -> str:
    """The first non-blank line of ``text``, stripped, or a placeholder when there is none."""
    return next((line.strip() for line in clean(text).splitlines() if line.strip()), NO_MESSAGE)


def points(value: object) -> str:
    """A score with one decimal, or "n/a" when it is not a number."""
    return f"{value:.1f}" if isinstance(value, (int, float)) and not isinstance(value, bool) else "n/a"


def checks(document: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every check of the report in grading order, with its Gradescope-style number "tier.check" (from 1)."""
    for tier_number, tier in enumerate(document["tiers"], start=1):
        for check_number, check in enumerate(tier["checks"], start=1):
            yield f"{tier_number}.{check_number}", check


def tier_ran(tier: dict[str, Any]) -> bool:
    """Whether any check of the tier ran (a tier left out with --tiers has only skipped checks)."""
    return any(check["status"] != "skipped" for check in tier["checks"])


def tier_line(tier: dict[str, Any]) -> str:
    """One line for a tier: its points and how many checks passed, or that it was not run."""
    name = f"{tier['name']} {tier['title']}"
    if not tier_ran(tier):
        return f"{name}: not run"
    return f"{name}: {points(tier['score'])}/{points(tier['max_score'])} points, {tier['passed']} of {tier['total']} checks passed"


def headline(document: dict[str, Any]) -> str:
    """The run in one line: total points and overall status."""
    return f"Score {points(document['score'])}/{points(document['max_score'])} ({document['status']})"


def explanations(check: dict[str, Any]) -> list[str]:
    """The check's hint and counterexample in words (docs/report-schema.md), one paragraph each, cleaned."""
    found = []
    hint, example = check.get("hint"), check.get("counterexample")
    if isinstance(hint, dict):
        found.append(f"Likely misconception: {hint.get('text', '')}\n{hint.get('maths', '')}".strip())
    if isinstance(example, dict) and example.get("found"):
        found.append(
            f"Smallest failing input: {example.get('call')}\n"
            f"expected: {json.dumps(example.get('expected'))}\ngot:      {json.dumps(example.get('got'))}"
        )
    return [clean(text) for text in found]


def root_causes(document: dict[str, Any]) -> list[str]:
    """The report's root causes in words, one cleaned paragraph each, numbered in their order."""
    found = []
    for number, cause in enumerate((document.get("diagnosis") or {}).get("root_causes") or [], start=1):
        place = f"{cause['function'] or 'the file'} / {cause['component']}"
        checks = f"\nExplains: {', '.join(cause['checks'])}" if cause["checks"] else ""
        found.append(clean(f"{number}. {cause['title']} [{place}]\n{cause['evidence']}\nFix: {cause['advice']}{checks}"))
    return found


def cause_of(document: dict[str, Any], check_id: str) -> str | None:
    """"Root cause N: title" for the root cause that explains a check, or None."""
    for number, cause in enumerate((document.get("diagnosis") or {}).get("root_causes") or [], start=1):
        if check_id in cause["checks"]:
            return clean(f"Root cause {number}: {cause['title']}")
    return None
