"""A stand-in for `bbcluster serve`: a ROUTER thread that speaks docs/serving.md with canned
results, and records what clients send so tests can check the wire."""

from __future__ import annotations

import collections
import threading
import time
from typing import Dict, List, Optional

import msgpack
import zmq
from zmq.utils import z85

OPERATORS = ["aten.relu.default", "aten.add.Tensor", "aten.add.Scalar", "aten.mul.Tensor",
             "aten.sum.default"]


def selects(token: str, op_name: str) -> bool:
    rest = op_name[len("aten."):]
    return token in (op_name, rest, rest.split(".", 1)[0])


def correctness(op: str, **fields) -> dict:
    record = {"args": "((T([4, 4], f32),), {})", "error_msg": "", "error_type": "",
              "is_correct": True, "max_abs_error": 0.0, "max_rel_error": 0.0, "op_name": op,
              "test_type": "correctness", "traceback": ""}
    record.update(fields)
    return record


def performance(op: str, **fields) -> dict:
    record = {"args": "((T([4, 4], f32),), {})", "benchmark_time_ms": 0.5, "error_msg": "",
              "op_name": op, "reference_cached": False, "reference_round_means_ms": [1.0, 1.0],
              "reference_time_ms": 1.0, "speedup": 2.0, "speedup_ci_high": 2.2,
              "speedup_ci_low": 1.8, "successfully_ran": True, "test_type": "performance",
              "timer": "cpu_bench", "timing_rounds": 5, "unverified_speedup": 0.0}
    record.update(fields)
    return record


def job_record(op: str) -> dict:
    """One operator's terminal record: two passing inputs and one the reference failed on;
    one timed input at 2x, one that failed, one the reference failed on. Fields this client
    does not know are there too, as a newer server would send them."""
    reference_error = "the reference does not agree with itself on this input"
    return {
        "attempt": 1, "job_id": 1, "op_name": op, "outcome": "ok", "detail": "", "flags": [],
        "correctness": [
            correctness(op),
            correctness(op, args="((T([8], f32),), {})", max_abs_error=1e-7, future_field=3),
            correctness(op, is_correct=False, error_type="reference_error",
                        error_msg=reference_error),
        ],
        "performance": [
            performance(op),
            performance(op, speedup=0.0, successfully_ran=False, timing_rounds=0,
                        error_msg="exception: RuntimeError: boom"),
            performance(op, speedup=1.0, successfully_ran=False,
                        error_msg="reference_error: " + reference_error),
        ],
        "where": {"node": "local", "device": "cpu", "torch_version": "2.11.0", "slot": 0},
        "wall_seconds": 0.25, "runner_restarts": 0, "phases": {"compare": 0.01},
        "future_field": {"nested": True},
    }


