"""The request seam (Kafka's KafkaApis): the dispatcher, the request types handlers see, the
registry of handlers and handlers/, one module per Kafka API."""
