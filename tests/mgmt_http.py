"""A small HTTP client for the management API tests: real requests over a socket
(urllib), basic auth, JSON in and out. Import it as `from mgmt_http import Api`."""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    text: str

    @property
    def json(self) -> Any:
        return json.loads(self.text)


@dataclass
class Api:
    base: str  # http://host:port, or https://
    user: str = "guest"
    password: str = "guest"
    tls: ssl.SSLContext | None = None  # what verifies an https:// server

    def as_user(self, user: str, password: str) -> Api:
        return Api(self.base, user, password, self.tls)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
        auth: bool = True,
    ) -> Reply:
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        if auth:
            token = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        for key, value in (headers or {}).items():
            request.add_header(key, value)
        try:
            with urllib.request.urlopen(request, timeout=10, context=self.tls) as response:
                return Reply(response.status, dict(response.headers), response.read().decode())
        except urllib.error.HTTPError as error:
            return Reply(error.code, dict(error.headers), error.read().decode())

    def get(self, path: str) -> Reply:
        return self.request("GET", path)

    def put(self, path: str, body: Any = None) -> Reply:
        return self.request("PUT", path, {} if body is None else body)

    def post(self, path: str, body: Any = None) -> Reply:
        return self.request("POST", path, {} if body is None else body)

    def delete(self, path: str, headers: dict[str, str] | None = None) -> Reply:
        return self.request("DELETE", path, headers=headers)


def q(name: str) -> str:
    """A name as a path segment (a vhost "/" is %2F)."""
    return quote(name, safe="")
