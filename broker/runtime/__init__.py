"""Runtime utilities with no Kafka semantics: the hierarchical timing wheel, the purgatory of
delayed operations, completion of awaited responses, metrics, Kafka's sampled ``Rate`` (which the
client quotas and the connection-creation rates measure with), and the RE2 regexes clients send."""
