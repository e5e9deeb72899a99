"""The broker's configuration: Kafka's config definitions and defaults, parsing of
server.properties and --override, listeners."""
