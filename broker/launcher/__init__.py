"""Launching several processes as one deployment: ``odradek cluster`` (etcd plus N brokers) and
where the etcd binary comes from."""
