#!/usr/bin/env python3
"""Generate the client libraries' response types from docs/openapi.json.

Writes clients/python/src/toolgate/models.py (TypedDicts) and clients/typescript/src/models.ts
(interfaces) from the same schemas, so that both clients type exactly what the sidecar's
published API document says. `--check` writes nothing and fails when either file differs from
what would be generated (the client test suites run it).
"""

from __future__ import annotations

import argparse
import json
import keyword
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OPENAPI = ROOT / "docs" / "openapi.json"
PY_OUT = ROOT / "clients" / "python" / "src" / "toolgate" / "models.py"
TS_OUT = ROOT / "clients" / "typescript" / "src" / "models.ts"

# The component schemas the clients return, in dependency order.
COMPONENTS = [
    "Risk",
    "Advice",
    "Rate",
    "Limits",
    "Violation",
    "Decision",
    "Approval",
    "ExecResult",
    "Screened",
    "Error",
    "ConversationSignals",
    "AuditEntry",
    "AuditRecord",
]
# Component types renamed in the clients (`Error` would shadow JavaScript's own).
RENAMED = {"Error": "ErrorBody"}
# Answers described inline in a path: (type name, path, method, status).
INLINE = [
    ("ResultReport", "/v1/results", "post", "200"),
    ("AuditPage", "/v1/audit", "get", "200"),
    ("ApprovalList", "/v1/approvals", "get", "200"),
]


class Model:
    """One object type: its name, doc, and fields (name, type node, required, doc)."""

    def __init__(self, name: str, doc: str):
        self.name = name
        self.doc = doc
        self.fields: list[tuple[str, dict, bool, str]] = []
        # A schema that is not an object (an enum) becomes a type alias.
        self.alias: dict | None = None


def collect(name: str, schema: dict, out: list[Model]) -> None:
    model = Model(name, schema.get("description", ""))
    if "properties" not in schema and schema.get("type") != "object":
        model.alias = schema
        out.append(model)
        return
    required = set(schema.get("required", []))
    for field, sub in schema.get("properties", {}).items():
        if sub.get("type") == "object" and "properties" in sub:
            nested = name + "".join(p.capitalize() for p in field.split("_"))
            collect(nested, sub, out)
            sub = {
                "$ref": "#/components/schemas/" + nested,
                "description": sub.get("description", ""),
            }
        elif any(
            alt.get("type") == "object" and "properties" in alt for alt in sub.get("oneOf", [])
        ):
            nested = name + "".join(p.capitalize() for p in field.split("_"))
            alts = []
            for alt in sub["oneOf"]:
                if alt.get("type") == "object" and "properties" in alt:
                    collect(nested, alt, out)
                    alts.append({"$ref": "#/components/schemas/" + nested})
                else:
                    alts.append(alt)
            sub = {"oneOf": alts, "description": sub.get("description", "")}
        model.fields.append((field, sub, field in required, sub.get("description", "")))
    out.append(model)


def models() -> list[Model]:
    api = json.loads(OPENAPI.read_text())
    out: list[Model] = []
    for name in COMPONENTS:
        collect(RENAMED.get(name, name), api["components"]["schemas"][name], out)
    for name, path, method, status in INLINE:
        schema = api["paths"][path][method]["responses"][status]["content"]["application/json"]
        collect(name, schema["schema"], out)
    return out


def ref_name(node: dict) -> str:
    name = node["$ref"].rsplit("/", 1)[-1]
    return RENAMED.get(name, name)


def py_type(node: dict) -> str:
    if "$ref" in node:
        return ref_name(node)
    if "const" in node:
        return f"Literal[{node['const']!r}]"
    if "enum" in node:
        return "Literal[" + ", ".join(repr(v) for v in node["enum"]) + "]"
    if "oneOf" in node:
        return " | ".join(py_type(alt) for alt in node["oneOf"])
    t = node.get("type")
    if isinstance(t, list):
        return " | ".join(py_type({**node, "type": one}) for one in t)
    if t == "string":
        return "str"
    if t == "integer":
        return "int"
    if t == "number":
        return "float"
    if t == "boolean":
        return "bool"
    if t == "null":
        return "None"
    if t == "array":
        return f"list[{py_type(node.get('items', {}))}]"
    if t == "object":
        return "dict[str, Any]"
    return "Any"


def ts_type(node: dict) -> str:
    if "$ref" in node:
        return ref_name(node)
    if "const" in node:
        return json.dumps(node["const"])
    if "enum" in node:
        return " | ".join(json.dumps(v) for v in node["enum"])
    if "oneOf" in node:
        return " | ".join(ts_type(alt) for alt in node["oneOf"])
    t = node.get("type")
    if isinstance(t, list):
        return " | ".join(ts_type({**node, "type": one}) for one in t)
    if t == "string":
        return "string"
    if t in ("integer", "number"):
        return "number"
    if t == "boolean":
        return "boolean"
    if t == "null":
        return "null"
    if t == "array":
        inner = ts_type(node.get("items", {}))
        return f"Array<{inner}>"
    if t == "object":
        return "Record<string, unknown>"
    return "unknown"


def one_line(text: str) -> str:
    return " ".join(text.split())


def render_python(ms: list[Model]) -> str:
    lines = [
        '"""Response types of the toolgate HTTP API.',
        "",
        "Generated from docs/openapi.json by clients/gen_models.py; do not edit by hand.",
        '"""',
        "",
        "from typing import Any, Literal, NotRequired, TypedDict",
        "",
        "__all__ = [" + ", ".join(json.dumps(m.name) for m in ms) + "]",
        "",
    ]
    for m in ms:
        if m.alias is not None:
            lines += ["", f"{m.name} = {py_type(m.alias)}", ""]
            continue
        lines += ["", f"class {m.name}(TypedDict):"]
        if m.doc:
            lines.append(f'    """{one_line(m.doc)}"""')
            lines.append("")
        for field, node, required, doc in m.fields:
            assert field.isidentifier() and not keyword.iskeyword(field), field
            # Quoted, so types may refer to ones defined later; NotRequired stays outside the
            # quotes, where TypedDict sees it.
            t = f'"{py_type(node)}"'
            if not required:
                t = f"NotRequired[{t}]"
            if doc:
                lines.append(f"    # {one_line(doc)}")
            lines.append(f"    {field}: {t}")
        if not m.fields:
            lines.append("    pass")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def render_ts(ms: list[Model]) -> str:
    lines = [
        "// Response types of the toolgate HTTP API.",
        "// Generated from docs/openapi.json by clients/gen_models.py; do not edit by hand.",
        "",
    ]
    for m in ms:
        if m.doc:
            lines.append(f"/** {one_line(m.doc)} */")
        if m.alias is not None:
            lines += [f"export type {m.name} = {ts_type(m.alias)};", ""]
            continue
        lines.append(f"export interface {m.name} {{")
        for field, node, required, doc in m.fields:
            if doc:
                lines.append(f"  /** {one_line(doc)} */")
            lines.append(f"  {field}{'' if required else '?'}: {ts_type(node)};")
        lines += ["}", ""]
    return "\n".join(lines).rstrip() + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when a file is not current")
    args = parser.parse_args()
    ms = models()
    stale = []
    for path, text in ((PY_OUT, render_python(ms)), (TS_OUT, render_ts(ms))):
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(path.relative_to(ROOT))
        else:
            path.write_text(text)
    if stale:
        for path in stale:
            print(f"error: {path} is not what docs/openapi.json generates", file=sys.stderr)
        print("run `python3 clients/gen_models.py` and commit the result", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
