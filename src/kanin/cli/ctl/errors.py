"""How `kanin ctl` fails: one line naming the problem, and an exit status from sysexits.h,
as rabbitmqctl's are (https://www.rabbitmq.com/rabbitmqctl.8.html)."""

from __future__ import annotations

EX_OK = 0
EX_USAGE = 64  # a wrong command line (argparse's own errors are mapped to it too)
EX_DATAERR = 65  # the server refused the data: no such queue or vhost, a bad argument
EX_NOINPUT = 66  # import_definitions: the file cannot be read
EX_NOUSER = 67  # no such user (as rabbitmqctl's no_such_user)
EX_UNAVAILABLE = 69  # no answer at the URL, a failed health check, an API the server lacks
EX_SOFTWARE = 70  # the server answered 5xx or something that is not the API's JSON
EX_CANTCREAT = 73  # export_definitions: the file cannot be written
EX_TEMPFAIL = 75  # a timeout: the server may answer later
EX_NOPERM = 77  # 401/403: credentials refused, or the user lacks the tag or permission


class CtlError(Exception):
    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class ApiError(CtlError):
    """The API answered with an error status; `reason` is its JSON body's."""

    def __init__(self, message: str, exit_code: int, status: int, reason: str) -> None:
        super().__init__(message, exit_code)
        self.status = status
        self.reason = reason


def exit_code_for_status(status: int) -> int:
    if status in (401, 403):
        return EX_NOPERM
    if status == 503:  # a health check that failed, or a node not ready
        return EX_UNAVAILABLE
    if status >= 500:
        return EX_SOFTWARE
    return EX_DATAERR
