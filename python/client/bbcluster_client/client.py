"""The client of `bbcluster serve` (docs/serving.md)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import getpass
import os
import socket
import uuid
from typing import (Any, Callable, Dict, Iterable, Iterator, Mapping, Optional, Sequence, Tuple,
                    Union)

from .connection import Connection
from .errors import BBClusterError, Timeout
from .kernels import Kernel, Source, kernel_of, scan_kernel_dir
from .pending import PendingRequests, RequestFuture
from .records import InputResult, Result, SweepResult

DEFAULT_ADDRESS = "tcp://127.0.0.1:5590"
DEFAULT_TIMEOUT_S = 30.0

# What a sweep's kernels map takes per operator: a Kernel, a source (text or file, as
# evaluate's `source`), a (source, kind) pair, or None for the operator itself (aten).
KernelSpec = Union[Kernel, Source, Tuple[Optional[Source], Optional[str]], None]


def default_client_name() -> str:
    """user@host-pid: what the server's logs, status and request folders call this client."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no user name in the environment or the password database
        user = "user"
    return f"{user}@{socket.gethostname()}-{os.getpid()}"


def _setting_text(value: Any) -> str:
    # Settings travel as the text `--set KEY=VALUE` would give.
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _kernel_of_spec(spec: KernelSpec) -> Kernel:
    if isinstance(spec, tuple):
        source, kind = spec
        return kernel_of(source, kind)
    return kernel_of(spec)


