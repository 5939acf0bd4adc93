#!/usr/bin/env python3
"""Secret detection on public data the team did not write: toolgate next to
detect-secrets and CredSweeper, on the same files.

    python3 benches/secrets/public.py [--toolgate PATH] [--skip-peers] [--json]
                                      [--min-recall R] [--min-precision P]

The data comes from package registries, pinned by SHA-256, and is cached in
${TOOLGATE_PEERS_CACHE:-/tmp/toolgate-peers}:

* gitleaks 8.16.0 (Debian's orig tarball): the true and false positives each
  rule's Go source checks itself against (cmd/generate/config/rules/*.go). The
  Go expressions are evaluated here: `secrets.NewSecret(re)` draws a random
  string for the regex (with `rstr`, fixed seed), `generateSampleSecret(id, s)`
  writes `id_api_token = "s"` as gitleaks does. A positive whose drawn values
  are known is "removed" when no 8-character piece of them is left.
* ripsecrets 0.1.9 (crates.io): test/one_per_line (every line a secret),
  test/one_per_file (every file one) and test/none (every line clean). A line
  whose only reason to be clean is a ripsecrets pragma is left out.
* Django 4.2.16 (PyPI): every line of the 75 `django/**/*.py` files that mention
  a password, secret, token, credential or API key. Framework code that handles
  credentials and holds none: the hard negatives.

Every tool scans every file once (toolgate: `toolgate redact --jsonl`, one
process; the peers: one scan of the directory, default settings). A unit (a
line, or a whole one_per_file file or gitleaks entry) is flagged when a
finding of category secret/entropy (toolgate) or any result (peers) lies on it.
recall = flagged positives / positives; precision = flagged positives /
(flagged positives + flagged negatives). Exits 1 when toolgate is below
--min-recall or --min-precision, 0 otherwise.
"""

import argparse
import hashlib
import io
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("TOOLGATE_PEERS_CACHE") or "/tmp/toolgate-peers")
SOURCES = {
    "gitleaks": ("http://deb.debian.org/debian/pool/main/g/gitleaks/gitleaks_8.16.0.orig.tar.gz",
                 "71aace87a76d966a918031588a63127303b375085a39d5b8d2af02105f2118d8"),
    "ripsecrets": ("https://static.crates.io/crates/ripsecrets/ripsecrets-0.1.9.crate",
                   "f6d49a98d63d41f211b37b4766bd44b3eca5b5099f07e99f8df766f28782dfb4"),
    "django": ("https://files.pythonhosted.org/packages/65/d8/a607ee443b54a4db4ad28902328b906ae6218aa556fb9b3ac45c0bcb313d/Django-4.2.16.tar.gz",
               "6f1616c2786c408ce86ab7e10f792b8f15742f7b7b7460243929cb371e7f1dad"),
}
PEERS = {"detect-secrets": "detect-secrets==1.5.0", "credsweeper": "credsweeper==1.19.5"}
CREDENTIAL_WORDS = re.compile(r"passw|secret|token|credential|api_?key", re.I)
PRAGMA = re.compile(r"pragma: allowlist secret")
SEED = 20261129
SKIPPED = []  # gitleaks entries the evaluator cannot read or draw


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def archive(name):
    url, sha = SOURCES[name]
    path = CACHE / Path(url).name
    if not path.exists() or hashlib.sha256(path.read_bytes()).hexdigest() != sha:
        CACHE.mkdir(parents=True, exist_ok=True)
        log(f"fetching {url}")
        with urllib.request.urlopen(url, timeout=120) as r:
            data = r.read()
        got = hashlib.sha256(data).hexdigest()
        if got != sha:
            raise SystemExit(f"{url}: sha256 {got}, expected {sha}")
        path.write_bytes(data)
    return tarfile.open(path, "r:gz")


def members(tar, keep):
    for m in tar.getmembers():
        if m.isfile() and keep(m.name):
            yield m.name, tar.extractfile(m).read().decode("utf-8", "replace")


# ---------------------------------------------------------------- gitleaks
# A small evaluator for the Go expressions in the tps/fps lists.

GO_TOKEN = re.compile(r'\s*(?:(?P<str>"(?:[^"\\\n]|\\.)*")|(?P<raw>`[^`]*`)|(?P<id>[A-Za-z_][\w.]*)'
                      r'|(?P<op>[()+,]))', re.S)
HELPERS = {
    "numeric": "[0-9]{%s}", "hex": "[a-f0-9]{%s}", "alphaNumeric": "[a-z0-9]{%s}",
    "alphaNumericExtendedShort": "[a-z0-9_-]{%s}", "alphaNumericExtended": r"[a-z0-9=_\-]{%s}",
    "alphaNumericExtendedLong": r"[a-z0-9\/=_\+\-]{%s}",
}


