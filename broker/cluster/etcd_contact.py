"""How long this node has been in unbroken contact with etcd: the controller's evidence that a
broker whose registration key is gone is really gone.

A broker's key vanishes when its lease lapses: it renewed nothing for a whole TTL. While etcd itself
was reachable the whole time, that means the broker is dead or cut off, and the controller fences it
at once. But when etcd was away (paused, cut off, restarted) for longer than a TTL, etcd revokes
every expired lease in one sweep as it comes back: every broker's key goes at once, live ones
included, and each registers again a moment later (same process, same incarnation). Fencing them
would move every leadership in the cluster for nothing. Kafka's controller faces the same after a
failover and gives every registered broker a fresh session timeout before fencing anyone
(BrokerHeartbeatManager); here the controller fences a broker with a missing key only once it has
itself been in unbroken contact with etcd for a grace period - long enough for a live broker to have
noticed its lapse and registered again.

Contact breaks with a call that fails (etcd unreachable, a timeout) and with a call that took longer
than ``slow_call_s``: calls to a paused etcd hang until it resumes or they time out, and an answer
that came late is no proof that etcd was there meanwhile; it restarts with the next answer. The
node's periodic calls (the candidate's campaign check every 0.5 s, the controller's reconciliation
every 0.25 s) feed it. Time spent between calls (this node's own work) does not break it.

Ownership: the broker's handler loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class EtcdContact:
    def __init__(self, slow_call_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._slow_call_s = slow_call_s
        self.clock = clock
        self._since: float | None = None  # start of the current unbroken contact (None: broken)

    def answered(self, sent_at: float) -> None:
        """A call sent at ``sent_at`` (``clock()``) was answered just now."""
        now = self.clock()
        if now - sent_at > self._slow_call_s:
            self._since = now  # etcd did not answer for a while: contact starts again now
        elif self._since is None:
            self._since = sent_at

    def failed(self) -> None:
        """A call to etcd failed (unreachable, timed out)."""
        self._since = None

    def unbroken_for(self) -> float:
        """Seconds of unbroken contact so far; 0.0 while broken."""
        return 0.0 if self._since is None else self.clock() - self._since