class Client:
    """A connection to `bbcluster serve`.

    `keys` is the folder `bbcluster keygen` made: the client presents its coordinator.key and
    expects the server's node.pub (CURVE). `name` is how the server's logs and status call this
    client (default user@host-pid). `timeout` (seconds) bounds the wait for the welcome and for
    `status`, and how long the server may stay silent while requests are unfinished before they
    fail with Timeout (it answers the client's pings every 2 s). Raises Timeout when no welcome
    comes and ServerError when the server refuses the hello.

    Request options, for every evaluate and sweep form: `suite` (torchbench, smoke, opinfo,
    facto), `data` (a trace file or parquet on the server's machine, as --data), `topn` (as
    --topn; 0: all inputs), `settings` (setting key -> value, sweep-scope keys only, as --set).
    """

    def __init__(self, address: str = DEFAULT_ADDRESS, keys: Optional[Source] = None,
                 name: Optional[str] = None, timeout: float = DEFAULT_TIMEOUT_S):
        self.address = address
        self.timeout = timeout
        self._pending = PendingRequests()
        self._connection = Connection(address, None if keys is None else os.fspath(keys),
                                      name if name is not None else default_client_name(),
                                      timeout, self._pending)

    @property
    def welcome(self) -> Dict[str, Any]:
        """The server's welcome: proto, slots (evaluator slots), device (cpu or cuda), version."""
        return dict(self._connection.welcome)

    def submit(self, op: str, source: Union[Source, Kernel, None] = None,
               kind: Optional[str] = None, *, suite: str = "torchbench",
               data: Optional[Source] = None, topn: Optional[int] = None,
               settings: Optional[Mapping[str, Any]] = None,
               on_input: Optional[Callable[[InputResult], None]] = None) -> RequestFuture:
        """Sends one operator's kernel; the future resolves to its Result. `op` is what --ops
        takes (relu, relu.default, aten.relu.default) and must select exactly one operator.
        `source` is the kernel's text, or a file (kind from its extension: .py, .cu, .cpp),
        or None for the operator itself (kind aten); `kind` overrides (kernels.kernel_of).
        `on_input` is called with each input's records as the input ends (InputResult, on the
        client's I/O thread); the future's `inputs` holds them too."""
        return self._send({op: kernel_of(source, kind)}, op, [], suite, data, topn, settings, on_input)

    def evaluate(self, op: str, source: Union[Source, Kernel, None] = None,
                 kind: Optional[str] = None, *, suite: str = "torchbench",
                 data: Optional[Source] = None, topn: Optional[int] = None,
                 settings: Optional[Mapping[str, Any]] = None,
                 timeout: Optional[float] = None,
                 on_input: Optional[Callable[[InputResult], None]] = None) -> Result:
        """submit() and wait. Raises ServerError, RequestCancelled, or Timeout after `timeout`
        seconds (the request is then cancelled on the server)."""
        future = self.submit(op, source, kind, suite=suite, data=data, topn=topn,
                             settings=settings, on_input=on_input)
        return self._wait(future, timeout)

    def evaluate_many(self, items: Iterable[Union[Mapping[str, Any], Sequence[Any]]], *,
                      return_exceptions: bool = False, timeout: Optional[float] = None,
                      **options: Any) -> Iterator[Union[Result, BBClusterError]]:
        """Submits every item now and yields their Results as they finish. An item is
        submit()'s arguments: a dict ({"op": "relu", "source": "relu.py"}) or a tuple
        (op, source[, kind]); `options` apply to every item that does not set them. A failed
        request raises its error, or is yielded as the error with return_exceptions=True.
        When the loop ends early (an error, a break, `timeout` seconds in all) the unfinished
        requests are cancelled."""
        futures = []
        try:
            for item in items:
                if isinstance(item, Mapping):
                    futures.append(self.submit(**{**options, **item}))
                else:
                    futures.append(self.submit(*item, **options))
        except BaseException:
            self._cancel_unfinished(futures)
            raise
        return self._as_completed(futures, return_exceptions, timeout)

    def _as_completed(self, futures, return_exceptions, timeout):
        finished = concurrent.futures.as_completed(futures, timeout)
        try:
            while True:
                try:
                    future = next(finished)
                except StopIteration:
                    return
                except concurrent.futures.TimeoutError:
                    unfinished = sum(not f.done() for f in futures)
                    raise Timeout(f"{unfinished} of {len(futures)} requests unfinished after "
                                  f"{timeout:g} s; they are cancelled") from None
                error = future.exception()
                if error is None:
                    yield future.result()
                elif return_exceptions:
                    yield error
                else:
                    raise error
        finally:
            self._cancel_unfinished(futures)

    def submit_sweep(self, kernels: Union[Mapping[str, KernelSpec], Source], *,
                     suite: str = "torchbench", data: Optional[Source] = None,
                     topn: Optional[int] = None,
                     settings: Optional[Mapping[str, Any]] = None,
                     on_input: Optional[Callable[[InputResult], None]] = None) -> RequestFuture:
        """Sends many operators' kernels in one request; the future resolves to a SweepResult.
        `kernels` maps operator names to KernelSpecs, or is a folder in BackendBench's layout
        (<dir>/<op folder>/<op folder>_implementation_v1.py, ...; kernels.scan_kernel_dir):
        its folders without a kernel are listed in the SweepResult's problems."""
        if isinstance(kernels, Mapping):
            chosen, problems = {op: _kernel_of_spec(spec) for op, spec in kernels.items()}, []
        else:
            chosen, problems = scan_kernel_dir(kernels)
            if not chosen:
                raise ValueError(f"{os.fspath(kernels)}: no operator folder holds a kernel"
                                 + "".join(f"\n  {p}" for p in problems))
        if not chosen:
            raise ValueError("no kernels to sweep")
        return self._send(chosen, None, problems, suite, data, topn, settings, on_input)

    def sweep(self, kernels: Union[Mapping[str, KernelSpec], Source], *,
              suite: str = "torchbench", data: Optional[Source] = None,
              topn: Optional[int] = None, settings: Optional[Mapping[str, Any]] = None,
              timeout: Optional[float] = None,
              on_input: Optional[Callable[[InputResult], None]] = None) -> SweepResult:
        """submit_sweep() and wait. A cancelled sweep returns what finished (cancelled=True)."""
        future = self.submit_sweep(kernels, suite=suite, data=data, topn=topn,
                                   settings=settings, on_input=on_input)
        return self._wait(future, timeout)

    async def aevaluate(self, op: str, source: Union[Source, Kernel, None] = None,
                        kind: Optional[str] = None, **options: Any) -> Result:
        """evaluate() for asyncio; cancelling the awaiting task cancels the request."""
        return await self._await(self.submit(op, source, kind, **options))

    async def asweep(self, kernels: Union[Mapping[str, KernelSpec], Source],
                     **options: Any) -> SweepResult:
        """sweep() for asyncio; cancelling the awaiting task cancels the request."""
        return await self._await(self.submit_sweep(kernels, **options))

    def cancel(self, request: Union[RequestFuture, str]) -> bool:
        """Asks the server to cancel a request (its future or its id). Its future then raises
        RequestCancelled (a sweep resolves with cancelled=True), unless its result came first.
        False when the request is not unfinished."""
        request_id = request.request_id if isinstance(request, RequestFuture) else request
        if not self._pending.is_unfinished(request_id):
            return False
        self._connection.send({"kind": "cancel", "id": request_id})
        return True

    def status(self) -> Dict[str, Any]:
        """The server's status: slots, busy, queued (client -> jobs queued), requests
        (client -> unfinished requests), clients."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        future.set_running_or_notify_cancel()
        self._pending.add_status(future)
        try:
            self._connection.send({"kind": "status"})
        except BaseException:
            self._pending.discard(future)
            raise
        finished, _ = concurrent.futures.wait([future], self.timeout)
        if not finished:
            self._pending.discard(future)
            raise Timeout(f"no status from {self.address} within {self.timeout:g} s")
        return future.result()

    def close(self) -> None:
        """Says bye: the server cancels this client's unfinished requests, and their futures
        fail. Idempotent."""
        self._connection.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def resume(self, request_id: str, timeout: Optional[float] = None) -> SweepResult:
        """A request this client's name sent before, to this server or to the one it restarted
        as (the server takes up the requests it had accepted): its records, all of them, as a
        SweepResult. Clients are known by name: give Client the same `name` as the one that sent
        it. ServerError when the server has no such request of this name."""
        return self._wait(self.submit_resume(request_id), timeout)

    def submit_resume(self, request_id: str) -> RequestFuture:
        """resume() as a future."""
        if self._pending.is_unfinished(request_id):
            raise BBClusterError(f"this client is already waiting for request {request_id}", request_id)
        future = RequestFuture(request_id, None)
        self._pending.add(future, single=False, problems=[])
        try:
            self._connection.send({"kind": "resume", "id": request_id})
        except BaseException:
            self._pending.discard(future)
            raise
        return future

    def _send(self, kernels: Dict[str, Kernel], op: Optional[str], problems, suite, data, topn,
              settings, on_input=None) -> RequestFuture:
        request_id = uuid.uuid4().hex
        message: Dict[str, Any] = {
            "kind": "evaluate", "id": request_id, "suite": suite,
            "kernels": {name: kernel.message() for name, kernel in kernels.items()}}
        if data is not None:
            message["data"] = os.fspath(data)
        if topn is not None:
            message["topn"] = int(topn)
        if settings:
            message["settings"] = {k: _setting_text(v) for k, v in settings.items()}
        future = RequestFuture(request_id, op)
        if on_input is not None:
            future.add_input_callback(on_input)
        # Registered before it is sent: the I/O thread may hear its answer before send returns.
        self._pending.add(future, single=op is not None, problems=problems)
        try:
            self._connection.send(message)
        except BaseException:
            self._pending.discard(future)
            raise
        return future

    def _wait(self, future: RequestFuture, timeout: Optional[float]):
        try:
            finished, _ = concurrent.futures.wait([future], timeout)
        except BaseException:  # KeyboardInterrupt: the request must not keep the cluster busy
            self._cancel_unfinished([future])
            raise
        if not finished:
            self._cancel_unfinished([future])
            raise Timeout(f"request {future.request_id} ({future.op or 'sweep'}) did not finish "
                          f"within {timeout:g} s; it is cancelled", future.request_id)
        return future.result()

    async def _await(self, future: RequestFuture):
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            self._cancel_unfinished([future])
            raise

    def _cancel_unfinished(self, futures) -> None:
        for future in futures:
            if not future.done():
                try:
                    self.cancel(future)
                except BBClusterError:  # closed or failed: the server cancels it on its own
                    pass
