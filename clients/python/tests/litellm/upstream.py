"""A local OpenAI-compatible upstream for LiteLLM's proxy in the tests: `/v1/chat/completions`,
streamed or not, each call billing PROMPT + COMPLETION tokens (a streamed call's usage is in its
final chunk, as OpenAI sends it with `stream_options.include_usage`).

The model name steers it: a name containing `fail` answers 500 (nothing used); `slow` streams a
chunk every 0.2 s for 10 s (to kill a proxy mid-stream); `cached` reports 10 of the prompt
tokens as read from the cache. It counts the calls it served (`GET /calls`).

    python upstream.py PORT
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PROMPT = 20
COMPLETION = 80
DELAY = float(os.environ.get("UPSTREAM_DELAY", "0.3"))  # seconds a call takes: calls at once overlap

calls = 0
lock = threading.Lock()


def usage(model: str) -> dict[str, Any]:
    u: dict[str, Any] = {
        "prompt_tokens": PROMPT,
        "completion_tokens": COMPLETION,
        "total_tokens": PROMPT + COMPLETION,
    }
    if "cached" in model:
        u["prompt_tokens_details"] = {"cached_tokens": 10}
    return u


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # a streamed body ends when the connection closes

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        body = json.dumps({"calls": calls}).encode() if self.path == "/calls" else b"{}"
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        global calls
        n = int(self.headers.get("content-length") or 0)
        req = json.loads(self.rfile.read(n) or b"{}")
        model = str(req.get("model", ""))
        with lock:
            calls += 1
        if "fail" in model:
            body = b'{"error": {"message": "upstream failed", "type": "server_error"}}'
            self.send_response(500)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        created = int(time.time())
        if not req.get("stream"):
            time.sleep(DELAY)
            body = json.dumps(
                {
                    "id": "chatcmpl-test",
                    "object": "chat.completion",
                    "created": created,
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": "ok " * 10},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": usage(model),
                }
            ).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        pieces, pause = (50, 0.2) if "slow" in model else (5, DELAY / 5)

        def chunk(delta: dict[str, Any], finish: str | None, **extra: Any) -> None:
            c = {
                "id": "chatcmpl-test",
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                **extra,
            }
            self.wfile.write(b"data: " + json.dumps(c).encode() + b"\n\n")
            self.wfile.flush()

        try:
            chunk({"role": "assistant", "content": ""}, None)
            for _ in range(pieces):
                time.sleep(pause)
                chunk({"content": "ok "}, None)
            chunk({}, "stop")
            last = {
                "id": "chatcmpl-test",
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [],
                "usage": usage(model),
            }
            self.wfile.write(b"data: " + json.dumps(last).encode() + b"\n\n")
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass


def main() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
