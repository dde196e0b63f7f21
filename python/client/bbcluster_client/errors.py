"""What the client raises. Every error of this package is a BBClusterError."""

from __future__ import annotations

from typing import Optional


class BBClusterError(Exception):
    """Base of the client's errors. `request_id` names the request it is about, if any."""

    def __init__(self, message: str, request_id: Optional[str] = None):
        super().__init__(message)
        self.request_id = request_id


class ServerError(BBClusterError):
    """The server answered with `error`; `why` is its reason."""

    def __init__(self, why: str, request_id: Optional[str] = None):
        super().__init__(why, request_id)
        self.why = why


class RequestCancelled(BBClusterError):
    """The request was cancelled (by `Client.cancel`, a timeout, or the server) before it had a
    result."""


class Timeout(BBClusterError, TimeoutError):
    """Something took longer than its timeout: the server's welcome, an answer, or a request.
    Also a built-in TimeoutError, so `except TimeoutError` catches it."""
