"""Security: who a connection is (principal), how it proved it (TLS, SASL), what it may do (ACLs),
and how much it may use (quotas)."""
