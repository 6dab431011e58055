"""Who sends admin traffic to a shared cluster and which topics they name (bench data only).

A fixed population, drawn once from a seed: domains of Zipf-distributed size, their topics
(most exist from the start, the rest are created during the traffic, each once), and
principals of five kinds with Zipf activity within each kind:

- applications (`User:app-...`, and `User:ANONYMOUS` on a plaintext listener) ask Metadata to
  auto-create topics that do not exist yet (a misnamed one, or one GitOps has not created);
- CI jobs (`User:ci-<domain>`) validate the domain's topic specs (validate-only creates);
- GitOps (`User:gitops-<domain>`, or `User:team-<domain>` under a team budget) applies the
  domain's specs in bursts: the due creates and the declared configs of existing topics;
- Streams apps (`User:streams-...`) create their internal topics (KIP-698 names) once;
- operators (`User:platform-admin`, `User:ops-<n>`) alter, grow, move and delete, rarely;
- `User:analytics-loader` creates the clickstream backfill topics (an exception waives them).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from enum import StrEnum

DOMAINS = (
    "orders",
    "payments",
    "clicks",
    "events",
    "metrics",
    "logs",
    "shipping",
    "inventory",
    "users",
    "search",
    "billing",
    "fraud",
    "catalog",
    "pricing",
    "ads",
    "notifications",
    "reviews",
    "recs",
    "auth",
    "checkout",
    "support",
    "geo",
    "media",
    "mail",
    "risk",
    "loyalty",
    "ledger",
    "sandbox",
    "partners",
    "returns",
)
WORDS = (
    "events",
    "changes",
    "commands",
    "snapshots",
    "audit",
    "raw",
    "enriched",
    "dlq",
    "retry",
    "state",
    "alerts",
    "requests",
    "responses",
    "facts",
    "outbox",
    "cdc",
    "scores",
    "daily",
)
# Domains the example policy names (rules, an exception, owners): never a team's prefix.
NAMED_BY_POLICY = frozenset(
    {"payments", "ledger", "clicks", "sandbox", "shipping", "events", "metrics", "logs"}
)
DAY_MS = 86_400_000
RETENTIONS = (DAY_MS, 3 * DAY_MS, 7 * DAY_MS, 14 * DAY_MS, 30 * DAY_MS)
# Streams apps the example policy names (payments-*, fraud-detector) and their owners.
OWNED_STREAMS = (
    ("User:streams-payments", "payments-settlement"),
    ("User:streams-payments", "payments-refunds"),
    ("User:streams-fraud", "fraud-detector"),
)
# Not the owner of payments-*: its topology's topics are denied on every restart.
ROGUE_STREAMS = ("User:streams-payments-test", "payments-settlement-test")


class Kind(StrEnum):
    """What a principal does."""

    APP = "app"
    CI = "ci"
    GITOPS = "gitops"
    STREAMS = "streams"
    OPERATOR = "operator"
    LOADER = "loader"


@dataclass
class TopicSpec:
    """A topic as its owners declare it; `due` is when it is to be created (0: it exists)."""

    name: str
    domain: str
    partitions: int
    configs: tuple[tuple[str, str], ...]
    due: float = 0.0  # fraction of the traffic's span
    creator: Kind = Kind.GITOPS
    # A first version that breaks a rule (name, partitions or retention), fixed after `fix_after`
    # denied attempts; None once fixed (or if it never broke one).
    broken: TopicSpec | None = None
    fix_after: int = 0
    replication: int = 3


@dataclass
class Principal:
    """One principal: its kind, domain, activity weight, hosts and client id."""

    name: str
    kind: Kind
    domain: str
    weight: float
    client_id: str
    hosts: tuple[str, ...]
    # Applications: names they ask Metadata to auto-create (missing ones get a record).
    wanted: tuple[str, ...] = ()
    # CI and GitOps: the domain's specs they validate or apply.
    repo: tuple[TopicSpec, ...] = ()
    # Streams: (application id, its internal topics, when it is deployed).
    apps: tuple[tuple[str, tuple[TopicSpec, ...]], ...] = ()


@dataclass
class Population:
    """Every topic spec and principal of the traffic."""

    specs: list[TopicSpec]
    principals: list[Principal]
    by_kind: dict[Kind, list[Principal]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for p in self.principals:
            self.by_kind.setdefault(p.kind, []).append(p)


def zipf(n: int, s: float = 1.1) -> list[float]:
    """Zipf weights of ranks 1..n."""
    return [1 / (rank**s) for rank in range(1, n + 1)]


def build(topics: int, principals: int, existing: float, seed: int) -> Population:
    """The population: `topics` topic specs (`existing` of them there from the start) and
    about `principals` principals."""
    rng = random.Random(seed)
    sizes = _split(topics, zipf(len(DOMAINS), 0.9), rng)
    domains = [d for d, n in zip(DOMAINS, sizes, strict=True) if n]
    specs: list[TopicSpec] = []
    by_domain: dict[str, list[TopicSpec]] = {}
    for domain, size in zip(DOMAINS, sizes, strict=True):
        made = [_spec(rng, domain, i, existing) for i in range(size)]
        by_domain[domain] = made
        specs += made
    streams = _streams(rng, principals, domains)
    for _, apps in streams:
        specs += [t for _, internal in apps for t in internal]
    # Three domains held by team principals, whose budget counts `team-<domain>.` topics.
    plain = [d for d in domains if d not in NAMED_BY_POLICY]
    teams = sorted(plain, key=lambda d: abs(len(by_domain[d]) - 60))[:3]
    for spec in (s for d in teams for s in by_domain[d]):
        spec.name = f"team-{spec.name}"
        if spec.broken is not None:
            spec.broken.name = f"team-{spec.broken.name}"
    made_principals = _principals(
        rng, principals, domains=domains, by_domain=by_domain, teams=teams, streams=streams
    )
    return Population(specs, made_principals)


def _split(total: int, weights: list[float], rng: random.Random) -> list[int]:
    """`total` split in proportion to `weights` (the remainder to the largest)."""
    scale = total / sum(weights)
    sizes = [int(w * scale) for w in weights]
    sizes[0] += total - sum(sizes)
    return sizes


def _spec(rng: random.Random, domain: str, i: int, existing: float) -> TopicSpec:
    word = WORDS[i % len(WORDS)]
    name = f"{domain}.{word}" if i < len(WORDS) else f"{domain}.{word}.v{i // len(WORDS) + 1}"
    partitions = rng.choices((1, 3, 6, 12, 24, 48), (6, 40, 30, 14, 7, 3))[0]
    retention = rng.choice(RETENTIONS) if domain != "sandbox" else rng.choice((3_600_000, DAY_MS))
    configs = [("retention.ms", str(retention))]
    if word in ("state", "snapshots", "facts"):
        configs.append(("cleanup.policy", "compact"))
    spec = TopicSpec(name, domain, partitions, tuple(configs))
    if rng.random() < existing:
        if rng.random() < 0.03:  # named before the naming rule
            spec.name = f"{domain.capitalize()}_{word.capitalize()}_{i}"
        return spec
    spec.due = rng.random()
    spec.partitions = max(spec.partitions, 3)
    if domain == "clicks" and rng.random() < 0.3:  # the backfill: 96 partitions, waived
        spec.partitions, spec.creator = 96, Kind.LOADER
        return spec
    if rng.random() < 0.1:
        spec.creator = Kind.OPERATOR
    broken = rng.random()
    if broken < 0.04:
        spec.broken = TopicSpec(name.replace(".", "_"), domain, spec.partitions, spec.configs)
    elif broken < 0.07:
        spec.broken = TopicSpec(name, domain, 64, spec.configs)
    elif broken < 0.10:
        spec.broken = TopicSpec(name, domain, spec.partitions, (("retention.ms", "5184000000"),))
    spec.fix_after = rng.randint(2, 40)
    return spec


def _streams(
    rng: random.Random, principals: int, domains: list[str]
) -> list[tuple[str, tuple[tuple[str, tuple[TopicSpec, ...]], ...]]]:
    """Streams principals and their apps' internal topics (existing apps, and new ones)."""
    owners: dict[str, list[str]] = {}
    for principal, app in OWNED_STREAMS:
        owners.setdefault(principal, []).append(app)
    for domain in domains[: max(1, principals // 12)]:
        owners.setdefault(f"User:streams-{domain}", []).append(f"{domain}-aggregator")
    owners[ROGUE_STREAMS[0]] = [ROGUE_STREAMS[1]]
    made = []
    for principal, apps in owners.items():
        made.append((principal, tuple((app, _internal(rng, app)) for app in apps)))
    return made


def _internal(rng: random.Random, app: str) -> tuple[TopicSpec, ...]:
    """An app's internal topics, as Kafka Streams names and configures them (KIP-698)."""
    due = 0.0 if rng.random() < 0.6 and "test" not in app else rng.random()
    partitions = rng.choice((6, 12))
    changelog = (("cleanup.policy", "compact"), ("message.timestamp.type", "CreateTime"))
    repartition = (
        ("cleanup.policy", "delete"),
        ("message.timestamp.type", "CreateTime"),
        ("retention.ms", "-1"),
        ("segment.bytes", "52428800"),
    )
    topics = []
    for n in range(rng.randint(1, 4)):
        store = f"{app}-KSTREAM-AGGREGATE-STATE-STORE-{n * 4 + 3:010d}"
        topics.append(
            TopicSpec(f"{store}-changelog", "streams", partitions, changelog, due, Kind.STREAMS)
        )
        topics.append(
            TopicSpec(f"{store}-repartition", "streams", partitions, repartition, due, Kind.STREAMS)
        )
    topics.append(
        TopicSpec(
            f"{app}-counts-store-changelog", "streams", partitions, changelog, due, Kind.STREAMS
        )
    )
    return tuple(topics)


def _principals(
    rng: random.Random,
    count: int,
    *,
    domains: list[str],
    by_domain: dict[str, list[TopicSpec]],
    teams: list[str],
    streams: list[tuple[str, tuple[tuple[str, tuple[TopicSpec, ...]], ...]]],
) -> list[Principal]:
    made: list[Principal] = []
    host = iter(range(10, 1_000_000))

    def hosts(number: int) -> tuple[str, ...]:
        """Addresses of their own for a principal's `number` hosts."""
        return tuple(
            f"10.{(h := next(host)) // 250 % 250}.{h % 250}.{i + 1}" for i in range(number)
        )

    for domain in domains:
        kind_name = "team" if domain in teams else "gitops"
        repo = tuple(by_domain[domain])
        made.append(
            Principal(
                f"User:{kind_name}-{domain}",
                Kind.GITOPS,
                domain,
                0,
                "terraform-kafka",
                hosts(1),
                repo=repo,
            )
        )
        if len(made) < count // 5:
            start = rng.randrange(max(1, len(repo) - 30))
            made.append(
                Principal(
                    f"User:ci-{domain}",
                    Kind.CI,
                    domain,
                    0,
                    "ci-validate",
                    hosts(3),
                    repo=repo[start : start + 30],
                )
            )
    for principal, apps in streams:
        app_id = apps[0][0]
        made.append(
            Principal(principal, Kind.STREAMS, "streams", 0, f"{app_id}-admin", hosts(2), apps=apps)
        )
    operators = ["User:platform-admin", *(f"User:ops-{n}" for n in range(1, 3))]
    for name in operators:
        made.append(Principal(name, Kind.OPERATOR, "", 0, "adminclient-1", hosts(1)))
    made.append(
        Principal(
            "User:analytics-loader",
            Kind.LOADER,
            "clicks",
            0,
            "backfill",
            hosts(1),
            repo=tuple(s for s in by_domain.get("clicks", ()) if s.creator is Kind.LOADER),
        )
    )
    pending = {d: [s.name for s in specs if s.due] for d, specs in by_domain.items()}
    app_count = max(10, count - len(made))
    for n in range(app_count):
        domain = domains[min(int(rng.paretovariate(1.2)) - 1, len(domains) - 1)]
        name = "User:ANONYMOUS" if n == 3 else f"User:app-{domain}-{n}"
        wanted = rng.sample(pending[domain], min(len(pending[domain]), rng.randint(0, 3)))
        if rng.random() < 0.6:  # a topic the app names wrong: denied on every retry
            word = rng.choice(WORDS)
            wanted.append(rng.choice((f"{domain}-{word}", f"{domain.upper()}.{word}", word)))
        made.append(
            Principal(
                name,
                Kind.APP,
                domain,
                0,
                f"{domain}-svc-{n}",
                hosts(rng.randint(1, 4)),
                wanted=tuple(wanted),
            )
        )
    for kind in Kind:
        members = [p for p in made if p.kind is kind]
        rng.shuffle(members)
        for p, w in zip(members, zipf(len(members)), strict=True):
            p.weight = w
    return made
