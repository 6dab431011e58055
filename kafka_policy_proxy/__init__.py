"""kafka-policy-proxy: one import namespace for the whole product.

The folders stay at the top of the checkout (cli/, codec/, policy/, proxy/, pipeline/); each
is linked here, so that installed they are kafka_policy_proxy.cli, kafka_policy_proxy.codec
and so on, and never clash with another distribution's `policy` or `proxy`
(docs/architecture.md).
"""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _distribution_version

try:
    # The version lives in one place, pyproject.toml; the installed distribution carries it.
    __version__ = _distribution_version("kafka-policy-proxy")
except PackageNotFoundError:  # run from a checkout that was never installed
    __version__ = "0+unknown"
