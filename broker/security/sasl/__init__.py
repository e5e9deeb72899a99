"""SASL authentication (SASL_PLAINTEXT listeners; SASL_SSL = the TLS transport plus this layer).

Modules: ``keys`` (config keys), ``jaas`` (JAAS config values), ``plain`` and ``scram`` (the
mechanisms' server sides), ``scram_credentials`` (credential formulas and records), ``settings``
(per-listener SASL settings built from the broker config), ``authenticator`` (the per-connection
state machine the dispatcher consults), ``client`` (the broker's own client side, inter-broker).
"""
