"""A TCP proxy on loopback that a test can cut: every connection through it is closed at
once (as a broker restart, a failover or a dropped network would close them), while new
connections are still accepted. It stands between one process and the shared broker, so a
test can take that process's broker connection away without touching the broker."""

from __future__ import annotations

import socket
import threading


class CuttableProxy:
    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.accepted = 0
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name="proxy-accept", daemon=True).start()

    def url(self, broker_url: str) -> str:
        """`broker_url` through this proxy (its host and port replaced)."""
        scheme, rest = broker_url.split("://", 1)
        credentials, _, location = rest.rpartition("@")
        path = location.partition("/")[2]
        return f"{scheme}://{credentials + '@' if credentials else ''}127.0.0.1:{self.port}/{path}"

    def cut(self) -> int:
        """Close every connection through the proxy; returns how many there were."""
        with self._lock:
            closing, self._open = self._open, []
        for sock in closing:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        return len(closing) // 2

    def close(self) -> None:
        self.listener.close()
        self.cut()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            upstream = socket.create_connection(self.target)
            with self._lock:
                self._open += [client, upstream]
                self.accepted += 1
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
