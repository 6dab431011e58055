"""`kafka-policy-proxy policy check|eval|test|schema`: the offline policy tools."""

from __future__ import annotations

import argparse
import io
import json
import sys
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from kafka_policy_proxy.cli.instants import add_now, moment
from kafka_policy_proxy.cli.policy_except import add_parser as add_except_parser
from kafka_policy_proxy.policy.broker_configs import BrokerConfigDecision
from kafka_policy_proxy.policy.cluster import InMemoryCluster
from kafka_policy_proxy.policy.decision_log import is_unknown_topic, json_schema
from kafka_policy_proxy.policy.engine import CompiledPolicy
from kafka_policy_proxy.policy.exceptions import rfc3339
from kafka_policy_proxy.policy.judge import Verdict
from kafka_policy_proxy.policy.loader import PolicyError, load_policy, policy_json_schema
from kafka_policy_proxy.policy.model import Decision, Mode
from kafka_policy_proxy.policy.offline.cluster_spec import ClusterSpec
from kafka_policy_proxy.policy.offline.scenario import (
    evaluate_resources,
    evaluate_spec,
    parse_cluster,
    parse_request,
    parse_suite,
    resource_key,
)
from kafka_policy_proxy.policy.offline.snapshot_format import SnapshotError, parse_snapshot
from kafka_policy_proxy.policy.offline.suite import CaseResult, run_suite
from kafka_policy_proxy.policy.offline.suite_report import (
    FORMATS,
    json_report,
    junit_report,
    tap_report,
)

OK, DENIED, INVALID = 0, 1, 2


