"""The client's DEALER socket and the thread that owns it (docs/serving.md, "Transport").

ZeroMQ sockets are not thread-safe, so only the I/O thread touches the DEALER once the hello
is done. Callers hand it messages through an inproc PAIR socket, one caller at a time under a
lock; the I/O thread forwards them, applies what the server sends to the pending requests,
pings while requests are unfinished, and fails them when the server falls silent."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from typing import Any, Dict, Optional

import msgpack
import zmq

from .errors import BBClusterError, ServerError, Timeout
from .keys import configure_curve_client
from .pending import PendingRequests

log = logging.getLogger("bbcluster_client")

PROTOCOL_VERSION = 1
# The server forgets a client silent for serve.client_timeout_s (30 s by default).
PING_INTERVAL_S = 2.0
# The server drops larger messages unread.
MAX_MESSAGE_BYTES = 64 << 20
# How long bye may take to leave when the client closes.
BYE_LINGER_MS = 1000
_POLL_MS = 200
# The PAIR frame that tells the I/O thread to say bye and stop: no message packs to it.
_STOP = b""
_instances = itertools.count()


def pack(message: Dict[str, Any]) -> bytes:
    return msgpack.packb(message, use_bin_type=True)


def unpack(frame: bytes) -> Dict[str, Any]:
    message = msgpack.unpackb(frame, raw=False, strict_map_key=False)
    if not isinstance(message, dict):
        raise ValueError(f"a {type(message).__name__}, not a map")
    return message


class Connection:
    """Connects, says hello and waits for welcome (raising Timeout or ServerError), then
    starts the I/O thread. `timeout` bounds the welcome and any silence of the server while
    something waits for it."""

    def __init__(self, address: str, keys: Optional[str], name: Optional[str], timeout: float,
                 pending: PendingRequests):
        self.address = address
        self._timeout = timeout
        self._pending = pending
        self._context = zmq.Context()
        self._dealer = self._context.socket(zmq.DEALER)
        self._dealer.linger = 0
        try:
            if keys is not None:
                configure_curve_client(self._dealer, str(keys))
            try:
                self._dealer.connect(address)
            except zmq.ZMQError as e:
                raise BBClusterError(f"cannot connect to {address}: {e}") from None
            self.welcome = self._hello(name, keys is not None)
        except BaseException:
            # destroy, not term: a CURVE handshake the server refused may still be retrying,
            # and nothing of this socket is worth waiting for.
            self._context.destroy(linger=0)
            raise
        wake_address = f"inproc://bbcluster-client-{next(_instances)}"
        self._inbox = self._context.socket(zmq.PAIR)
        self._inbox.bind(wake_address)
        self._outbox = self._context.socket(zmq.PAIR)
        self._outbox.connect(wake_address)
        self._outbox_lock = threading.Lock()
        self._closed = False
        self._failure: Optional[BaseException] = None
        self._last_heard = self._last_asked = self._last_ping = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="bbcluster-client-io",
                                        daemon=True)
        self._thread.start()

    def _hello(self, name: Optional[str], with_keys: bool) -> Dict[str, Any]:
        hello: Dict[str, Any] = {"kind": "hello", "proto": PROTOCOL_VERSION}
        if name:
            hello["client"] = name
        self._dealer.send(pack(hello))
        if not self._dealer.poll(int(self._timeout * 1000)):
            hint = ("the server must run with --keys from the same `bbcluster keygen` folder: "
                    "this client presents coordinator.key and expects node.pub"
                    if with_keys else "a server started with --keys refuses clients without keys")
            raise Timeout(f"no welcome from {self.address} within {self._timeout:g} s: is "
                          f"`bbcluster serve` listening there? ({hint})")
        try:
            reply = unpack(self._dealer.recv())
        except ValueError as e:
            raise BBClusterError(f"{self.address} answered hello with something that is not a "
                                 f"msgpack map ({e}): is it `bbcluster serve`?") from None
        if reply.get("kind") == "error":
            raise ServerError(reply.get("why", "hello refused"))
        if reply.get("kind") != "welcome":
            raise BBClusterError(f"{self.address} answered hello with {reply.get('kind')!r}, "
                                 f"not welcome: is it `bbcluster serve`?")
        if reply.get("proto") != PROTOCOL_VERSION:
            raise BBClusterError(f"{self.address} speaks protocol {reply.get('proto')}, this "
                                 f"client {PROTOCOL_VERSION}")
        return {k: v for k, v in reply.items() if k != "kind"}

    def send(self, message: Dict[str, Any]) -> None:
        """Queues one message for the server; safe from any thread."""
        frame = pack(message)
        if len(frame) > MAX_MESSAGE_BYTES:
            raise ValueError(f"the {message.get('kind')} message is {len(frame) >> 20} MiB; the "
                             f"server drops messages over {MAX_MESSAGE_BYTES >> 20} MiB")
        with self._outbox_lock:
            self._check_open()
            self._outbox.send(frame)

    def _check_open(self) -> None:
        if self._failure is not None:
            raise BBClusterError(f"the connection to {self.address} failed: {self._failure}")
        if self._closed:
            raise BBClusterError(f"the client of {self.address} is closed")

    def close(self) -> None:
        """Says bye (the server cancels what is unfinished), stops the I/O thread, and fails
        the requests still waiting. Idempotent."""
        with self._outbox_lock:
            if self._closed:
                return
            self._closed = True
            if self._thread.is_alive():
                self._outbox.send(_STOP)
        self._thread.join()
        self._outbox.close()
        self._context.term()

    def _run(self) -> None:
        error = BBClusterError(f"the client of {self.address} was closed")
        try:
            self._loop()
        except Exception as e:  # a bug or a broken socket: waiters must hear of it
            log.exception("bbcluster_client: the I/O thread stopped")
            self._failure = e
            error = BBClusterError(f"the connection to {self.address} failed: {e}")
        finally:
            self._dealer.close()
            self._inbox.close()
            self._pending.fail_all(error)

    def _loop(self) -> None:
        poller = zmq.Poller()
        poller.register(self._dealer, zmq.POLLIN)
        poller.register(self._inbox, zmq.POLLIN)
        while True:
            ready = dict(poller.poll(_POLL_MS))
            if self._inbox in ready:
                frame = self._inbox.recv()
                if frame == _STOP:
                    self._say_bye()
                    return
                self._dealer.send(frame)
                self._last_asked = time.monotonic()
            if self._dealer in ready:
                self._receive()
            self._keep_alive()

    def _receive(self) -> None:
        frame = self._dealer.recv()
        self._last_heard = time.monotonic()
        try:
            message = unpack(frame)
        except ValueError as e:
            log.warning("bbcluster_client: a message from %s is not a msgpack map (%s)",
                        self.address, e)
            return
        for reply in self._pending.handle(message):
            self._dealer.send(pack(reply))

    def _keep_alive(self) -> None:
        now = time.monotonic()
        # Pinged while connected, idle or not: the server forgets a client silent for
        # serve.client_timeout_s, and would then answer its next request as a stranger's.
        if now - self._last_ping >= PING_INTERVAL_S:
            try:
                # Never wait on a full queue for a ping: the silence check below is what
                # notices a server that reads nothing.
                self._dealer.send(pack({"kind": "ping"}), zmq.NOBLOCK)
            except zmq.Again:
                pass
            self._last_ping = now
        # Pings do not count as asking: a server that answers nothing, pongs included, is gone.
        silent = now - max(self._last_heard, self._last_asked)
        if self._pending.has_unanswered() and silent > self._timeout:
            self._pending.fail_all(Timeout(
                f"{self.address} has not answered for {silent:.0f} s (timeout={self._timeout:g}"
                f"); its unfinished requests are given up"))
            self._last_asked = now

    def _say_bye(self) -> None:
        self._dealer.linger = BYE_LINGER_MS
        self._dealer.send(pack({"kind": "bye"}))
