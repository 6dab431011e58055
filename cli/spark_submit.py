"""spark-submit entry point: `spark-submit [options] cli/spark_submit.py JOB ...`.

The same jobs as `kafka-policy-proxy pipeline JOB`, keeping the master and settings
spark-submit gives (docs/pipeline.md).
"""

import sys

from kafka_policy_proxy.cli.pipeline_command import submit_main

if __name__ == "__main__":
    sys.exit(submit_main())
