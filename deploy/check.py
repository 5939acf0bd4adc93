#!/usr/bin/env python3
"""CI for deploy/: the Kubernetes manifests validate against the Kubernetes OpenAPI schemas
(kubernetes-validate, strict: unknown fields are errors), the policies ConfigMap is what
gen_policies.py writes, and the pod's toolgate config, policies and tokens, taken out of the
manifests, load in the real binary, which then serves and answers /readyz. The compose file
must parse and mount only paths that exist. The alert rules pass `promtool check rules` and
their unit tests, and every metric the rules and the Grafana dashboard name is one toolgate
exports. Usage: check.py <toolgate binary> <kubernetes-validate> <promtool>."""

import json
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import yaml  # PyYAML, installed with kubernetes-validate

DEPLOY = pathlib.Path(__file__).resolve().parent
ROOT = DEPLOY.parent
MANIFESTS = sorted((DEPLOY / "k8s").glob("*.yaml"))


def fail(msg: str) -> None:
    sys.exit(f"error: {msg}")


def main() -> None:
    toolgate, validator, promtool = sys.argv[1], sys.argv[2], sys.argv[3]
    check_monitoring(promtool)
    subprocess.run([sys.executable, str(DEPLOY / "k8s" / "gen_policies.py"), "--check"], check=True)
    run = subprocess.run([validator, "--strict", *map(str, MANIFESTS)], capture_output=True, text=True)
    print(run.stdout + run.stderr, end="")
    if run.returncode != 0:
        fail("the Kubernetes manifests do not validate")

    docs = {}
    for m in MANIFESTS:
        for doc in yaml.safe_load_all(m.read_text()):
            docs[(doc["kind"], doc["metadata"]["name"])] = doc
    config = docs[("ConfigMap", "toolgate-config")]["data"]["toolgate.toml"]
    policies = docs[("ConfigMap", "toolgate-policies")]["data"]
    secret = docs[("Secret", "toolgate-tokens")]["stringData"]["tokens.json"]
    pod = docs[("Deployment", "agent")]["spec"]["template"]["spec"]
    mounts = {m["name"]: m["mountPath"] for c in pod["containers"] for m in c.get("volumeMounts", [])}
    if mounts.get("policies") != "/etc/toolgate/policies" or mounts.get("tokens") != "/etc/toolgate/tokens":
        fail(f"the pod mounts do not match the config's paths: {mounts}")

    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        etc = root / "etc/toolgate"
        (etc / "policies").mkdir(parents=True)
        (etc / "tokens").mkdir()
        shutil.copytree(ROOT / "schemas", etc / "schemas")  # the image's (Dockerfile)
        for name, text in policies.items():
            (etc / "policies" / name).write_text(text)
        (etc / "tokens" / "tokens.json").write_text(secret)
        json.loads(secret)
        text = config.replace("/etc/toolgate", str(etc)).replace("/var/lib/toolgate", str(root / "data"))
        text = text.replace("/var/log/toolgate", str(root / "log"))
        cfg = root / "toolgate.toml"
        cfg.write_text(text)
        subprocess.run([toolgate, "validate", "--config", str(cfg)], check=True)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        proc = subprocess.Popen([toolgate, "serve", "--config", str(cfg), "--listen", f"127.0.0.1:{port}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.time() + 30
            while True:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as r:
                        if r.status == 200:
                            break
                except OSError:
                    pass
                if proc.poll() is not None or time.time() > deadline:
                    fail(f"toolgate did not become ready on the pod's config:\n{proc.stderr.read() if proc.stderr else ''}")
                time.sleep(0.2)
            print("ok the pod's config, policies and tokens load and serve (/readyz 200)")
            time.sleep(0.5)
            if not (root / "log" / "audit.jsonl").exists():
                fail("the pod's config ships the audit log, but no ship file appeared")
        finally:
            proc.terminate()
            proc.wait(timeout=10)

    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    service = compose["services"]["toolgate"]
    for volume in service["volumes"]:
        src = volume.split(":")[0]
        if src.startswith("."):
            if not (DEPLOY / src).resolve().exists():
                fail(f"docker-compose.yml mounts {src}, which does not exist")
    if not (DEPLOY / service["build"]["context"] / service["build"]["dockerfile"]).resolve().exists():
        fail("docker-compose.yml builds from a Dockerfile that does not exist")
    print("ok deploy/docker-compose.yml")


def check_monitoring(promtool: str) -> None:
    mon = DEPLOY / "monitoring"
    subprocess.run([promtool, "check", "rules", str(mon / "alerts.yaml")], check=True)
    subprocess.run([promtool, "test", "rules", str(mon / "alerts.test.yaml")], check=True)
    exported = set()
    for src in ["src/metrics.rs", "src/api/metrics.rs"]:
        exported |= set(re.findall(r'"(toolgate_[a-z_]+)"', (ROOT / src).read_text()))
    dashboard = json.loads((mon / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    rules = yaml.safe_load((mon / "alerts.yaml").read_text())
    exprs += [r["expr"] for g in rules["groups"] for r in g["rules"]]
    for expr in exprs:
        for name in re.findall(r"toolgate_[a-z_]+", expr):
            base = re.sub(r"_(bucket|count|sum)$", "", name)
            if name not in exported and base not in exported:
                fail(f"{name} (in `{expr.strip()[:80]}`) is not a metric toolgate exports")
    print(f"ok deploy/monitoring: {len(exprs)} expressions name only exported metrics")


if __name__ == "__main__":
    main()
