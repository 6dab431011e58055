"""The development harness: the local Kafka cluster, the throwaway CA and wire helpers.

Tests and benchmarks import it; no product module does, and it is not in the wheel. Stdlib
only at import time: `scripts/local-kafka` may run it outside the project's venv.
"""

from pathlib import Path

# The checkout the harness runs from: examples, test data and the default cluster dir.
REPO = Path(__file__).resolve().parents[1]
