"""The client's unfinished requests, and what each message from the server does to them. The
I/O thread hands every message here; callers add requests before they send them."""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import threading
from typing import Any, Callable, Dict, List, Optional

from .errors import BBClusterError, RequestCancelled, ServerError
from .records import InputResult, Result, SweepResult

log = logging.getLogger("bbcluster_client")


class RequestFuture(concurrent.futures.Future):
    """A request on its way: resolves to a Result (evaluate) or a SweepResult (sweep), or
    raises ServerError, RequestCancelled or Timeout. `request_id` is what Client.cancel takes.
    Callbacks run on the client's I/O thread: keep them short and never wait in them."""

    def __init__(self, request_id: str, op: Optional[str] = None):
        super().__init__()
        self.request_id = request_id
        self.op = op
        self._inputs_lock = threading.Lock()
        self._inputs: List[InputResult] = []
        self._input_callbacks: List[Callable[[InputResult], None]] = []
        # Running from the start: the request is already with the server, so Future.cancel()
        # cannot take it back (it returns False); Client.cancel can.
        self.set_running_or_notify_cancel()

    @property
    def inputs(self) -> List[InputResult]:
        """The inputs streamed so far, in the order they ended (InputResult: progress, which
        the result supersedes)."""
        with self._inputs_lock:
            return list(self._inputs)

    def add_input_callback(self, fn: Callable[[InputResult], None]) -> None:
        """Calls `fn` with each input streamed from now on, on the client's I/O thread (keep it
        short). Client.submit(on_input=...) registers one before the request is sent."""
        with self._inputs_lock:
            self._input_callbacks.append(fn)

    def _add_input(self, record: InputResult) -> None:
        with self._inputs_lock:
            self._inputs.append(record)
            callbacks = list(self._input_callbacks)
        for fn in callbacks:
            try:
                fn(record)
            except Exception:  # a caller's callback must not end the I/O thread
                log.exception("bbcluster_client: an on_input callback raised")


class _Request:
    def __init__(self, future: RequestFuture, single: bool, problems: List[str]):
        self.future = future
        # evaluate() asked for one operator; sweep() for all that its names select.
        self.single = single
        self.problems = problems
        self.ops: List[str] = []
        self.folder = ""
        self.results: List[Result] = []

    def outcome(self, done: Dict[str, Any]):
        """The future's value or exception once `done` came."""
        request_id = self.future.request_id
        cancelled = bool(done.get("cancelled", False))
        if not self.single:
            return SweepResult(request_id=request_id, results=self.results,
                               scores=dict(done.get("scores", {})),
                               scores_text=done.get("scores_text", ""),
                               folder=done.get("folder", self.folder), cancelled=cancelled,
                               ops=self.ops, problems=self.problems)
        if self.results:
            return self.results[0]
        if cancelled:
            return RequestCancelled(f"request {request_id} ({self.future.op}) was cancelled",
                                    request_id)
        return BBClusterError(f"request {request_id} ({self.future.op}) finished without a "
                              f"result", request_id)


# What resolves a future once the table's lock is released: callbacks run when a future is
# resolved, and one that submits another request must not find the lock held.
_Resolution = Callable[[], None]


def _resolve(future: concurrent.futures.Future, value) -> _Resolution:
    if isinstance(value, BaseException):
        return lambda: future.set_exception(value)
    return lambda: future.set_result(value)


class PendingRequests:
    def __init__(self):
        self._lock = threading.Lock()
        self._requests: Dict[str, _Request] = {}
        # `status` carries no id: answers come in the order the questions went.
        self._status: collections.deque = collections.deque()

    def add(self, future: RequestFuture, single: bool, problems: List[str] = ()) -> None:
        with self._lock:
            self._requests[future.request_id] = _Request(future, single, list(problems))

    def add_status(self, future: concurrent.futures.Future) -> None:
        with self._lock:
            self._status.append(future)

    def discard(self, future: concurrent.futures.Future) -> None:
        """Forgets a request or status question that could not be sent."""
        with self._lock:
            if isinstance(future, RequestFuture):
                self._requests.pop(future.request_id, None)
            elif future in self._status:
                self._status.remove(future)

    def is_unfinished(self, request_id: str) -> bool:
        with self._lock:
            return request_id in self._requests

    def has_requests(self) -> bool:
        with self._lock:
            return bool(self._requests)

    def has_unanswered(self) -> bool:
        """Whether anything waits for the server: a request or a status question."""
        with self._lock:
            return bool(self._requests or self._status)

    def fail_all(self, error: BBClusterError) -> None:
        with self._lock:
            futures = [r.future for r in self._requests.values()] + list(self._status)
            self._requests.clear()
            self._status.clear()
        for future in futures:
            future.set_exception(error)

    def handle(self, message: Dict[str, Any]) -> List[Dict[str, Any]]:
        """Applies one message from the server; returns the messages to send in answer."""
        replies: List[Dict[str, Any]] = []
        with self._lock:
            resolutions = self._apply(message, replies)
        for resolve in resolutions:
            resolve()
        return replies

    def _apply(self, message: Dict[str, Any], replies: list) -> List[_Resolution]:
        kind = message.get("kind")
        request_id = message.get("id")
        if kind == "status":
            if not self._status:
                return []
            answer = {k: v for k, v in message.items() if k != "kind"}
            return [_resolve(self._status.popleft(), answer)]
        if kind == "error" and message.get("unknown_client"):
            # The server forgot this client (silent too long, or restarted): nothing it had
            # of ours will ever be answered.
            why = message.get("why", "the server does not know this client")
            failed = list(self._requests.values())
            self._requests.clear()
            statuses = list(self._status)
            self._status.clear()
            return ([_resolve(r.future, ServerError(why, r.future.request_id)) for r in failed]
                    + [_resolve(f, ServerError(why)) for f in statuses])
        if kind == "error" and request_id is None:
            log.warning("bbcluster serve: %s", message.get("why", "an error without a reason"))
            return []
        if kind not in ("accepted", "input", "result", "done", "error"):
            # pong and cancelled change nothing here (cancelled's done follows).
            return []
        request = self._requests.get(request_id)
        if request is None:
            # The answer to a request this client already gave up (cancelled, timed out).
            return []
        if kind == "input":
            record = InputResult.from_message(message)
            future = request.future
            return [lambda: future._add_input(record)]
        if kind == "accepted":
            request.ops = list(message.get("ops", []))
            request.folder = message.get("folder", "")
            if request.single and len(request.ops) != 1:
                del self._requests[request_id]
                replies.append({"kind": "cancel", "id": request_id})
                op = request.future.op
                return [_resolve(request.future, BBClusterError(
                    f"{op!r} selects {len(request.ops)} operators ({', '.join(request.ops)}); "
                    f"evaluate takes one: name it in full, or sweep() them all", request_id))]
            return []
        if kind == "result":
            request.results.append(Result.from_record(message.get("result", {})))
            return []
        del self._requests[request_id]
        if kind == "error":
            return [_resolve(request.future, ServerError(message.get("why", ""), request_id))]
        if kind == "done" and message.get("error"):
            # The request failed as a whole on the server (its coordinator ended).
            return [_resolve(request.future, ServerError(message["error"], request_id))]
        return [_resolve(request.future, request.outcome(message))]
