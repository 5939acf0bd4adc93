#!/usr/bin/env python3
"""Opens MCP sessions on toolgate's `/mcp` as fast as it can (raw `initialize` requests over
keep-alive connections, stdlib only), then prints how each was answered as JSON:
{"opened": N, "refused": {status: count}, "failed": N, "secs": S}.

Usage: mcp_flood.py PORT TOKEN COUNT [THREADS]   (loopback only)
"""
import http.client
import json
import sys
import threading
import time

INIT = json.dumps({
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "flood", "version": "1"}},
}).encode()


def worker(port, token, count, out, lock):
    conn = None
    opened, refused, failed = 0, {}, 0
    for _ in range(count):
        try:
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("POST", "/mcp", body=INIT, headers={
                "Authorization": f"Bearer {token}",
                "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream",
            })
            resp = conn.getresponse()
            resp.read()
            if resp.status == 200 and resp.getheader("mcp-session-id"):
                opened += 1
            else:
                refused[resp.status] = refused.get(resp.status, 0) + 1
            if resp.will_close:
                conn.close()
                conn = None
        except (OSError, http.client.HTTPException):
            failed += 1
            if conn is not None:
                conn.close()
            conn = None
    if conn is not None:
        conn.close()
    with lock:
        out["opened"] += opened
        out["failed"] += failed
        for k, v in refused.items():
            out["refused"][str(k)] = out["refused"].get(str(k), 0) + v


def main():
    port, token, count = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    threads = int(sys.argv[4]) if len(sys.argv) > 4 else 8
    out = {"opened": 0, "refused": {}, "failed": 0}
    lock = threading.Lock()
    started = time.monotonic()
    ts = [threading.Thread(target=worker,
                           args=(port, token, count // threads + (i < count % threads), out, lock))
          for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    out["secs"] = round(time.monotonic() - started, 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