class FakeServer:
    """Answers hello with welcome, evaluate with accepted, one result per operator selected
    (after `result_delay_s`) and done, an unknown operator with error, cancel with cancelled
    and a cancelled done, status, ping with pong; records everything it receives.

    `curve`: (server secret key, the one client public key admitted), both Z85 bytes; the
    server then checks clients through ZAP as bbcluster's does. `mute`: after the welcome,
    answers nothing. `refuse_hello`: answers hello with this error."""

    def __init__(self, curve: Optional[tuple] = None, result_delay_s: float = 0.0,
                 mute: bool = False, refuse_hello: Optional[str] = None):
        self.result_delay_s = result_delay_s
        self.mute = mute
        self.refuse_hello = refuse_hello
        self.received: List[dict] = []
        self.counts: Dict[str, int] = collections.Counter()
        self.bye = threading.Event()
        self.refused_keys = 0
        self._lock = threading.Lock()
        # (due time, peer, message), answered in time order.
        self._scheduled: List[tuple] = []
        self._names: Dict[bytes, str] = {}
        self._unfinished: Dict[str, bytes] = {}
        self._context = zmq.Context()
        self._zap = None
        self._admitted = None
        self._router = self._context.socket(zmq.ROUTER)
        self._router.linger = 0
        if curve is not None:
            secret_key, client_public_key = curve
            # The ZAP handler must be bound before a CURVE socket binds.
            self._zap = self._context.socket(zmq.REP)
            self._zap.linger = 0
            self._zap.bind("inproc://zeromq.zap.01")
            self._admitted = z85.decode(client_public_key)
            self._router.curve_server = True
            self._router.curve_secretkey = secret_key
        self._router.bind("tcp://127.0.0.1:*")
        self.address = self._router.last_endpoint.decode()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fake-bbcluster-serve")
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join()
        # Closed at once with whatever handshakes or ZAP requests are still in flight.
        self._context.destroy(linger=0)

    def messages(self, kind: str) -> List[dict]:
        with self._lock:
            return [m for m in self.received if m.get("kind") == kind]

    def wait_for(self, kind: str, count: int = 1, timeout: float = 5.0) -> List[dict]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.messages(kind)
            if len(found) >= count:
                return found
            time.sleep(0.01)
        raise AssertionError(f"the fake server saw {len(self.messages(kind))} {kind}, "
                             f"not {count}, within {timeout} s")

    def _run(self) -> None:
        poller = zmq.Poller()
        poller.register(self._router, zmq.POLLIN)
        if self._zap is not None:
            poller.register(self._zap, zmq.POLLIN)
        while not self._stopping.is_set():
            ready = dict(poller.poll(20))
            if self._zap is not None and self._zap in ready:
                self._authenticate()
            if self._router in ready:
                peer, frame = self._router.recv_multipart()
                message = msgpack.unpackb(frame, raw=False)
                with self._lock:
                    self.received.append(message)
                    self.counts[message["kind"]] += 1
                self._handle(peer, message)
            self._flush()

    def _authenticate(self) -> None:
        # RFC 27: version, request id, domain, address, identity, mechanism, credentials.
        frames = self._zap.recv_multipart()
        ok = frames[5] == b"CURVE" and frames[6] == self._admitted
        if not ok:
            self.refused_keys += 1
        self._zap.send_multipart([frames[0], frames[1], b"200" if ok else b"400",
                                  b"OK" if ok else b"not the coordinator's key", b"", b""])

    def _send(self, peer: bytes, message: dict, delay_s: float = 0.0) -> None:
        self._scheduled.append((time.monotonic() + delay_s, peer, message))

    def _flush(self) -> None:
        now = time.monotonic()
        due = sorted((s for s in self._scheduled if s[0] <= now), key=lambda s: s[0])
        self._scheduled = [s for s in self._scheduled if s[0] > now]
        for _, peer, message in due:
            if message["kind"] == "done":
                self._unfinished.pop(message["id"], None)
            self._router.send_multipart([peer, msgpack.packb(message)])

    def _handle(self, peer: bytes, message: dict) -> None:
        kind = message["kind"]
        if kind == "hello":
            if self.refuse_hello:
                self._send(peer, {"kind": "error", "why": self.refuse_hello})
                return
            self._names[peer] = message.get("client", "")
            self._send(peer, {"kind": "welcome", "proto": 1, "slots": 2, "device": "cpu",
                              "version": "0.0-fake"})
        elif self.mute:
            return
        elif kind == "ping":
            self._send(peer, {"kind": "pong"})
        elif kind == "status":
            self._send(peer, {"kind": "status", "slots": 2, "busy": len(self._unfinished),
                              "queued": {name: 0 for name in self._names.values()},
                              "requests": dict(collections.Counter(
                                  self._names[p] for p in self._unfinished.values())),
                              "clients": len(self._names)})
        elif kind == "evaluate":
            self._evaluate(peer, message)
        elif kind == "cancel":
            self._cancel(peer, message["id"])
        elif kind == "bye":
            self.bye.set()

    def _evaluate(self, peer: bytes, message: dict) -> None:
        request_id = message["id"]
        selected = []
        for token in message["kernels"]:
            ops = [op for op in OPERATORS if selects(token, op)]
            if not ops:
                self._send(peer, {"kind": "error", "id": request_id,
                                  "why": f"--ops {token}: no such operator in the suite"})
                return
            selected += ops
        folder = f"/srv/requests/{self._names.get(peer, '')}/{request_id}"
        self._unfinished[request_id] = peer
        self._send(peer, {"kind": "accepted", "id": request_id, "ops": selected,
                          "folder": folder})
        for op in selected:
            # Each input as it ends: one checked and timed, then one only checked.
            self._send(peer, {"kind": "input", "id": request_id, "op_name": op, "attempt": 1,
                              "input": 0, "correctness": correctness(op),
                              "performance": performance(op)})
            self._send(peer, {"kind": "input", "id": request_id, "op_name": op, "attempt": 1,
                              "input": 1, "correctness": correctness(op, is_correct=False)})
            self._send(peer, {"kind": "result", "id": request_id, "result": job_record(op)},
                       self.result_delay_s)
        self._send(peer, {"kind": "done", "id": request_id, "cancelled": False,
                          "folder": folder, "scores_text": "correctness score (mean pass rate "
                          "over all operators): 1.00\n",
                          "scores": {"correctness": 1.0, "performance": 1.41,
                                     "perf_at_p": 1.0, "perf_at_p_significant": 0.0}},
                   self.result_delay_s)

    def _cancel(self, peer: bytes, request_id: str) -> None:
        if self._unfinished.get(request_id) != peer:
            self._send(peer, {"kind": "error", "id": request_id,
                              "why": f"no unfinished request {request_id}"})
            return
        self._scheduled = [s for s in self._scheduled if s[2].get("id") != request_id]
        del self._unfinished[request_id]
        self._send(peer, {"kind": "cancelled", "id": request_id})
        self._send(peer, {"kind": "done", "id": request_id, "cancelled": True, "folder": "",
                          "scores": {}, "scores_text": ""})
