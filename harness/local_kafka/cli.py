"""`local-kafka up|down|status|add-broker|tool`: the local cluster's command line.

A dev tool, not the product, so argparse lives here too. scripts/local-kafka runs it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from harness.local_kafka.cluster import LocalKafka
from harness.local_kafka.jars import TOOLS, tool_command_for
from harness.local_kafka.report import LocalKafkaError
from harness.local_kafka.settings import (
    DEFAULT_BROKERS,
    DEFAULT_DIR,
    DEFAULT_KAFKA_VERSION,
    DEFAULT_PORT_BASE,
    DEFAULT_TIMEOUT,
    HOST,
)


def _parse_props(pairs: Sequence[str]) -> dict[str, str]:
    props = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise LocalKafkaError(f"--broker-prop expects key=value, got {pair!r}", 2)
        props[key.strip()] = value
    return props


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="local-kafka",
        description=(
            "Run a real Apache Kafka cluster (KRaft, plain JVMs) on 127.0.0.1 for development and "
            "tests. Node 1 is broker+controller, nodes 2..N are brokers. Node i listens on "
            "PLAINTEXT port-base+i-1 and SASL_PLAINTEXT port-base+100+i-1 (SCRAM-SHA-256/512 and "
            "PLAIN; users admin, alice, bob with password <name>-secret); the controller on "
            "port-base+200; SSL on port-base+300+i-1, SASL_SSL on port-base+400+i-1 and SSL "
            "requiring a client certificate on port-base+500+i-1, with a throwaway CA in "
            "DIR/tls (ca.pem; proxy.pem and proxy.key are a client certificate it signed). "
            "Jars come from Maven once and are cached under "
            "${XDG_CACHE_HOME:-~/.cache}/kafka-policy-proxy/."
        ),
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add_dir(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--dir",
            type=Path,
            default=DEFAULT_DIR,
            help=f"cluster directory (default: {DEFAULT_DIR})",
        )

    def add_version(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--kafka-version",
            default=None,
            help=f"Kafka version (default: $KAFKA_VERSION or {DEFAULT_KAFKA_VERSION})",
        )

    up = sub.add_parser(
        "up",
        help="start a cluster; prints its bootstrap servers on stdout",
        description=(
            "Format storage, start the JVMs detached and wait until Metadata lists every broker. "
            "Prints the PLAINTEXT bootstrap servers on one line of stdout; progress goes to "
            "stderr. If the cluster in --dir is already running, just prints its servers."
        ),
    )
    add_dir(up)
    add_version(up)
    up.add_argument(
        "--brokers", type=int, default=DEFAULT_BROKERS, help="number of nodes (default: 3)"
    )
    up.add_argument(
        "--port-base",
        type=int,
        default=DEFAULT_PORT_BASE,
        help=f"first PLAINTEXT port (default: {DEFAULT_PORT_BASE})",
    )
    up.add_argument(
        "--broker-prop",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra broker property, repeatable; overrides the launcher's defaults",
    )
    up.add_argument(
        "--jar",
        action="append",
        default=[],
        type=Path,
        metavar="PATH",
        help="a jar added to every node's classpath, repeatable (e.g. a broker-side policy "
        "named by --broker-prop create.topic.policy.class.name=...)",
    )
    up.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help=f"seconds to wait for the brokers (default: {DEFAULT_TIMEOUT:.0f})",
    )

    down = sub.add_parser(
        "down",
        help="stop the cluster and remove its directory",
        description="Stop every node "
        "(SIGTERM, brokers first; SIGKILL after 30 s) and remove the directory unless --keep.",
    )
    add_dir(down)
    down.add_argument("--keep", action="store_true", help="keep the directory (data and logs)")

    status = sub.add_parser(
        "status",
        help="show whether each node runs; prints bootstrap servers",
        description="Show each node's state and ports; exit 0 if all run, 1 otherwise.",
    )
    add_dir(status)

    add = sub.add_parser(
        "add-broker",
        help="start one more broker in the running cluster; prints its node id",
        description="Start one more broker-only node and wait until Metadata lists it.",
    )
    add_dir(add)
    add.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help=f"seconds to wait (default: {DEFAULT_TIMEOUT:.0f})",
    )

    tool = sub.add_parser(
        "tool",
        help="run a Kafka CLI tool, e.g. `tool kafka-topics --bootstrap-server ... --list`",
        description=(
            "Run a Kafka CLI tool by its bin/ script name (with or without .sh) from the cached "
            "jars. Without NAME, list the known tools. Known: " + ", ".join(sorted(TOOLS)) + "."
        ),
    )
    add_dir(tool)
    add_version(tool)
    tool.add_argument("name", nargs="?", metavar="NAME", help="tool name, e.g. kafka-topics")
    tool.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="the tool's args")
    return parser


def _cmd_status(cluster: LocalKafka) -> int:
    nodes = cluster.node_status()
    if not nodes:
        print(f"no cluster in {cluster.directory}", file=sys.stderr)
        return 1
    alive = sum(1 for node in nodes if node["alive"])
    overall = "running" if alive == len(nodes) else f"{alive} of {len(nodes)} nodes running"
    print(f"cluster {cluster.cluster_id} in {cluster.directory}: {overall}", file=sys.stderr)
    for node in nodes:
        ports = (
            f"PLAINTEXT {HOST}:{node['port']}  SASL_PLAINTEXT {HOST}:{node['sasl_port']}  "
            f"SSL {HOST}:{node['ssl_port']}  SASL_SSL {HOST}:{node['sasl_ssl_port']}  "
            f"SSL+client-auth {HOST}:{node['mtls_port']}"
        )
        if node["controller_port"] is not None:
            ports += f"  CONTROLLER {HOST}:{node['controller_port']}"
        if node["advertised_port"] != node["port"]:
            ports += f"  (advertises {HOST}:{node['advertised_port']})"
        state = f"running (pid {node['pid']})" if node["alive"] else "stopped"
        line = f"  node {node['node_id']:<3} {node['roles']:<17} {state:<20} {ports}"
        print(line, file=sys.stderr)
    if alive:
        print(cluster.bootstrap_servers)
    return 0 if alive == len(nodes) else 1


def _run(argv: Sequence[str]) -> int:
    args = _build_parser().parse_args(argv)
    if args.command == "up":
        cluster = LocalKafka(
            args.dir,
            brokers=args.brokers,
            port_base=args.port_base,
            kafka_version=args.kafka_version,
            broker_props=_parse_props(args.broker_prop),
            extra_jars=args.jar,
        )
        print(cluster.up(timeout=args.timeout), flush=True)
        return 0
    if args.command == "down":
        LocalKafka(args.dir).down(keep=args.keep)
        return 0
    if args.command == "status":
        return _cmd_status(LocalKafka(args.dir))
    if args.command == "add-broker":
        print(LocalKafka(args.dir).add_broker(timeout=args.timeout), flush=True)
        return 0
    if args.name is None:
        for name in sorted(TOOLS):
            print(f"{name:<30} {TOOLS[name]}")
        return 0
    # The running cluster's version, unless one was asked for explicitly.
    version = args.kafka_version or LocalKafka(args.dir).kafka_version
    command = tool_command_for(version, args.name, *args.args)
    sys.stdout.flush()
    os.execv(command[0], command)


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit code."""
    try:
        return _run(sys.argv[1:] if argv is None else argv)
    except LocalKafkaError as exc:
        print(f"local-kafka: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
