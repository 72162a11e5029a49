"""What the broker logs about failed TLS handshakes (kanin.server.tls_accept): OpenSSL's
reasons with what they usually mean, and at most so many lines per window in a flood."""

from __future__ import annotations

import logging
import ssl

import pytest

from kanin.server import tls_accept
from kanin.server.tls_accept import FailureLog, failure_reason


def ssl_error(reason: str) -> ssl.SSLError:
    error = ssl.SSLError(1, f"[SSL: {reason}] ...")
    error.reason = reason
    return error


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (ssl_error("WRONG_VERSION_NUMBER"), "wrong version number (not TLS: a plain AMQP"),
        (ssl_error("HTTP_REQUEST"), "http request (plain HTTP on the amqps port)"),
        (ssl_error("DECRYPTION_FAILED"), "decryption failed"),
        (
            ConnectionAbortedError("SSL handshake is taking longer than 10.0 seconds"),
            "no handshake",
        ),
        (ConnectionResetError(104, "reset"), "the client hung up"),
        (OSError(24, "Too many open files"), "[Errno 24] Too many open files"),
    ],
)
def test_a_failure_is_said_in_words(error: BaseException, said: str) -> None:
    assert failure_reason(error).startswith(said)


def test_a_refused_certificate_says_why() -> None:
    error = ssl.SSLCertVerificationError(1, "certificate verify failed")
    error.reason = "CERTIFICATE_VERIFY_FAILED"
    error.verify_message = "certificate has expired"
    assert failure_reason(error) == "client certificate refused: certificate has expired"


def test_a_flood_is_logged_up_to_the_limit_then_counted(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="kanin.server.tls")
    now = [100.0]
    failures = FailureLog(clock=lambda: now[0])
    for n in range(tls_accept.FAILURES_LOGGED + 5):
        failures.failed(f"10.0.0.1:{n}", "wrong version number")
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == tls_accept.FAILURES_LOGGED
    assert lines[0] == "TLS handshake with 10.0.0.1:0 failed: wrong version number"
    now[0] += tls_accept.FAILURE_WINDOW_S  # the next window: the count, then lines again
    failures.failed("10.0.0.2:1", "the client hung up")
    assert [record.getMessage() for record in caplog.records][-2:] == [
        "5 more TLS handshakes failed in the last 10 s (not logged one by one)",
        "TLS handshake with 10.0.0.2:1 failed: the client hung up",
    ]
