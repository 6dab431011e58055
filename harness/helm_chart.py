"""The Helm chart, rendered by the real helm: for its tests and for examples/kubernetes/.

`python -m harness.helm_chart` (or `make kubernetes-examples`) writes the examples; a unit test
checks the committed files equal a fresh render, so they cannot drift from the chart.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "kafka-policy-proxy"
VALUES = CHART / "ci"
EXAMPLES = ROOT / "examples" / "kubernetes"
HELM_VERSION = "v3.22.0"
HELM_INSTALL = f"GOBIN=/usr/local/bin go install helm.sh/helm/v3/cmd/helm@{HELM_VERSION}"
# The oldest Kubernetes the chart supports (native sidecars, the preStop sleep action).
KUBE_VERSION = "1.30.0"


def helm() -> str:
    """The helm binary, or an error that says how to install it (as .ci/run does)."""
    path = shutil.which("helm") or shutil.which("/usr/local/bin/helm")
    if path is None:
        raise RuntimeError(f"helm is not installed; install it with: {HELM_INSTALL}")
    return path


def run_helm(*args: str) -> subprocess.CompletedProcess[str]:
    """Run helm with `args`, capturing its output (the caller checks the exit code)."""
    return subprocess.run([helm(), *args], check=False, capture_output=True, text=True, timeout=120)


def template(
    values: str,
    release: str,
    namespace: str,
    show_only: tuple[str, ...] = (),
    extra: tuple[str, ...] = (),
) -> str:
    """`helm template` of the chart with ci/<values> (then `extra` helm arguments); raises
    with helm's error on failure."""
    args = ["template", release, str(CHART), "--namespace", namespace]
    args += ["--kube-version", KUBE_VERSION, "-f", str(VALUES / values), *extra]
    for name in show_only:
        args += ["--show-only", f"templates/{name}"]
    done = run_helm(*args)
    if done.returncode != 0:
        raise RuntimeError(f"helm {' '.join(args)} failed:\n{done.stderr}")
    return done.stdout


@dataclass(frozen=True)
class Example:
    """One file of examples/kubernetes/ and the render that makes it."""

    file: str
    values: str
    release: str
    namespace: str
    show_only: tuple[str, ...]
    intro: str

    def command(self) -> str:
        """The helm command that renders it, as the header shows it."""
        only = "".join(f" --show-only templates/{name}" for name in self.show_only)
        return (
            f"helm template {self.release} charts/kafka-policy-proxy --namespace "
            f"{self.namespace} -f charts/kafka-policy-proxy/ci/{self.values}{only}"
        )

    def render(self) -> str:
        """The file's text: a header naming its source, then helm's output."""
        body = template(self.values, self.release, self.namespace, self.show_only)
        header = [
            "# Rendered from the Helm chart by `make kubernetes-examples`; edit the chart or its",
            "# values, not this file (a test checks it equals a fresh render):",
            f"#   {self.command()}",
            *(f"# {line}" if line else "#" for line in self.intro.splitlines()),
        ]
        return "\n".join(header) + "\n" + body


EXAMPLE_FILES = (
    Example(
        "shared.yaml",
        "shared-values.yaml",
        "kafka-policy-proxy",
        "kafka",
        (),
        "A shared proxy: 2 replicas behind one Service that clients put in bootstrap.servers\n"
        "(kafka-policy-proxy.kafka.svc:9192). Create the Secrets first (files, never env):\n"
        "  kubectl -n kafka create secret generic kafka-policy-proxy-upstream-tls "
        "--from-file=ca.crt\n"
        "  kubectl -n kafka create secret generic kafka-policy-proxy-sasl --from-file=password\n"
        "then: kubectl -n kafka apply -f shared.yaml",
    ),
    Example(
        "sidecar.yaml",
        "sidecar-values.yaml",
        "kafka-policy-proxy",
        "orders",
        (),
        "The proxy as a native sidecar of an application that bootstraps on 127.0.0.1:9192.\n"
        "Create the Secret first (cert-manager's Certificate writes the same keys):\n"
        "  kubectl -n orders create secret generic kafka-policy-proxy-tls \\\n"
        "    --from-file=ca.crt --from-file=tls.crt --from-file=tls.key\n"
        "then: kubectl -n orders apply -f sidecar.yaml",
    ),
    Example(
        "network-policies.yaml",
        "full-values.yaml",
        "kafka-policy-proxy",
        "kafka",
        ("networkpolicy.yaml",),
        "Clients reach the proxy's listeners, monitoring its admin port, and the brokers' client\n"
        "ports admit only the proxy pods (docs/security.md). Label application namespaces\n"
        "kafka-policy-proxy/client=true.",
    ),
    Example(
        "monitoring.yaml",
        "full-values.yaml",
        "kafka-policy-proxy",
        "kafka",
        ("podmonitor.yaml", "prometheusrule.yaml"),
        "For the Prometheus Operator: a PodMonitor for the admin port and the alert rules.",
    ),
)


def write_examples() -> list[Path]:
    """Render every example into examples/kubernetes/; returns the files written."""
    written = []
    for example in EXAMPLE_FILES:
        path = EXAMPLES / example.file
        path.write_text(example.render())
        written.append(path)
    return written


if __name__ == "__main__":
    try:
        for path in write_examples():
            print(path.relative_to(ROOT))
    except RuntimeError as exc:
        sys.exit(str(exc))
