"""Client telemetry (KIP-714): subscriptions matched to clients, pushed metrics decoded and served on /metrics."""
