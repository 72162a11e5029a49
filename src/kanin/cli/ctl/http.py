"""The management HTTP API as `kanin ctl` calls it: urllib, basic auth, JSON both ways,
and every failure turned into a CtlError naming the URL or the API's reason."""

from __future__ import annotations

import base64
import json
import socket
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from kanin.cli.ctl.errors import (
    EX_DATAERR,
    EX_SOFTWARE,
    EX_TEMPFAIL,
    EX_UNAVAILABLE,
    EX_USAGE,
    ApiError,
    CtlError,
    exit_code_for_status,
)


def segment(name: str) -> str:
    """A name as one path segment: the vhost "/" is %2F."""
    return quote(name, safe="")


@dataclass(frozen=True)
class Reply:
    status: int
    body: Any  # the JSON answer, or None for an empty one (201, 204)


@dataclass(frozen=True)
class Api:
    url: str  # http://host:port, maybe with a path prefix (a proxy's)
    username: str
    password: str
    timeout: float

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise CtlError(f"--url {self.url!r}: not an http:// or https:// URL", EX_USAGE)

    def get(self, path: str, **query: str) -> Any:
        return self.call("GET", path, query=query).body

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: dict[str, str] | None = None,
        missing: str | None = None,
        missing_exit: int = EX_DATAERR,
    ) -> Reply:
        """One request. `missing` is the message for a 404 (what was not found)."""
        target = self.url.rstrip("/") + path + (f"?{urlencode(query)}" if query else "")
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(target, data=data, method=method)
        token = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return Reply(response.status, self._json(response.read(), method, path))
        except urllib.error.HTTPError as error:
            raise self._api_error(error, method, path, missing, missing_exit) from None
        except urllib.error.URLError as error:
            raise self._unreachable(error.reason) from None
        except TimeoutError:
            raise self._unreachable(TimeoutError()) from None
        except OSError as error:  # reset while reading, a TLS failure, and the like
            raise self._unreachable(error) from None

    def _json(self, raw: bytes, method: str, path: str) -> Any:
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            raise CtlError(
                f"{method} {self.url}{path}: the answer is not JSON; is this the management "
                "API's URL?",
                EX_SOFTWARE,
            ) from None

    def _api_error(
        self,
        error: urllib.error.HTTPError,
        method: str,
        path: str,
        missing: str | None,
        missing_exit: int,
    ) -> ApiError:
        reason = _reason(error)
        status = error.code
        if status == 404 and missing is not None:
            return ApiError(missing, missing_exit, status, reason)
        if status == 401:
            message = f"{self.url} refused user {self.username!r}: {reason}"
            if reason == "Login failed":
                message += " (wrong username or password, or a loopback-only user such as guest)"
            else:
                message += " (the user lacks the tag or permission this needs)"
            return ApiError(message, exit_code_for_status(status), status, reason)
        message = f"{method} {path}: {status} {error.reason}: {reason}"
        return ApiError(message, exit_code_for_status(status), status, reason)

    def _unreachable(self, reason: object) -> CtlError:
        if isinstance(reason, TimeoutError):
            return CtlError(f"{self.url}: no answer within {self.timeout:g} s", EX_TEMPFAIL)
        if isinstance(reason, ConnectionRefusedError):
            what = "connection refused (is kanin running, with its management API on that port?)"
        elif isinstance(reason, socket.gaierror):
            what = f"cannot resolve the host ({reason.strerror})"
        else:
            what = str(getattr(reason, "strerror", None) or reason)
        return CtlError(f"cannot reach {self.url}: {what}", EX_UNAVAILABLE)


def _reason(error: urllib.error.HTTPError) -> str:
    """The API's JSON `reason` (or `error`), else the start of the body, else the status."""
    try:
        raw = error.read()
    except OSError:
        raw = b""
    try:
        body = json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace").strip()[:200] or str(error.reason)
    if isinstance(body, dict):
        return str(body.get("reason") or body.get("error") or error.reason)
    return str(error.reason)
