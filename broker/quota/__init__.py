"""Client quotas and throttling (Kafka's ClientQuotaManager and ClientRequestQuotaManager; KIP-13,
KIP-55, KIP-124, KIP-219, KIP-546). They measure with Kafka's sampled ``Rate``
(broker/runtime/rate.py), as do the connection-creation rates the acceptor applies (KIP-612,
broker/network/connection_rates.py).

- ``entities``: quota entities, their validation (AlterClientQuotas / DescribeClientQuotas) and
  Kafka's precedence of the eight user/client-id levels.
- ``client_quotas``: the per-type managers (produce, fetch, request) the dispatcher consults, and
  the throttle they ask the connection for.
"""
