"""API errors as RabbitMQ's management plugin answers them: a status code and a JSON body
`{"error": ..., "reason": ...}`.

RabbitMQ 3.10 answers a refusal for lack of a tag or a permission with 401, not 403, and
a refused declare (its AMQP 403 ACCESS_REFUSED) with 401 "Access refused.": tools rely on
those codes, so kanin answers the same.
"""

from __future__ import annotations

import json

from aiohttp import web

from kanin.amqp import constants as C
from kanin.amqp.errors import AMQPError

# What RabbitMQ's management plugin sends with every 401.
AUTHENTICATE_HEADER = {"WWW-Authenticate": 'Basic realm="RabbitMQ Management"'}


class ApiError(Exception):
    def __init__(self, status: int, error: str, reason: str) -> None:
        super().__init__(f"{status} {error}: {reason}")
        self.status = status
        self.error = error
        self.reason = reason

    def response(self, prompt: bool = True) -> web.Response:
        """`prompt`: a 401 carries WWW-Authenticate. The web UI asks without it (a browser
        shown the header opens its own login dialog over the UI's login form)."""
        headers = AUTHENTICATE_HEADER if self.status == 401 and prompt else None
        body = json.dumps({"error": self.error, "reason": self.reason})
        return web.Response(
            status=self.status, text=body, content_type="application/json", headers=headers
        )


def not_found() -> ApiError:
    return ApiError(404, "Object Not Found", "Not Found")


def bad_request(reason: str) -> ApiError:
    return ApiError(400, "bad_request", reason)


def not_authorised(reason: str) -> ApiError:
    return ApiError(401, "not_authorised", reason)


def login_failed() -> ApiError:
    # RabbitMQ spells it with a z here, and with an s for a missing tag.
    return ApiError(401, "not_authorized", "Login failed")


def from_amqp(exc: AMQPError) -> ApiError:
    """A refusal of the broker's own (a declare, bind or delete the AMQP path would refuse
    with this code and text) as RabbitMQ's management plugin reports it."""
    if exc.reply_code == C.ACCESS_REFUSED:
        return not_authorised("Access refused.")
    if exc.reply_code == C.NOT_FOUND:
        return ApiError(404, "not_found", bare_text(exc))
    return bad_request(bare_text(exc))


def bare_text(exc: AMQPError) -> str:
    """The reply text without its "NAME - " prefix, as the management plugin quotes it."""
    return exc.reply_text.partition(" - ")[2] or exc.reply_text
