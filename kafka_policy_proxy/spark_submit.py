"""spark-submit entry point: `spark-submit [options] kafka_policy_proxy/spark_submit.py JOB`."""

import sys

from kafka_policy_proxy.pipeline_command import submit_main

sys.exit(submit_main())
