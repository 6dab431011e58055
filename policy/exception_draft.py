"""A ready-to-paste exception for a recorded denial (`policy except`): pure, no I/O.

The selector is the record's principal, exact topic and action (an alter by its kind); it
waives the rules that denied it (the enforced violations, less the judge's own denials, which
no exception may waive).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from kafka_policy_proxy.policy.decision_log import Outcome, ResourceType
from kafka_policy_proxy.policy.exceptions import UNWAIVABLE, rfc3339

_RELATIVE = re.compile(r"(\d+)([mhdw])")
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_NOT_NAME = re.compile(r"[^a-z0-9._-]+")


class DraftError(ValueError):
    """The record cannot be turned into an exception; the message says why."""


def expiry(text: str, now: datetime) -> datetime:
    """`7d`, `12h`, `90m`, `2w` after `now`, or an RFC 3339 time with an offset or Z."""
    relative = _RELATIVE.fullmatch(text.strip())
    if relative is not None:
        amount, unit = int(relative.group(1)), _UNITS[relative.group(2)]
        return (now + timedelta(**{unit: amount})).replace(microsecond=0)
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise DraftError(
            f"--expires {text!r}: give a duration (7d, 12h, 90m, 2w) or an RFC 3339 time "
            "with an offset or Z"
        )
    if moment <= now:
        raise DraftError(f"--expires {text!r} is not in the future")
    return moment


def draft_exception(
    record: Mapping[str, Any],
    *,
    expires: datetime,
    reason: str,
    ticket: str | None = None,
    name: str | None = None,
) -> dict[str, Any]:
    """The exception (as the policy file spells it) that waives what denied this record."""
    decision_id = str(record.get("decision_id") or "")
    if record.get("resource_type", ResourceType.TOPIC.value) != ResourceType.TOPIC.value:
        raise DraftError(
            f"decision {decision_id} is not about one topic; exceptions waive topic rules"
        )
    if record.get("decision") != Outcome.DENIED.value:
        raise DraftError(f"decision {decision_id} is {record.get('decision')}, not denied")
    rules = [
        v["rule"]
        for v in record.get("violations") or ()
        if v.get("mode") == "enforce" and v["rule"] not in UNWAIVABLE
    ]
    if not rules:
        raise DraftError(
            f"decision {decision_id} was denied by no policy rule (the cluster state could "
            "not be read, or the topic did not exist): no exception can waive it"
        )
    action = str(record["action"])
    kind = (record.get("request") or {}).get("alter_kind")
    if action == "alter" and kind:
        action = f"alter:{kind}"
    if not reason.strip():
        raise DraftError("--reason must say why the exception exists")
    exception: dict[str, Any] = {
        "name": name or _NOT_NAME.sub("-", f"exception-{decision_id.lower()}").strip("-"),
        "match": {
            "principals": [record["principal"]],
            "topic": re.escape(str(record["topic"])),
            "actions": [action],
        },
        "waive": list(dict.fromkeys(rules)),
        "reason": reason,
    }
    if ticket:
        exception["ticket"] = ticket
    exception["expires"] = rfc3339(expires)
    return exception
