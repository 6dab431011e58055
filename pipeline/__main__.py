"""spark-submit entry point: `spark-submit [options] pipeline/__main__.py JOB [args]`."""

import sys

from pipeline.cli import submit_main

sys.exit(submit_main())
