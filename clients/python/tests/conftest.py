"""Starts real toolgate sidecars for the client tests.

The binary is `$TOOLGATE_BIN`, else the repository's `target/debug/toolgate` (build it with
`cargo build`). Each sidecar runs the shipped policies with the demo tokens
(`clients/testdata/*.toml`), on a free loopback port and a data directory of its own.
"""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import toolgate

REPO = Path(__file__).resolve().parents[3]
TESTDATA = REPO / "clients" / "testdata"
DEV_TOKEN = "demo-dev-token"
BOB_TOKEN = "demo-bob-token"


def _binary() -> Path:
    path = Path(os.environ.get("TOOLGATE_BIN") or REPO / "target" / "debug" / "toolgate")
    if not path.is_file():
        pytest.exit(
            f"no toolgate binary at {path}: run `cargo build` in {REPO}, or set TOOLGATE_BIN",
            returncode=2,
        )
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Sidecar:
    def __init__(self, config: str):
        self.data = tempfile.TemporaryDirectory(prefix="toolgate-pytest-")
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(Path(self.data.name) / "sidecar.log", "wb")
        self.proc = subprocess.Popen(
            [
                str(_binary()),
                "serve",
                "--config",
                str(TESTDATA / config),
                "--listen",
                f"127.0.0.1:{self.port}",
                "--data-dir",
                str(Path(self.data.name) / "data"),
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"toolgate exited at start: {self.output()}")
            try:
                if httpx.get(self.url + "/readyz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"toolgate not ready within 60 s: {self.output()}")
            time.sleep(0.05)

    def output(self) -> str:
        self.log.flush()
        return (Path(self.data.name) / "sidecar.log").read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.log.close()
        self.data.cleanup()


@pytest.fixture(scope="session")
def sidecar() -> Iterator[Sidecar]:
    s = Sidecar("toolgate.toml")
    yield s
    s.stop()


@pytest.fixture(scope="session")
def limited() -> Iterator[Sidecar]:
    s = Sidecar("ratelimited.toml")
    yield s
    s.stop()


@pytest.fixture
def agent(sidecar: Sidecar) -> Iterator[toolgate.Client]:
    with toolgate.Client(sidecar.url, DEV_TOKEN, approval_timeout=20) as c:
        yield c


@pytest.fixture
def bob(sidecar: Sidecar) -> Iterator[toolgate.Client]:
    with toolgate.Client(sidecar.url, BOB_TOKEN) as c:
        yield c


@pytest.fixture
def closed_url() -> str:
    """A loopback URL nothing listens on."""
    return f"http://127.0.0.1:{_free_port()}"
