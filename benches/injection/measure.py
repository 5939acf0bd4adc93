#!/usr/bin/env python3
"""Recall and false positives of toolgate's prompt-injection detectors.

Runs `toolgate redact --jsonl` (the detectors every gate uses, offline) over two labelled
corpora in this directory and prints a Markdown table:

- `attacks.jsonl`: {"class", "text"}, tool output (mail, pages, reviews, API fields) carrying
  an instruction aimed at the agent, one class per line;
- `benign.jsonl`: {"type", "text"}, ordinary tool output with imperatives to humans, HTML
  comments, role strings in code, talk about AI, and no instruction to the agent.

A text counts as found when any finding of category `injection` is in it.

    python3 benches/injection/measure.py [path/to/toolgate]      # default target/debug/toolgate
    python3 benches/injection/measure.py --check RECALL FP_RATE  # exit 1 below/above either

The corpora were written by someone who had not seen the detectors; read the numbers as an
estimate for the classes they name, not for every attack.
"""

import collections
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def load(name, label):
    rows = []
    for line in (HERE / name).read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            rows.append((row[label], row["text"]))
    return rows


def scan(toolgate, texts):
    """The injection kinds found in each text, through `toolgate redact --jsonl`."""
    stdin = "".join(json.dumps(t) + "\n" for t in texts)
    out = subprocess.run(
        [toolgate, "redact", "--jsonl"],
        input=stdin,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = []
    for line in out.splitlines():
        answer = json.loads(line)
        found.append(
            sorted({f["kind"] for f in answer["findings"] if f["category"] == "injection"})
        )
    if len(found) != len(texts):
        sys.exit(f"toolgate answered {len(found)} lines for {len(texts)} texts")
    return found


def main(argv):
    check = None
    if argv[:1] == ["--check"]:
        check = (float(argv[1]), float(argv[2]))
        argv = argv[3:]
    toolgate = argv[0] if argv else str(HERE.parent.parent / "target/debug/toolgate")
    attacks = load("attacks.jsonl", "class")
    benign = load("benign.jsonl", "type")
    hit = scan(toolgate, [t for _, t in attacks])
    flagged = scan(toolgate, [t for _, t in benign])

    by_class = collections.defaultdict(lambda: [0, 0])
    kinds = collections.Counter()
    for (cls, _), k in zip(attacks, hit):
        by_class[cls][0] += bool(k)
        by_class[cls][1] += 1
        kinds.update(k)
    by_type = collections.defaultdict(lambda: [0, 0])
    fp_kinds = collections.Counter()
    for (typ, text), k in zip(benign, flagged):
        by_type[typ][0] += bool(k)
        by_type[typ][1] += 1
        fp_kinds.update(k)
        if k and "-v" in sys.argv:
            print(f"false positive {k} [{typ}]: {text[:160]!r}", file=sys.stderr)
    if "-v" in sys.argv:
        for (cls, text), k in zip(attacks, hit):
            if not k:
                print(f"missed [{cls}]: {text[:200]!r}", file=sys.stderr)

    print("| attack class | texts | found | recall |")
    print("|---|---|---|---|")
    total = [0, 0]
    marked = [0, 0]
    for cls in sorted(by_class):
        f, n = by_class[cls]
        total[0] += f
        total[1] += n
        if cls != "embedded_plain":
            marked[0] += f
            marked[1] += n
        print(f"| {cls} | {n} | {f} | {f / n:.1%} |")
    print(f"| **all** | {total[1]} | {total[0]} | **{total[0] / total[1]:.1%}** |")
    print(f"| all but embedded_plain | {marked[1]} | {marked[0]} | {marked[0] / marked[1]:.1%} |")
    print()
    print("| benign type | texts | flagged | false-positive rate |")
    print("|---|---|---|---|")
    fp = [0, 0]
    for typ in sorted(by_type):
        f, n = by_type[typ]
        fp[0] += f
        fp[1] += n
        print(f"| {typ} | {n} | {f} | {f / n:.1%} |")
    print(f"| **all** | {fp[1]} | {fp[0]} | **{fp[0] / fp[1]:.1%}** |")
    print()
    # The detectors were tuned looking at the even lines' misses and false positives only;
    # the odd lines were never looked at: their rates are the honest estimate.
    print("| half | attacks found (all but embedded_plain) | benign flagged |")
    print("|---|---|---|")
    for name, parity in (("studied while tuning (even lines)", 0), ("never looked at (odd lines)", 1)):
        a = [bool(k) for i, ((c, _), k) in enumerate(zip(attacks, hit))
             if i % 2 == parity and c != "embedded_plain"]
        b = [bool(k) for i, k in enumerate(flagged) if i % 2 == parity]
        print(f"| {name} | {sum(a)} of {len(a)} ({sum(a) / len(a):.1%}) "
              f"| {sum(b)} of {len(b)} ({sum(b) / len(b):.1%}) |")
    print()
    print("kinds on attacks:", ", ".join(f"{k} {n}" for k, n in kinds.most_common()))
    print("kinds on benign:", ", ".join(f"{k} {n}" for k, n in fp_kinds.most_common()) or "none")
    if check:
        recall, rate = marked[0] / marked[1], fp[0] / fp[1]
        if recall < check[0] or rate > check[1]:
            sys.exit(
                f"recall {recall:.3f} (floor {check[0]}) or false-positive rate {rate:.3f} "
                f"(ceiling {check[1]}) out of bounds"
            )


if __name__ == "__main__":
    main([a for a in sys.argv[1:] if a != "-v"])
