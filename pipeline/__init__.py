"""The Odradek demo pipeline: a PySpark Structured Streaming job that runs unchanged against Odradek or
Apache Kafka (it only speaks the Kafka protocol through Spark's stock Kafka connector).

    generate.py       realistic JSON events (plus deliberately bad ones) → the events topic
    events.py         the event format, the validation rules and their error names
    job.py            the streaming queries: parse/validate → dead letters; dedupe → windowed
                      per-user aggregates with a watermark → output topic and Parquet
    spark_session.py  a SparkSession with the connector jars from the Maven cache (.cache/jars/spark)
    run.py            the command line: ``python -m pipeline.run --bootstrap HOST:PORT ...``

Not part of the broker: it is a client of it, and its own package (``pipeline``), importable from
the repository root. See docs/pipeline.md.
"""