class Unsupported(Exception):
    pass


def go_tokens(src):
    pos, out = 0, []
    while pos < len(src):
        if not src[pos:].strip():
            break
        m = GO_TOKEN.match(src, pos)
        if not m:
            raise Unsupported(src[pos:pos + 20])
        kind = m.lastgroup
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


def go_eval(tokens, rng, drawn):
    """Evaluates `a + b + f(x, y)`; returns (string, rest)."""
    def atom(toks):
        kind, val = toks[0]
        if kind == "str":
            return json.loads(val.replace("\\'", "'")), toks[1:]
        if kind == "raw":
            return val[1:-1], toks[1:]
        if (kind, val) == ("op", "("):
            v, toks = expr(toks[1:])
            return v, toks[1:]
        if kind == "id" and len(toks) > 1 and toks[1] == ("op", "("):
            args, toks = [], toks[2:]
            while toks and toks[0] != ("op", ")"):
                v, toks = expr(toks)
                args.append(v)
                if toks and toks[0] == ("op", ","):
                    toks = toks[1:]
            return call(val, args), toks[1:]
        raise Unsupported(val)

    def expr(toks):
        v, toks = atom(toks)
        while toks and toks[0] == ("op", "+"):
            w, toks = atom(toks[1:])
            v += w
        return v, toks

    def call(name, args):
        if name in HELPERS:
            return HELPERS[name] % args[0]
        if name == "hex8_4_4_4_12":
            return "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
        if name == "generateSampleSecret":
            return f'{args[0]}_api_token = "{args[1]}"'
        if name == "fmt.Sprintf":
            parts = args[0].split("%s")
            return "".join(p + (args[k + 1] if k + 1 < len(args) else "") for k, p in enumerate(parts))
        if name == "secrets.NewSecret":
            import rstr
            # A `-` that ends a class is a literal; rstr wants it escaped.
            pattern = re.sub(r"(?<!\\)-\]", r"\\-]", args[0].replace("(?i)", ""))
            value = rstr.Rstr(rng).xeger(pattern)
            drawn.append(value)
            return value
        raise Unsupported(name)

    return expr(tokens)


def go_list(src, start):
    """The elements of the `[]string{...}` literal at src[start:], as token lists."""
    depth, items, cur = 0, [], []
    for kind, val in go_tokens_upto_brace(src, start):
        if (kind, val) == ("op", ",") and depth == 0:
            items.append(cur)
            cur = []
            continue
        depth += {"(": 1, ")": -1}.get(val, 0) if kind == "op" else 0
        cur.append((kind, val))
    if cur:
        items.append(cur)
    return items


def go_tokens_upto_brace(src, start):
    # Comments go first; `//` inside strings does not occur in these lists' strings
    # except in URLs, which are kept by only stripping comments that follow a comma.
    body, i = [], start
    while i < len(src):
        c = src[i]
        if c in "\"`":
            end = src.index(c, i + 1) if c == "`" else re.match(r'"(?:[^"\\\n]|\\.)*"', src[i:]).end() + i - 1
            body.append(src[i:end + 1])
            i = end + 1
            continue
        if src.startswith("//", i):
            i = src.index("\n", i)
            continue
        if c == "}":
            break
        body.append(c)
        i += 1
    return go_tokens("".join(body))


def gitleaks_units():
    rng = random.Random(SEED)
    units = []
    tar = archive("gitleaks")
    for name, src in sorted(members(tar, lambda n: "/cmd/generate/config/rules/" in n and n.endswith(".go"))):
        for m in re.finditer(r"\b(tps|fps)\s*:?=\s*\[\]string\{", src):
            positive = m.group(1) == "tps"
            for n, toks in enumerate(go_list(src, m.end())):
                drawn = []
                try:
                    text, rest = go_eval(toks, rng, drawn)
                except (Unsupported, ValueError, IndexError) as e:
                    SKIPPED.append(f"{Path(name).stem}/{m.group(1)}/{n}")
                    log(f"gitleaks {Path(name).name}: entry {n} skipped ({e})")
                    continue
                units.append({"source": "gitleaks", "id": f"{Path(name).stem}/{m.group(1)}/{n}",
                              "text": text, "positive": positive, "values": drawn})
    return units


# ---------------------------------------------------------------- ripsecrets, django

def ripsecrets_units():
    units = []
    for name, text in sorted(members(archive("ripsecrets"), lambda n: "/test/" in n)):
        rel = name.split("/test/", 1)[1]
        if rel.startswith("one_per_file/"):
            units.append({"source": "ripsecrets", "id": rel, "text": text, "positive": True, "values": []})
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip() or (rel == "none" and PRAGMA.search(line)):
                continue
            units.append({"source": "ripsecrets", "id": f"{rel}:{n}", "text": line,
                          "positive": rel != "none", "values": []})
    return units


