"""The offline tester's file formats: scenarios, suites, cluster snapshots and recorded facts."""
