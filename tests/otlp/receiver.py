"""A small OTLP receiver for toolgate's tests (tests/it/traces.rs, tests/it/shipping.rs).

Decodes ExportTraceServiceRequest with the official OpenTelemetry protobuf definitions
(PyPI `opentelemetry-proto`), over OTLP/HTTP (POST /v1/traces, application/x-protobuf) and
OTLP/gRPC (opentelemetry.proto.collector.trace.v1.TraceService/Export), both on 127.0.0.1.

Usage: receiver.py OUT_JSONL
Prints one line, {"http": PORT, "grpc": PORT}, once both listen. Writes each span it
receives as one JSON line to OUT_JSONL, and every request body as received to OUT_JSONL.raw
(so a test can look for a value in the bytes sent, not only in what was decoded).
Logs (the audit sink, `[audit] ship_otlp_url`): POST /v1/logs, OTLP/JSON or protobuf,
decoded into ExportLogsServiceRequest (unknown JSON fields are an error); each log record is
one JSON line in OUT_JSONL.logs. While the file OUT_JSONL.refuse exists, /v1/logs answers 503
(a collector that refuses), and each refused request adds a line to OUT_JSONL.refused.
Runs until killed.
"""

import json
import sys
import threading
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
import os

from google.protobuf import json_format
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

LOCK = threading.Lock()


def value(v):
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: value(kv.value) for kv in v.kvlist_value.values}
    if kind == "bytes_value":
        return v.bytes_value.hex()
    return getattr(v, kind)


def attributes(kvs):
    return {kv.key: value(kv.value) for kv in kvs}


def record(out, transport, body, request):
    lines = []
    for rs in request.resource_spans:
        resource = attributes(rs.resource.attributes)
        for ss in rs.scope_spans:
            for s in ss.spans:
                lines.append(
                    json.dumps(
                        {
                            "transport": transport,
                            "service": resource.get("service.name"),
                            "scope": ss.scope.name,
                            "name": s.name,
                            "trace_id": s.trace_id.hex(),
                            "span_id": s.span_id.hex(),
                            "parent_span_id": s.parent_span_id.hex(),
                            "kind": s.kind,
                            "status_code": s.status.code,
                            "status_message": s.status.message,
                            "attributes": attributes(s.attributes),
                            "events": [
                                {"name": e.name, "attributes": attributes(e.attributes)}
                                for e in s.events
                            ],
                        },
                        sort_keys=True,
                    )
                )
    with LOCK:
        with open(out + ".raw", "ab") as f:
            f.write(body)
        with open(out, "a", encoding="utf-8") as f:
            for line in lines:
                f.write(line + "\n")


def record_logs(out, request):
    lines = []
    for rl in request.resource_logs:
        resource = attributes(rl.resource.attributes)
        for sl in rl.scope_logs:
            for r in sl.log_records:
                lines.append(
                    json.dumps(
                        {
                            "service": resource.get("service.name"),
                            "instance": resource.get("service.instance.id"),
                            "scope": sl.scope.name,
                            "time_unix_nano": r.time_unix_nano,
                            "severity": r.severity_text,
                            "body": value(r.body),
                            "attributes": attributes(r.attributes),
                        },
                        sort_keys=True,
                    )
                )
    with LOCK:
        with open(out + ".logs", "a", encoding="utf-8") as f:
            for line in lines:
                f.write(line + "\n")


def http_handler(out):
    class Handler(BaseHTTPRequestHandler):
        def logs(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if os.path.exists(out + ".refuse"):
                with LOCK:
                    with open(out + ".refused", "a", encoding="utf-8") as f:
                        f.write("refused\n")
                self.send_error(503)
                return
            request = logs_service_pb2.ExportLogsServiceRequest()
            kind = self.headers.get("Content-Type")
            try:
                if kind == "application/json":
                    json_format.Parse(body.decode("utf-8"), request)
                elif kind == "application/x-protobuf":
                    request.ParseFromString(body)
                else:
                    self.send_error(415)
                    return
            except Exception as e:  # a request the official definitions refuse
                self.send_error(400, str(e)[:200])
                return
            record_logs(out, request)
            answer = b"{}"
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def do_POST(self):
            if self.path == "/v1/logs":
                self.logs()
                return
            if self.path != "/v1/traces":
                self.send_error(404)
                return
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.headers.get("Content-Type") != "application/x-protobuf":
                self.send_error(415)
                return
            request = trace_service_pb2.ExportTraceServiceRequest()
            request.ParseFromString(body)
            record(out, "http", body, request)
            answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args):
            pass

    return Handler


class TraceService(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, out):
        self.out = out

    def Export(self, request, context):
        record(self.out, "grpc", request.SerializeToString(), request)
        return trace_service_pb2.ExportTraceServiceResponse()


def main():
    out = sys.argv[1]
    http = ThreadingHTTPServer(("127.0.0.1", 0), http_handler(out))
    threading.Thread(target=http.serve_forever, daemon=True).start()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(TraceService(out), server)
    grpc_port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(json.dumps({"http": http.server_address[1], "grpc": grpc_port}), flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
