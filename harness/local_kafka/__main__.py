"""`python -m harness.local_kafka`: the local cluster's command line (scripts/local-kafka)."""

import sys

from harness.local_kafka.cli import main

sys.exit(main())
