"""Write correct/, wrong/ and labels.json from bases.py and bugs.py.

Each file: the stub's text verbatim up to and including its "Your work starts here" banner (supplied
validation included), then the student's code for both functions.
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bases import BASES, STYLES  # noqa: E402
from bugs import BUGS  # noqa: E402

STUB = os.path.join(HERE, "..", "..", "..", "exercise", "diff_v2_attention.py")


def header():
    with open(STUB) as fh:
        text = fh.read()
    i = text.index("# Your work starts here.")
    j = text.index("\n", text.index("\n", i) + 1) + 1  # the dashed line after the banner
    return text[:j]


def main():
    head = header()
    labels = {}
    for d in ("correct", "wrong"):
        os.makedirs(os.path.join(HERE, d), exist_ok=True)
        for f in os.listdir(os.path.join(HERE, d)):
            if f.endswith(".py"):
                os.remove(os.path.join(HERE, d, f))
    for name, code in BASES.items():
        with open(os.path.join(HERE, "correct", name + ".py"), "w") as fh:
            fh.write(head + "\n" + code.lstrip("\n"))
        labels[f"correct/{name}"] = {"correct": True, "style": STYLES[name]}
    for name, b in BUGS.items():
        code = BASES[b["base"]]
        if code.count(b["old"]) != 1:
            raise SystemExit(f"{name}: replaced text occurs {code.count(b['old'])} times")
        with open(os.path.join(HERE, "wrong", name + ".py"), "w") as fh:
            fh.write(head + "\n" + code.replace(b["old"], b["new"]).lstrip("\n"))
        lab = {"correct": False}
        lab.update(b["label"])
        labels[f"wrong/{name}"] = lab
    with open(os.path.join(HERE, "labels.json"), "w") as fh:
        json.dump(labels, fh, indent=1)
        fh.write("\n")
    print(f"{len(BASES)} correct, {len(BUGS)} wrong")


if __name__ == "__main__":
    main()
