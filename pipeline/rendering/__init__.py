"""The jobs' self-contained HTML pages and their matplotlib charts; no Spark, no file I/O."""
