"""Cluster mode (``metadata.store=etcd://...``): what a node does beside serving Kafka requests.

Every node of a cluster runs the same four parts, all on the broker's handler loop:

- ``cluster_identity``: the cluster id kept in etcd, checked against this node's ``meta.properties``
  (a node with another cluster's data refuses to start);
- ``controller_candidate``: campaigns for the controller lease in etcd; the winner runs a
  ``controller.Controller`` over the etcd metadata log, turns broker registrations into metadata
  records (a broker whose registration lapsed is fenced and loses its leaderships, unless etcd was
  away and the broker registers again within a grace, ``etcd_contact``) and loses the role the
  moment it cannot renew its lease;
- ``registration``: this broker's ephemeral registration key under its own etcd session lease; a
  broker that cannot renew it keeps serving on the metadata it has (leader epochs and ISR changes
  only the controller commits keep that safe) and registers again when etcd answers;
- ``metadata_follower``: every broker, the controller's node included, builds its metadata image
  by reading the committed metadata log from etcd and following it with a watch.

``keys`` says where each of these lives in etcd.
"""
