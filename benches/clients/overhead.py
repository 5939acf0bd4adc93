#!/usr/bin/env python3
"""What the Python client adds over plain HTTP, measured against its floor in the same run.

Starts a sidecar (`--toolgate BIN`, default target/release/toolgate) with the client tests'
config on a free port, then times, interleaved in rounds so that both see the same machine:

- `authorize`: `Client.authorize` vs the floor, the same POST /v1/authorize sent with a bare
  `httpx.Client` (same connection pool, same body) and its JSON parsed;
- `call`: the whole loop of a guarded tool (`Client.call`: authorize, run a no-op tool,
  report the result) vs the floor, the same two POSTs sent bare.

Prints median and p99 per call and the ratios. Usage:

    python3 benches/clients/overhead.py [--toolgate BIN] [--calls 2000]

Needs httpx and the client (`pip install ./clients/python`).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import httpx

import toolgate

REPO = Path(__file__).resolve().parents[2]
TOKEN = "demo-dev-token"
ARGS = {"path": "src/main.rs"}


def start(binary: str, data: str) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [
            binary,
            "serve",
            "--config",
            str(REPO / "clients/testdata/toolgate.toml"),
            "--listen",
            f"127.0.0.1:{port}",
            "--data-dir",
            data,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(600):
        try:
            urllib.request.urlopen(url + "/readyz", timeout=1)
            return proc, url
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("toolgate did not become ready")


def timed(fn: object, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()  # type: ignore[operator]
        out.append(time.perf_counter() - t)
    return out


def summary(xs: list[float]) -> tuple[float, float]:
    xs = sorted(xs)
    return statistics.median(xs) * 1e6, xs[min(len(xs) - 1, int(len(xs) * 0.99))] * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--toolgate", default=str(REPO / "target/release/toolgate"))
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as data:
        proc, url = start(opts.toolgate, os.path.join(data, "d"))
        try:
            headers = {"Authorization": f"Bearer {TOKEN}"}
            raw = httpx.Client(base_url=url, headers=headers)
            client = toolgate.Client(url, TOKEN)

            def raw_authorize() -> dict[str, object]:
                r = raw.post("/v1/authorize", json={"tool": "read_file", "args": ARGS})
                return r.json()  # type: ignore[no-any-return]

            def raw_call() -> object:
                d = raw_authorize()
                assert d["decision"] == "allow"
                r = raw.post(
                    "/v1/results",
                    json={"tool": "read_file", "output": "ok", "decision_id": d["decision_id"]},
                )
                return r.json()["output"]

            def client_authorize() -> object:
                return client.authorize("read_file", ARGS)

            def client_call() -> object:
                return client.call("read_file", ARGS, lambda **a: "ok").output

            for f in (raw_authorize, raw_call, client_authorize, client_call):
                timed(f, 50)  # warm up the pool and the sidecar
            per = max(1, opts.calls // opts.rounds)
            got: dict[str, list[float]] = {k: [] for k in ("ra", "ca", "rc", "cc")}
            for _ in range(opts.rounds):
                got["ra"] += timed(raw_authorize, per)
                got["ca"] += timed(client_authorize, per)
                got["rc"] += timed(raw_call, per)
                got["cc"] += timed(client_call, per)
            rows = [
                ("authorize", got["ra"], got["ca"]),
                ("call (authorize + tool + report)", got["rc"], got["cc"]),
            ]
            print(f"{per * opts.rounds} calls each, {opts.rounds} interleaved rounds; µs per call")
            for name, floor, mine in rows:
                fm, fp = summary(floor)
                cm, cp = summary(mine)
                print(
                    f"{name:<34} floor (bare httpx) median {fm:7.0f} p99 {fp:7.0f} | "
                    f"client median {cm:7.0f} p99 {cp:7.0f} | ratio {cm / fm:.2f}"
                )
        finally:
            proc.terminate()
            proc.wait(10)


if __name__ == "__main__":
    main()
