#!/usr/bin/env python3
"""Side-by-side secret-detection bench: toolgate's redactor vs detect-secrets.

    python3 benches/secrets/compare.py [--toolgate PATH] [--config FILE] [--json]

Reads tests/fixtures/secrets/corpus.jsonl (made by gen_corpus.py) and scores
both tools per class (A-G positives, N negatives):

* toolgate (`toolgate redact [--config FILE] --jsonl`, every entry in one
  process): a positive is caught when none of its `secrets` strings is left in
  `masked`; "flagged" when any finding has category secret or entropy. A
  negative is a false positive when any finding has category secret/entropy.
* detect-secrets 1.5.0 (default plugins and filters, installed into a venv at
  ${TOOLGATE_BENCH_VENV:-/tmp/toolgate-bench-venv}): each entry is written to
  its own file and the whole directory is scanned once; an entry is flagged
  when any result names its file. Flagged positive = caught, flagged negative =
  false positive.

recall = caught / positives. Per class, precision = TP / (TP + FP) where FP
counts the negatives written against that class (their `against` field) that
the tool flagged; overall, FP counts every flagged negative. FP rate = FP /
negatives. Wall clock is measured per tool.
Standard library only. Exits 0 whenever the bench itself ran.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import OrderedDict, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "fixtures" / "secrets" / "corpus.jsonl"
DS_VERSION = "1.5.0"
POS_CLASSES = ["A", "B", "C", "D", "E", "F", "G"]
CLASS_NAMES = {
    "A": "short labels in prose",
    "B": "SQL password clauses",
    "C": "CLI flags / API args",
    "D": "vendor tokens",
    "E": "URLs, headers, conn strings",
    "F": "code constructs",
    "G": "private keys",
}
FLAG_CATEGORIES = {"secret", "entropy"}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def load_corpus(path):
    entries = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            line = line.strip()
            if not line:
                continue
            e = json.loads(line)
            if e.get("class") not in POS_CLASSES + ["N"]:
                raise SystemExit(f"{path}:{n}: unknown class {e.get('class')!r}")
            entries.append(e)
    return entries


# --------------------------------------------------------------------------
# detect-secrets

def ensure_detect_secrets():
    venv_dir = Path(os.environ.get("TOOLGATE_BENCH_VENV") or "/tmp/toolgate-bench-venv")
    exe = venv_dir / "bin" / "detect-secrets"
    py = venv_dir / "bin" / "python"

    def installed_version():
        if not exe.exists():
            return None
        r = subprocess.run([str(exe), "--version"], capture_output=True, text=True)
        return r.stdout.strip() if r.returncode == 0 else None

    if installed_version() != DS_VERSION:
        if not py.exists():
            log(f"creating venv {venv_dir}")
            subprocess.run([sys.executable, "-m", "venv", str(venv_dir)], check=True)
        log(f"installing detect-secrets=={DS_VERSION} into {venv_dir}")
        subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        f"detect-secrets=={DS_VERSION}"], check=True)
        got = installed_version()
        if got != DS_VERSION:
            raise SystemExit(f"detect-secrets in {venv_dir} reports version {got!r}, wanted {DS_VERSION}")
    return exe


def run_detect_secrets(entries):
    exe = ensure_detect_secrets()
    tmp = Path(tempfile.mkdtemp(prefix="toolgate-ds-"))
    try:
        names = {}
        for i, e in enumerate(entries):
            fn = f"{i:06d}.txt"
            names[fn] = i
            (tmp / fn).write_text(e["text"] + "\n", encoding="utf-8")
        log(f"detect-secrets: scanning {len(entries)} files")
        t0 = time.monotonic()
        r = subprocess.run([str(exe), "scan", "--all-files", "."], cwd=tmp, capture_output=True, text=True)
        secs = time.monotonic() - t0
        if r.returncode != 0:
            raise SystemExit(f"detect-secrets failed ({r.returncode}): {r.stderr[-2000:]}")
        report = json.loads(r.stdout)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    flagged = [False] * len(entries)
    types = [[] for _ in entries]
    for fn, results in report.get("results", {}).items():
        i = names.get(os.path.basename(fn))
        if i is None or not results:
            continue
        flagged[i] = True
        types[i] = sorted({res.get("type", "?") for res in results})
    return {"seconds": secs, "flagged": flagged, "caught": flagged, "types": types}


# --------------------------------------------------------------------------
# toolgate

def find_toolgate(explicit):
    if explicit:
        p = Path(explicit)
        return p if p.exists() else None
    for p in (ROOT / "target" / "release" / "toolgate", ROOT / "target" / "debug" / "toolgate"):
        if p.exists():
            return p
    return None


def run_toolgate(binary, config, entries):
    cmd = [str(binary), "redact"]
    if config:
        cmd += ["--config", str(config)]
    cmd.append("--jsonl")
    stdin = "".join(json.dumps(e["text"], ensure_ascii=False) + "\n" for e in entries)
    log(f"toolgate: {' '.join(cmd)} ({len(entries)} lines)")
    t0 = time.monotonic()
    r = subprocess.run(cmd, input=stdin, capture_output=True, text=True, encoding="utf-8")
    secs = time.monotonic() - t0
    if r.returncode != 0:
        return {"error": f"exit {r.returncode}: {r.stderr.strip()[-1500:]}"}
    lines = [l for l in r.stdout.split("\n") if l.strip()]
    if len(lines) != len(entries):
        return {"error": f"expected {len(entries)} output lines, got {len(lines)}"}
    caught, flagged, kinds = [], [], []
    for i, (e, line) in enumerate(zip(entries, lines)):
        try:
            out = json.loads(line)
            masked = out["masked"]
            findings = out.get("findings") or []
        except (ValueError, KeyError, TypeError) as exc:
            return {"error": f"output line {i + 1} is not {{masked, findings}}: {exc}: {line[:200]}"}
        hit = [f for f in findings if f.get("category") in FLAG_CATEGORIES]
        flagged.append(bool(hit))
        kinds.append(sorted({f.get("kind", "?") for f in hit}))
        if e["class"] == "N":
            caught.append(False)
        else:
            caught.append(all(s not in masked for s in e["secrets"]))
    return {"seconds": secs, "flagged": flagged, "caught": caught, "types": kinds}


# --------------------------------------------------------------------------
# scoring

def ratio(a, b):
    return round(a / b, 4) if b else None


def score(entries, run):
    neg = [i for i, e in enumerate(entries) if e["class"] == "N"]
    fp = sum(1 for i in neg if run["flagged"][i])
    classes = OrderedDict()
    tp_all = n_all = flag_all = 0
    for c in POS_CLASSES:
        idx = [i for i, e in enumerate(entries) if e["class"] == c]
        tp = sum(1 for i in idx if run["caught"][i])
        fl = sum(1 for i in idx if run["flagged"][i])
        # Negatives written against this class (their `against` field) that the tool flagged.
        neg_c = [i for i in neg if entries[i].get("against") == c]
        fp_c = sum(1 for i in neg_c if run["flagged"][i])
        classes[c] = {"n": len(idx), "caught": tp, "recall": ratio(tp, len(idx)),
                      "flagged": fl, "flagged_rate": ratio(fl, len(idx)),
                      "negatives": len(neg_c), "false_positives": fp_c,
                      "precision": ratio(tp, tp + fp_c)}
        tp_all, n_all, flag_all = tp_all + tp, n_all + len(idx), flag_all + fl
    return {
        "seconds": round(run["seconds"], 3),
        "classes": classes,
        "overall": {"n": n_all, "caught": tp_all, "recall": ratio(tp_all, n_all),
                    "flagged": flag_all, "flagged_rate": ratio(flag_all, n_all),
                    "precision": ratio(tp_all, tp_all + fp)},
        "negatives": {"n": len(neg), "false_positives": fp, "fp_rate": ratio(fp, len(neg))},
    }


def by_kind(entries, run):
    tally = defaultdict(lambda: [0, 0])
    for i, e in enumerate(entries):
        k = (e["class"], e["kind"].split("/")[0])
        tally[k][0] += 1
        hit = run["flagged"][i] if e["class"] == "N" else run["caught"][i]
        tally[k][1] += 1 if hit else 0
    return {f"{c}/{k}": {"n": n, "hit": h} for (c, k), (n, h) in sorted(tally.items())}


def pct(x):
    return "-" if x is None else f"{100 * x:.1f}%"


def markdown(res):
    tools = [t for t in ("detect-secrets", "toolgate") if "classes" in res["tools"].get(t, {})]
    out = [f"Corpus: `{res['corpus']}` ({res['positives']} positives, {res['negatives']} negatives)", ""]
    hdr = "| class | n | negatives |" + "".join(
        f" {t} recall | {t} precision |" for t in tools)
    out += [hdr, "|" + "---|" * (hdr.count("|") - 1)]
    for c in POS_CLASSES + ["all"]:
        row_name = f"{c} {CLASS_NAMES[c]}" if c != "all" else "**all positives**"
        n = res["counts"][c] if c != "all" else res["positives"]
        negs = res["negatives"] if c == "all" else sum(
            1 for _ in range(res["against"].get(c, 0)))
        row = f"| {row_name} | {n} | {negs} |"
        for t in tools:
            d = res["tools"][t]["overall"] if c == "all" else res["tools"][t]["classes"][c]
            fp = d.get("false_positives", res["tools"][t]["negatives"]["false_positives"])
            row += f" {pct(d['recall'])} ({d['caught']}) | {pct(d['precision'])} ({fp} FP) |"
        out.append(row)
    out += ["", "| tool | FP on negatives | FP rate | overall precision | overall recall | wall clock |",
            "|---|---|---|---|---|---|"]
    for t in tools:
        d = res["tools"][t]
        out.append(f"| {t} | {d['negatives']['false_positives']} / {d['negatives']['n']} | "
                   f"{pct(d['negatives']['fp_rate'])} | {pct(d['overall']['precision'])} | "
                   f"{pct(d['overall']['recall'])} | {d['seconds']:.2f} s |")
    for t, d in res["tools"].items():
        if "error" in d or "skipped" in d:
            out += ["", f"**{t}**: {d.get('error') or d.get('skipped')}"]
    if res.get("by_kind"):
        out += ["", "| class/kind | n | " + " | ".join(f"{t} hit" for t in tools) + " |",
                "|---|---|" + "---|" * len(tools)]
        keys = next(iter(res["by_kind"].values())).keys()
        for k in keys:
            n = next(iter(res["by_kind"].values()))[k]["n"]
            out.append(f"| {k} | {n} | " + " | ".join(str(res["by_kind"][t][k]["hit"]) for t in tools) + " |")
        out.append("")
        out.append("(hit = caught for positives, false positive for N)")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description="toolgate vs detect-secrets on the secrets corpus")
    ap.add_argument("--toolgate", help="toolgate binary (default target/release/toolgate, else target/debug/toolgate)")
    ap.add_argument("--config", help="passed to `toolgate redact --config`")
    ap.add_argument("--corpus", default=str(CORPUS))
    ap.add_argument("--json", action="store_true", help="print the numbers as JSON instead of markdown")
    ap.add_argument("--skip-detect-secrets", action="store_true")
    ap.add_argument("--by-kind", action="store_true", help="also break results down per template kind")
    args = ap.parse_args()

    entries = load_corpus(args.corpus)
    res = {"corpus": str(args.corpus),
           "positives": sum(1 for e in entries if e["class"] != "N"),
           "negatives": sum(1 for e in entries if e["class"] == "N"),
           "counts": {c: sum(1 for e in entries if e["class"] == c) for c in POS_CLASSES + ["N"]},
           "against": {c: sum(1 for e in entries if e.get("against") == c) for c in POS_CLASSES},
           "tools": OrderedDict()}
    runs = {}

    if args.skip_detect_secrets:
        res["tools"]["detect-secrets"] = {"skipped": "skipped (--skip-detect-secrets)"}
    else:
        runs["detect-secrets"] = run_detect_secrets(entries)
        res["tools"]["detect-secrets"] = {"version": DS_VERSION, **score(entries, runs["detect-secrets"])}

    binary = find_toolgate(args.toolgate)
    if binary is None:
        res["tools"]["toolgate"] = {"skipped": "no toolgate binary found (build it or pass --toolgate PATH)"}
    else:
        run = run_toolgate(binary, args.config, entries)
        if "error" in run:
            res["tools"]["toolgate"] = {"binary": str(binary), "error": run["error"]}
        else:
            runs["toolgate"] = run
            res["tools"]["toolgate"] = {"binary": str(binary), **score(entries, run)}

    if args.by_kind:
        res["by_kind"] = {t: by_kind(entries, r) for t, r in runs.items()}

    if args.json:
        print(json.dumps(res, indent=2))
    else:
        print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
