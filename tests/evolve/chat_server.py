"""A real HTTP server on loopback that speaks the OpenAI chat-completions protocol, with
scripted replies: what the LLM proposer's tests talk to (through the `openai` client, over
TCP), instead of a mock of our code.

    with ChatServer([reply('{"field": ...}'), status(429), slow(2.0, '{...}')]) as server:
        server.base_url        # http://127.0.0.1:PORT/v1
        server.requests        # the JSON bodies received, in order

Each request takes the next step of the script; past its end the last step repeats.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Step:
    content: str | None = None
    status: int = 200
    delay_s: float = 0.0


def reply(content: str) -> Step:
    return Step(content)


def status(code: int) -> Step:
    return Step(status=code)


def slow(delay_s: float, content: str) -> Step:
    return Step(content, delay_s=delay_s)


class ChatServer:
    def __init__(self, script: list[Step]) -> None:
        self.script = script
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server._lock:
                    server.requests.append({"path": self.path, "authorization": self.headers["Authorization"], **body})
                    step = server.script[min(len(server.requests), len(server.script)) - 1]
                time.sleep(step.delay_s)
                if step.status != 200:
                    self._send(step.status, {"error": {"message": "scripted failure", "type": "rate_limit"}},
                               {"retry-after": "0"})  # fmt: skip
                    return
                prompt = sum(len(m.get("content") or "") for m in body["messages"]) // 4
                self._send(200, {
                    "id": f"chatcmpl-{len(server.requests)}", "object": "chat.completion", "created": 0,
                    "model": body["model"],
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": step.content},
                                 "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": prompt, "completion_tokens": len(step.content or "") // 4,
                              "total_tokens": prompt + len(step.content or "") // 4},
                })  # fmt: skip

            def _send(self, code: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for key, value in (headers or {}).items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up waiting (a scripted timeout)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> ChatServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
