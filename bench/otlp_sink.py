"""An OTLP/HTTP sink for bench/cpu.sh's traced row: answers every POST with 200 and counts the
exports and bytes it got (printed to stderr when it stops). It decodes nothing: the bench
measures what exporting costs filerouter, not a collector.

    python3 bench/otlp_sink.py PORT
"""

import signal
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

exports = 0
received = 0


class Sink(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        global exports, received
        length = int(self.headers.get("content-length") or 0)
        received += len(self.rfile.read(length))
        exports += 1
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def main() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Sink)

    def stop(*_: object) -> None:
        print(f"otlp sink: {exports} exports, {received} bytes", file=sys.stderr)
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    server.serve_forever()


if __name__ == "__main__":
    main()
