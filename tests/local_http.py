"""What the tests' local HTTP servers share: a request handler that answers JSON and keeps the test
output clean, and a server on a free port of 127.0.0.1 that a `with` block starts and stops."""

from __future__ import annotations

import json
import selectors
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class QuietHandler(BaseHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass

    def send_json(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client timed out and left


class LocalServer:
    """`with LocalServer(Handler) as server: server.url`. The end of the block wakes its loop at once:
    `serve_forever` looks for a stop only every `poll_interval`, and the hundred servers of the unit
    tier waited some 40 ms each at their end at 0.05 s (half a second each at the default)."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]):
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._stopping = threading.Event()
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._thread = threading.Thread(target=self._serve_until_stopped, daemon=True)

    def _serve_until_stopped(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self.httpd, selectors.EVENT_READ)
            selector.register(self._wake_reader, selectors.EVENT_READ)
            while not self._stopping.is_set():
                if any(key.fileobj is self.httpd for key, _ in selector.select()):
                    self.httpd.handle_request()  # a connection is waiting: accepted at once

    def __enter__(self) -> LocalServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stopping.set()
        self._wake_writer.send(b"x")
        self._thread.join()
        self.httpd.server_close()
        self._wake_reader.close()
        self._wake_writer.close()
