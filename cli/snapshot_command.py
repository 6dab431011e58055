"""`kafka-policy-proxy snapshot`: write every topic of a cluster to a JSON Lines file."""

from __future__ import annotations

import argparse
import asyncio
import ssl
import sys
from pathlib import Path
from typing import NamedTuple, TextIO

from kafka_policy_proxy.proxy.cluster.client import SaslLogin
from kafka_policy_proxy.proxy.cluster.login import sasl_login, tls_of
from kafka_policy_proxy.proxy.cluster.snapshot import (
    DEFAULT_TIMEOUT_S,
    parse_bootstrap,
    write_snapshot,
)
from kafka_policy_proxy.proxy.cluster.unavailable import ClusterStateUnavailable
from kafka_policy_proxy.proxy.kafka_client.security import ClientSecurity, load_client_security

OK, UNAVAILABLE, INVALID = 0, 1, 2

DESCRIPTION = """\
Write every topic of a Kafka cluster as JSON Lines, one compact JSON object
per line:

  {"kind":"cluster",...}  first: cluster id, time taken, brokers, and the
                          broker's default topic configs
  {"kind":"topic",...}    one per topic, sorted by name, internal topics
                          included and flagged: id, partitions, replication
                          factor, assignment, effective configs and the
                          source of each
  {"kind":"end",...}      last, with the number of topic lines; a file
                          without it is incomplete

PATH is written as PATH.tmp and renamed once complete. docs/snapshot.md
describes every field.

Exit codes: 0 written; 1 the cluster could not be read (unreachable, refused
the credentials, or answered with an error); 2 bad arguments or
--command-config.
"""


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the `snapshot` command on the main CLI."""
    parser = subparsers.add_parser(
        "snapshot",
        help="write every topic of a cluster to a JSON Lines file",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--bootstrap-server",
        required=True,
        metavar="HOST:PORT[,HOST:PORT...]",
        help="the brokers to read from (tried in turn until one answers)",
    )
    parser.add_argument(
        "--command-config",
        type=Path,
        metavar="FILE",
        help="Kafka client properties, as Kafka's CLI tools take them: security.protocol "
        "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL; ssl.truststore.*/ssl.keystore.* of type PEM "
        "or PKCS12; sasl.mechanism PLAIN, SCRAM-SHA-256/512 or OAUTHBEARER with sasl.jaas.config; "
        "secrets as ${file:PATH:KEY}, ${dir:DIR:FILE} or ${env:NAME} (docs/operations.md)",
    )
    parser.add_argument(
        "--out", required=True, metavar="PATH", help="the snapshot file; '-' for stdout"
    )
    parser.add_argument(
        "--timeout",
        type=_positive_seconds,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"for connecting and for each request (default {DEFAULT_TIMEOUT_S:g})",
    )
    parser.set_defaults(func=cmd_snapshot)


def _positive_seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < seconds < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return seconds


def cmd_snapshot(args: argparse.Namespace) -> int:
    """Run `snapshot`: 0 written, 1 the cluster could not be read, 2 bad arguments or config."""
    try:
        parse_bootstrap(args.bootstrap_server)
        security = (
            ClientSecurity()
            if args.command_config is None
            else load_client_security(args.command_config)
        )
        # Built here, so that a key that does not fit its certificate is a config error (2).
        connect = Connect(sasl_login(security), tls_of(security))
    except ValueError as exc:
        return _fail(str(exc), INVALID)
    if args.out == "-":
        return _snapshot_to(args, connect, sys.stdout, "stdout")
    target = Path(args.out)
    partial = target.with_name(f"{target.name}.tmp")
    try:
        out = partial.open("w", encoding="utf-8")
    except OSError as exc:
        return _fail(f"cannot write {partial}: {exc.strerror}", INVALID)
    try:
        with out:
            code = _snapshot_to(args, connect, out, str(target))
        if code == OK:
            partial.replace(target)
    finally:
        # Only a complete snapshot is left behind (after the rename there is nothing to remove).
        partial.unlink(missing_ok=True)
    return code


class Connect(NamedTuple):
    """How `snapshot` logs in to the brokers and speaks TLS to them (from --command-config)."""

    sasl: SaslLogin | None
    tls: ssl.SSLContext | None


def _snapshot_to(args: argparse.Namespace, connect: Connect, out: TextIO, name: str) -> int:
    try:
        count = asyncio.run(
            write_snapshot(
                args.bootstrap_server,
                out,
                sasl=connect.sasl,
                tls=connect.tls,
                timeout_s=args.timeout,
            )
        )
        out.flush()
    except ClusterStateUnavailable as exc:
        return _fail(str(exc), UNAVAILABLE)
    except OSError as exc:
        return _fail(f"cannot write {name}: {exc.strerror or exc}", UNAVAILABLE)
    print(f"kafka-policy-proxy snapshot: {count} topics written to {name}", file=sys.stderr)
    return OK


def _fail(message: str, code: int) -> int:
    print(f"kafka-policy-proxy snapshot: {message}", file=sys.stderr)
    return code