def django_files():
    keep = lambda n: n.endswith(".py") and "/django/" in n and "/locale/" not in n
    return [(name.split("/", 1)[1], text) for name, text in sorted(members(archive("django"), keep))
            if CREDENTIAL_WORDS.search(text)]


# ---------------------------------------------------------------- the layout on disk
# Every unit of gitleaks/ripsecrets becomes its own file; every Django file is kept
# whole and each of its lines is a negative unit.

def layout(units, files, root):
    """Writes the files; returns [(relpath, text, [(unit index or None, first line, last line)])]."""
    docs = []
    for i, u in enumerate(units):
        rel = f"{u['source']}/{i:05d}.txt"
        lines = u["text"].count("\n") + 1
        docs.append((rel, u["text"], [(i, 1, lines)]))
    for rel, text in files:
        base = len(units)
        for n, line in enumerate(text.splitlines(), 1):
            units.append({"source": "django", "id": f"{rel}:{n}", "text": line, "positive": False, "values": []})
        docs.append(("django/" + rel, text, [(base + k, k + 1, k + 1) for k in range(text.count("\n") + 1)
                                             if base + k < len(units)]))
    for rel, text, _ in docs:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    return docs


def flag_units(docs, hits, n_units):
    """hits: {relpath: set(line numbers)} -> list of bools per unit."""
    flagged = [False] * n_units
    for rel, _, spans in docs:
        lines = hits.get(rel)
        if not lines:
            continue
        for idx, first, last in spans:
            if any(first <= ln <= last for ln in lines):
                flagged[idx] = True
    return flagged


# ---------------------------------------------------------------- the tools

def run_toolgate(binary, docs, n_units, units):
    stdin = "".join(json.dumps(text) + "\n" for _, text, _ in docs)
    t0 = time.monotonic()
    r = subprocess.run([binary, "redact", "--jsonl"], input=stdin, capture_output=True, text=True,
                       encoding="utf-8")
    seconds = time.monotonic() - t0
    if r.returncode != 0:
        raise SystemExit(f"toolgate redact failed: {r.stderr}")
    answers = [json.loads(l) for l in r.stdout.splitlines()]
    hits, removed = {}, [None] * n_units
    for (rel, text, spans), ans in zip(docs, answers):
        raw = text.encode("utf-8")
        lines = {raw.count(b"\n", 0, f["start"]) + 1 for f in ans["findings"]
                 if f["category"] in ("secret", "entropy")}
        hits[rel] = lines
        for idx, _, _ in spans:
            vals = units[idx]["values"]
            if vals:
                removed[idx] = not any(v[k:k + 8] in ans["masked"] for v in vals
                                       for k in range(max(1, len(v) - 7)))
    return {"flagged": flag_units(docs, hits, n_units), "removed": removed, "seconds": seconds}


def peer_exe(name):
    venv = Path(os.environ.get("TOOLGATE_BENCH_VENV") or "/tmp/toolgate-bench-venv")
    exe = venv / "bin" / name
    if not exe.exists() or not (venv / f".{name}-ok").exists():
        if not (venv / "bin" / "python").exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                        "--disable-pip-version-check", PEERS[name]], check=True)
        (venv / f".{name}-ok").write_text(PEERS[name])
    return str(exe)


def run_detect_secrets(root, docs, n_units):
    t0 = time.monotonic()
    r = subprocess.run([peer_exe("detect-secrets"), "scan", "--all-files", "."], cwd=root,
                       capture_output=True, text=True)
    seconds = time.monotonic() - t0
    if r.returncode != 0:
        raise SystemExit(f"detect-secrets failed: {r.stderr[-2000:]}")
    hits = {rel: {x["line_number"] for x in found} for rel, found in json.loads(r.stdout)["results"].items()}
    return {"flagged": flag_units(docs, hits, n_units), "seconds": seconds}


def run_credsweeper(root, docs, n_units):
    out = root.parent / "credsweeper.json"
    t0 = time.monotonic()
    r = subprocess.run([peer_exe("credsweeper"), "--path", str(root), "--save-json", str(out)],
                       capture_output=True, text=True)
    seconds = time.monotonic() - t0
    if r.returncode != 0 or not out.exists():
        raise SystemExit(f"credsweeper failed: {r.stderr[-2000:]}")
    hits = {}
    for cand in json.loads(out.read_text()):
        for ld in cand["line_data_list"]:
            rel = str(Path(ld["path"]).resolve().relative_to(root.resolve()))
            hits.setdefault(rel, set()).add(ld["line_num"])
    return {"flagged": flag_units(docs, hits, n_units), "seconds": seconds}


