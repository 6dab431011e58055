"""The jobs: report, replay and scan, each its job, its aggregation or evaluation, its summary."""
