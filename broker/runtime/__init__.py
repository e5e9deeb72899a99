"""Runtime utilities with no Kafka semantics: the hierarchical timing wheel, the purgatory of
delayed operations, completion of awaited responses, metrics, and the RE2 regexes clients send."""
