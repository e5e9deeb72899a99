"""The network: the acceptor and network loops (Kafka's SocketServer), connections, the request
channel and its memory pool, connection quotas and creation rates, and the client this broker uses to reach others."""
