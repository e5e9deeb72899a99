"""Client quotas and throttling (Kafka's ClientQuotaManager, ClientRequestQuotaManager and the
connection-creation rate of ConnectionQuotas; KIP-13, KIP-55, KIP-124, KIP-219, KIP-546, KIP-612).

- ``rate``: Kafka's sampled ``Rate`` and the throttle-time rule (QuotaUtils).
- ``entities``: quota entities, their validation (AlterClientQuotas / DescribeClientQuotas) and
  Kafka's precedence of the eight user/client-id levels.
- ``client_quotas``: the per-type managers (produce, fetch, request) the dispatcher consults, and
  the throttle they ask the connection for.
"""