class _InputError(Exception):
    """A file could not be read; the message says which and why."""


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the `policy` command and its subcommands on the main CLI."""
    policy = subparsers.add_parser("policy", help="check, evaluate and test policy files offline")
    commands = policy.add_subparsers(dest="policy_command", required=True, metavar="COMMAND")

    check = commands.add_parser("check", help="validate a policy file (exit 0 valid, 2 invalid)")
    check.add_argument("file", type=Path, help="the policy file")
    check.add_argument(
        "--warn-days",
        type=int,
        default=14,
        metavar="N",
        help="warn about exceptions that expire within N days (default 14)",
    )
    check.add_argument(
        "--allow-expired",
        action="store_true",
        help="accept a policy holding expired exceptions (warn instead of exit 2)",
    )
    add_now(check)
    _no_plugins(check)
    check.set_defaults(func=cmd_check)

    evaluate = commands.add_parser(
        "eval", help="evaluate one described request (exit 0 all allowed, 1 any denied)"
    )
    evaluate.add_argument("file", type=Path, help="the policy file")
    evaluate.add_argument("--request", type=Path, required=True, help="the described request")
    evaluate.add_argument(
        "--cluster",
        type=Path,
        help="the cluster state: described (YAML) or a snapshot file (.jsonl)",
    )
    evaluate.add_argument(
        "--json", action="store_true", help="print one JSON object per topic or other resource"
    )
    add_now(evaluate)
    _no_plugins(evaluate)
    evaluate.set_defaults(func=cmd_eval)

    test = commands.add_parser("test", help="run a suite of expected decisions (exit 0 all pass)")
    test.add_argument("file", type=Path, help="the policy file")
    test.add_argument("cases", type=Path, help="the test cases file")
    test.add_argument("-v", "--verbose", action="store_true", help="show every decision")
    test.add_argument(
        "--format",
        choices=FORMATS,
        default="text",
        help="the report: text (default), junit (JUnit XML), json (one object per case) or tap "
        "(TAP version 14), for a CI system to show each case",
    )
    test.add_argument(
        "--output",
        type=Path,
        help="write the report to this file; the text report then goes to stdout",
    )
    add_now(test)
    _no_plugins(test)
    test.set_defaults(func=cmd_test)

    add_except_parser(commands)

    schema = commands.add_parser("schema", help="print the policy file's JSON Schema")
    schema.set_defaults(func=cmd_schema)

    audit_schema = commands.add_parser(
        "audit-schema", help="print the audit event's JSON Schema (docs/audit-event.schema.json)"
    )
    audit_schema.set_defaults(func=cmd_audit_schema)


def _no_plugins(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-plugins", action="store_true", help="do not import plugins (their rules are skipped)"
    )


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise _InputError(f"{path}: cannot read: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise _InputError(f"{path}: not UTF-8 text: {exc.reason}") from exc


def _load(args: argparse.Namespace) -> CompiledPolicy:
    return load_policy(
        _read(args.file),
        str(args.file),
        load_plugins=not args.no_plugins,
        base_dir=Path(args.file).parent,
        now=moment(args),
    )


def _guard(
    body: Callable[[argparse.Namespace, TextIO], int],
) -> Callable[[argparse.Namespace], int]:
    """Run a command; unreadable or invalid input is reported on stderr with exit code 2."""

    def run(args: argparse.Namespace) -> int:
        try:
            return body(args, sys.stdout)
        except (_InputError, PolicyError) as exc:
            print(exc, file=sys.stderr)
            return INVALID

    run.__doc__ = body.__doc__
    return run


def _check(args: argparse.Namespace, out: TextIO) -> int:
    """Validate a policy file; warn about exceptions expiring within --warn-days, and refuse
    expired ones (exit 2) unless --allow-expired."""
    policy = _load(args)
    try:
        document = policy.document
        now = moment(args)
        expired = [e.name for e in policy.exceptions.expired(now)]
        if expired and not args.allow_expired:
            print(
                f"invalid policy {args.file}: expired exceptions: {', '.join(expired)}; they "
                "waive nothing: remove them or renew their `expires` (or pass --allow-expired)",
                file=sys.stderr,
            )
            return INVALID
        print(
            f"{args.file}: OK ({len(document.rules)} rules, {len(document.plugins)} plugins, "
            f"{len(document.admin_apis)} admin_apis rules, "
            f"{len(document.broker_configs)} broker_configs rules"
            f"{', dry run' if document.dry_run else ''}"
            f"{', enforces nothing' if document.enforce == 'nothing' else ''}"
            f"{f', {len(document.exceptions)} exceptions' if document.exceptions else ''})",
            file=out,
        )
        for line in _expiry_warnings(policy, now, args.warn_days):
            print(line, file=out)
        return OK
    finally:
        policy.close()


def _expiry_warnings(policy: CompiledPolicy, now: datetime, days: int) -> list[str]:
    """A warning per exception expired, or expiring within `days`."""
    warnings = []
    for exception in policy.exceptions.items:
        when = rfc3339(exception.expires)
        left = (exception.expires - now).total_seconds() / 86400
        if not exception.in_force(now):
            warnings.append(f"warning: exception {exception.name!r} expired at {when}")
        elif left <= days:
            warnings.append(
                f"warning: exception {exception.name!r} expires in {left:.1f} days ({when})"
            )
    return warnings


def _cluster(path: Path | None) -> InMemoryCluster:
    """The described cluster (YAML), or the cluster of a snapshot file (.jsonl)."""
    if path is None:
        return ClusterSpec().build()
    text = _read(path)
    if path.suffix != ".jsonl":
        return parse_cluster(text, str(path)).build()
    try:
        return parse_snapshot(text.splitlines()).cluster
    except SnapshotError as exc:
        raise _InputError(f"{path}: not a usable snapshot: {exc}") from exc


def _eval(args: argparse.Namespace, out: TextIO) -> int:
    """Evaluate one described request and print the decision for each topic and resource."""
    spec = parse_request(_read(args.request), str(args.request))
    cluster = _cluster(args.cluster)
    policy = _load(args)
    try:
        verdicts = evaluate_spec(policy, spec, cluster, now=moment(args))
        resources = evaluate_resources(policy, spec, cluster)
    finally:
        policy.close()
    for verdict in verdicts:
        if args.json:
            print(json.dumps(_verdict_record(verdict), sort_keys=True), file=out)
        else:
            print("\n".join(_verdict_lines(verdict)), file=out)
    for resource in resources:
        if args.json:
            print(json.dumps(_resource_record(resource), sort_keys=True), file=out)
        else:
            print("\n".join(_resource_lines(resource)), file=out)
    # A missing topic is the broker's answer, not the policy's: it does not count as denied.
    denied = any(_denied(v.decision) for v in verdicts) or any(not r.allowed for r in resources)
    return DENIED if denied else OK


def _denied(decision: Decision | None) -> bool:
    return decision is not None and not decision.allowed and not is_unknown_topic(decision)


def _verdict_record(verdict: Verdict) -> dict[str, Any]:
    decision = None if verdict.decision is None else verdict.decision.to_dict()
    sent = verdict.original or verdict.request
    record = {"decision": decision, "request": sent.to_dict()}
    if verdict.original is not None:
        record["rewritten"] = verdict.request.to_dict()
    return record if verdict.decision is not None else {**record, "reason": verdict.reason}


def _verdict_lines(verdict: Verdict) -> list[str]:
    if verdict.decision is None:
        # The proxy judges nothing for it and answers UNKNOWN_TOPIC_ID itself.
        topic = verdict.request.name or verdict.request.topic_id
        return [f"{topic}: NOT JUDGED, answered UNKNOWN_TOPIC_ID ({verdict.reason})"]
    if is_unknown_topic(verdict.decision):
        # The proxy answers it as the broker would; no rule judged it.
        topic, message = verdict.decision.topic, verdict.decision.message
        return [f"{topic}: UNKNOWN TOPIC, answered UNKNOWN_TOPIC_OR_PARTITION ({message})"]
    lines = _decision_lines(verdict.decision.topic, verdict.decision)
    for override in verdict.decision.overrides:
        shown = "(not set)" if override.before is None else override.before
        lines.append(
            f"  rewritten by {override.rule} ({override.kind.value}): "
            f"{override.target} {shown} -> {override.after}"
        )
    return lines


def _decision_lines(name: str, decision: Decision | BrokerConfigDecision) -> list[str]:
    lines = [f"{name}: {'ALLOWED' if decision.allowed else 'DENIED'}"]
    for violation in decision.violations:
        tag = "audit: " if violation.mode is Mode.AUDIT else ""
        lines.append(f"  {tag}{violation.message}")
    for waiver in decision.waived if isinstance(decision, Decision) else ():
        ticket = f", ticket {waiver.ticket}" if waiver.ticket else ""
        lines.append(
            f"  waived by exception {waiver.exception} (until {waiver.expires}{ticket}): "
            f"{waiver.message}"
        )
    return lines


def _resource_lines(decision: BrokerConfigDecision) -> list[str]:
    lines = _decision_lines(resource_key(decision.request), decision)
    if decision.rules:
        lines.append(f"  granted by: {', '.join(decision.rules)}")
    if decision.outside:
        # Every topic, where the message names only the first few.
        lines.append(f"  outside the topic rules: {', '.join(decision.outside)}")
    return lines


def _resource_record(decision: BrokerConfigDecision) -> dict[str, Any]:
    result = {
        "resource": resource_key(decision.request),
        "allowed": decision.allowed,
        "violations": [v.to_dict() for v in decision.violations],
        "mode": decision.mode.value,
        "rules": list(decision.rules),
        "outside": list(decision.outside),
    }
    return {"decision": result, "request": decision.request.to_dict()}


def _test(args: argparse.Namespace, out: TextIO) -> int:
    """Run a test suite of expected decisions against a policy."""
    suite = parse_suite(_read(args.cases), str(args.cases))
    policy = _load(args)
    try:
        results = run_suite(policy, suite, moment(args))
    finally:
        policy.close()
    if args.format != "text" or args.output is not None:
        _write_report(args, results, out)
        if args.output is None:
            return _exit_code(results)
    return _text_report(args, results, out)


def _write_report(args: argparse.Namespace, results: list[CaseResult], out: TextIO) -> None:
    if args.format == "junit":
        report = junit_report(results, str(args.cases))
    elif args.format == "json":
        report = json_report(results)
    elif args.format == "tap":
        report = tap_report(results)
    else:
        text = io.StringIO()
        _text_report(args, results, text)
        report = text.getvalue()
    if args.output is None:
        print(report, end="", file=out)
        return
    try:
        args.output.write_text(report, encoding="utf-8")
    except OSError as exc:
        raise _InputError(f"{args.output}: cannot write: {exc.strerror}") from exc


def _exit_code(results: list[CaseResult]) -> int:
    return OK if all(r.passed for r in results) else DENIED


def _text_report(args: argparse.Namespace, results: list[CaseResult], out: TextIO) -> int:
    failed = 0
    for result in results:
        print(f"{'PASS' if result.passed else 'FAIL'}  {result.name}", file=out)
        for failure in result.failures:
            print(f"      {failure}", file=out)
        if args.verbose or not result.passed:
            lines = [line for d in result.decisions for line in _decision_lines(d.topic, d)]
            lines += [line for r in result.resources for line in _resource_lines(r)]
            for line in lines:
                print(f"      {line}", file=out)
        failed += not result.passed
    print(f"{len(results) - failed} passed, {failed} failed", file=out)
    return _exit_code(results)


def _schema(args: argparse.Namespace, out: TextIO) -> int:
    """Print the policy file's JSON Schema."""
    print(json.dumps(policy_json_schema(), indent=2, sort_keys=True), file=out)
    return OK


def _audit_schema(args: argparse.Namespace, out: TextIO) -> int:
    """Print the audit event's JSON Schema."""
    print(audit_event_schema_text(), end="", file=out)
    return OK


def audit_event_schema_text() -> str:
    """The audit event's JSON Schema as docs/audit-event.schema.json holds it."""
    return json.dumps(json_schema(), indent=2) + "\n"


cmd_check = _guard(_check)
cmd_eval = _guard(_eval)
cmd_test = _guard(_test)
cmd_schema = _guard(_schema)
cmd_audit_schema = _guard(_audit_schema)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `policy` command alone, as the tests and the offline tools call it."""
    parser = argparse.ArgumentParser(prog="kafka-policy-proxy")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
