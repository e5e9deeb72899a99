"""The controller seam: the broker's metadata image and caches, the topic config view, the
clients to the controller (embedded, etcd-backed, forwarding) and broker registration."""
