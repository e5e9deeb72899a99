"""A TCP proxy a test can cut: one process's path to a server (etcd) broken while every other path works.

``TcpProxy(target_host, target_port).start()`` listens on a free 127.0.0.1 port and relays each
connection to the target, byte for byte, in both directions (a thread per direction). ``cut()``
closes every relayed connection and closes each new one at once - what a network partition looks
like to the client (resets, then no route); ``heal()`` relays again. A broker started with
``metadata.store=etcd://127.0.0.1:<proxy port>`` is thereby cut off from etcd alone, without root.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable

# What a connection's bytes go through on their way (TcpProxy._relays).
Relay = Callable[[bytes], bytes]


class TcpProxy:
    # The upstream socket's timeout, for its connect and for each read from it: an upstream connection
    # idle that long is closed (both ends). None: connections stay open while idle.
    upstream_timeout: float | None = 5.0

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._cut = False
        self._closed = False
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> TcpProxy:
        self._listener.listen(64)
        threading.Thread(target=self._accept, daemon=True, name="tcp-proxy-accept").start()
        return self

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._cut:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=self.upstream_timeout or 5.0)
                upstream.settimeout(self.upstream_timeout)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets.update((client, upstream))
            to_server, to_client = self._relays()
            for src, dst, relay in ((client, upstream, to_server), (upstream, client, to_client)):
                threading.Thread(target=self._pump, args=(src, dst, relay), daemon=True).start()

    def _relays(self) -> tuple[Relay | None, Relay | None]:
        """A new connection's (client-to-server, server-to-client) relays: each is given the bytes
        read, in order, and returns what to send on (b"" holds them back for now); None relays byte
        for byte. A subclass's hook (tests/support/recording_proxy.py reads and rewrites frames)."""
        return None, None

    def _pump(self, src: socket.socket, dst: socket.socket, relay: Relay | None = None) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data or self._cut:
                    break
                if relay is not None:
                    data = relay(data)
                if data:
                    dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
                with self._lock:
                    self._sockets.discard(s)

    def cut(self) -> None:
        self._cut = True
        with self._lock:
            sockets = list(self._sockets)
        for s in sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def heal(self) -> None:
        self._cut = False

    def close(self) -> None:
        self._closed = True
        self.cut()
        self._listener.close()