# ---------------------------------------------------------------- scoring

def score(units, run):
    out = {}
    for src in ("gitleaks", "ripsecrets", "django", "all"):
        idx = [i for i, u in enumerate(units) if src in ("all", u["source"])]
        pos = [i for i in idx if units[i]["positive"]]
        neg = [i for i in idx if not units[i]["positive"]]
        tp = sum(run["flagged"][i] for i in pos)
        fp = sum(run["flagged"][i] for i in neg)
        row = {"positives": len(pos), "negatives": len(neg), "tp": tp, "fp": fp,
               "recall": tp / len(pos) if pos else None,
               "precision": tp / (tp + fp) if tp + fp else None}
        if "removed" in run:
            known = [i for i in pos if run["removed"][i] is not None]
            row["removed"] = sum(run["removed"][i] for i in known) / len(known) if known else None
            row["known"] = len(known)
        out[src] = row
    out["seconds"] = round(run["seconds"], 2)
    return out


def pct(x):
    return "-" if x is None else f"{100 * x:.1f}%"


def markdown(res):
    tools = list(res["tools"])
    out = ["| data | positives | negatives |" + "".join(f" {t} recall | {t} precision |" for t in tools),
           "|---|---|---|" + "---|---|" * len(tools)]
    for src in ("gitleaks", "ripsecrets", "django", "all"):
        r0 = res["tools"][tools[0]][src]
        row = f"| {src} | {r0['positives']} | {r0['negatives']} |"
        for t in tools:
            d = res["tools"][t][src]
            row += f" {pct(d['recall'])} ({d['tp']}) | {pct(d['precision'])} ({d['fp']} FP) |"
        out.append(row)
    tg = res["tools"].get("toolgate", {}).get("gitleaks", {})
    out += ["", f"gitleaks entries left out (built from Go variables, or a regex rstr cannot draw): "
                f"{len(SKIPPED)} ({', '.join(SKIPPED)}).",
            f"toolgate removed every 8-character piece of the drawn value in "
                f"{pct(tg.get('removed'))} of the {tg.get('known')} gitleaks positives whose value is known.",
            "wall clock: " + ", ".join(f"{t} {res['tools'][t]['seconds']} s" for t in tools)]
    return "\n".join(out)


def venv_python():
    """The bench venv's python, with rstr (and, unless skipped, the peers) in it."""
    venv = Path(os.environ.get("TOOLGATE_BENCH_VENV") or "/tmp/toolgate-bench-venv")
    py = venv / "bin" / "python"
    if not (venv / ".rstr-ok").exists():
        if not py.exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        "rstr==3.2.2"], check=True)
        (venv / ".rstr-ok").write_text("rstr")
    return py


def main():
    try:
        import rstr  # noqa: F401
    except ImportError:
        py = venv_python()
        os.execv(str(py), [str(py), __file__] + sys.argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--toolgate", default=str(ROOT / "target" / "debug" / "toolgate"))
    ap.add_argument("--skip-peers", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--misses", action="store_true", help="list toolgate's misses and false positives")
    ap.add_argument("--min-recall", type=float, default=0.0)
    ap.add_argument("--min-precision", type=float, default=0.0)
    args = ap.parse_args()

    units = gitleaks_units() + ripsecrets_units()
    files = django_files()
    tmp = Path(tempfile.mkdtemp(prefix="toolgate-public-"))
    try:
        root = tmp / "data"
        docs = layout(units, files, root)
        runs = {"toolgate": run_toolgate(args.toolgate, docs, len(units), units)}
        if not args.skip_peers:
            runs["detect-secrets"] = run_detect_secrets(root, docs, len(units))
            runs["credsweeper"] = run_credsweeper(root, docs, len(units))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    res = {"tools": {t: score(units, r) for t, r in runs.items()}}
    if args.misses:
        tg = runs["toolgate"]
        for i, u in enumerate(units):
            if u["positive"] != tg["flagged"][i] or tg["removed"][i] is False:
                what = "miss" if u["positive"] and not tg["flagged"][i] else (
                    "partial" if u["positive"] else "false positive")
                print(f"{what}\t{u['source']}\t{u['id']}\t{u['text'][:160]!r}")
    print(json.dumps(res, indent=1) if args.json else markdown(res))
    overall = res["tools"]["toolgate"]["all"]
    if overall["recall"] < args.min_recall or (overall["precision"] or 0) < args.min_precision:
        log(f"toolgate below the floor: recall {pct(overall['recall'])} (min {pct(args.min_recall)}), "
            f"precision {pct(overall['precision'])} (min {pct(args.min_precision)})")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
