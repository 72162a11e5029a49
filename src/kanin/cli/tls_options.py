"""`kanin server`'s TLS options, as RabbitMQ's listeners.ssl and ssl_options
(https://www.rabbitmq.com/ssl.html): the options, the ones that need others, and the
BrokerConfig fields they set. The certificate files themselves are read when the broker
starts (kanin.server.tls), which names a file it cannot use."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from kanin.config import CERT_LOGIN_FROM, TLS_VERIFY_MODES


def add_tls_options(server: argparse.ArgumentParser) -> None:
    """RabbitMQ's listeners.ssl and ssl_options (https://www.rabbitmq.com/ssl.html)."""
    tls = server.add_argument_group(
        "TLS",
        "AMQP over TLS (amqps) listens beside the plain port when --tls-cert and "
        "--tls-key are given",
    )
    tls.add_argument(
        "--tls-port",
        type=int,
        metavar="PORT",
        default=5671,
        help="amqps port, on the --bind address(es) (default 5671, as RabbitMQ's "
        "listeners.ssl.default)",
    )
    tls.add_argument(
        "--tls-cert", type=Path, metavar="FILE", help="the server's certificate (chain), PEM"
    )
    tls.add_argument(
        "--tls-key", type=Path, metavar="FILE", help="its private key, PEM, unencrypted"
    )
    tls.add_argument(
        "--tls-ca",
        type=Path,
        metavar="FILE",
        help="CA bundle (PEM) client certificates are verified against (ssl_options.cacertfile)",
    )
    tls.add_argument(
        "--tls-verify",
        choices=TLS_VERIFY_MODES,
        default="none",
        help="peer: ask clients for a certificate and refuse one that does not verify "
        "(ssl_options.verify = verify_peer; needs --tls-ca); none: ask for none (default)",
    )
    tls.add_argument(
        "--tls-fail-if-no-peer-cert",
        action="store_true",
        help="with --tls-verify peer, refuse clients that send no certificate "
        "(ssl_options.fail_if_no_peer_cert)",
    )
    tls.add_argument(
        "--tls-cert-login-from",
        choices=CERT_LOGIN_FROM,
        default="distinguished_name",
        help="the user name the EXTERNAL mechanism takes from a verified client certificate: "
        "its subject's distinguished name, as RabbitMQ does by default (openssl x509 -noout "
        "-subject -nameopt RFC2253 shows it), or its common name (CN) (ssl_cert_login_from)",
    )
    tls.add_argument(
        "--mgmt-tls",
        action="store_true",
        help="serve the management API over HTTPS on --mgmt-port, with --tls-cert and "
        "--tls-key (RabbitMQ's management.ssl listener)",
    )
    tls.add_argument(
        "--prometheus-tls",
        action="store_true",
        help="serve the Prometheus metrics over HTTPS on --prometheus-port, with --tls-cert "
        "and --tls-key",
    )


def tls_problem(args: argparse.Namespace) -> tuple[str, str] | None:
    """(the option's dest, what is wrong) for TLS options missing another they need."""
    if (args.tls_cert is None) != (args.tls_key is None):
        dest = "tls_cert" if args.tls_cert is not None else "tls_key"
        return dest, "--tls-cert and --tls-key go together: give both or neither"
    needs = [
        ("tls_verify", args.tls_verify == "peer" and args.tls_ca is None, "--tls-ca"),
        (
            "tls_fail_if_no_peer_cert",
            args.tls_fail_if_no_peer_cert and args.tls_verify != "peer",
            "--tls-verify peer",
        ),
        ("mgmt_tls", args.mgmt_tls and args.tls_cert is None, "--tls-cert and --tls-key"),
        (
            "prometheus_tls",
            args.prometheus_tls and args.tls_cert is None,
            "--tls-cert and --tls-key",
        ),
    ]
    for dest, missing, needed in needs:
        if missing:
            given = "--tls-verify peer" if dest == "tls_verify" else f"--{dest.replace('_', '-')}"
            return dest, f"{given} needs {needed}"
    return None


def tls_settings(args: argparse.Namespace) -> dict[str, Any]:
    """BrokerConfig's TLS fields from the options."""
    return {
        "tls_port": args.tls_port,
        "tls_cert": args.tls_cert,
        "tls_key": args.tls_key,
        "tls_ca": args.tls_ca,
        "tls_verify": args.tls_verify,
        "tls_fail_if_no_peer_cert": args.tls_fail_if_no_peer_cert,
        "tls_cert_login_from": args.tls_cert_login_from,
        "mgmt_tls": args.mgmt_tls,
        "prometheus_tls": args.prometheus_tls,
    }
