"""Where the jobs' input comes from: audit lines (raw logs, the lake, the audit topic) and
cluster snapshots, read and classified exactly once, by one definition; files on any Hadoop
file system."""
