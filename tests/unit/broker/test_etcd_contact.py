"""EtcdContact (broker/cluster/etcd_contact.py): when the controller may take a missing broker
registration for a missing broker. Driven by a fake clock; the cluster behaviour it serves is
scenario 7 of tests/integration/test_replication_partitions.py (no fencing after etcd's sweep)."""

from __future__ import annotations

from odradek.broker.cluster.etcd_contact import EtcdContact


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_contact_grows_with_prompt_answers_and_ignores_the_time_between_calls() -> None:
    clock = Clock()
    contact = EtcdContact(slow_call_s=1.0, clock=clock)
    assert contact.unbroken_for() == 0.0  # nothing answered yet: no evidence
    contact.answered(clock.now)
    clock.now += 0.4
    assert round(contact.unbroken_for(), 6) == 0.4
    clock.now += 5.0  # this node busy elsewhere (a controller replaying its log): not etcd's absence
    sent = clock.now
    clock.now += 0.01
    contact.answered(sent)
    assert round(contact.unbroken_for(), 6) == 5.41


def test_a_failed_call_breaks_contact_until_the_next_answer() -> None:
    clock = Clock()
    contact = EtcdContact(slow_call_s=1.0, clock=clock)
    contact.answered(clock.now)
    clock.now += 10
    contact.failed()  # a timeout: etcd unreachable
    assert contact.unbroken_for() == 0.0
    clock.now += 60
    assert contact.unbroken_for() == 0.0
    sent = clock.now
    clock.now += 0.2
    contact.answered(sent)  # etcd is back: contact counts from that call
    clock.now += 1.0
    assert round(contact.unbroken_for(), 6) == 1.2


def test_a_late_answer_restarts_contact_when_it_comes() -> None:
    """A call to a paused etcd hangs and is answered when etcd resumes: the time it hung is no
    contact, though nothing failed."""
    clock = Clock()
    contact = EtcdContact(slow_call_s=1.0, clock=clock)
    contact.answered(clock.now)
    clock.now += 30
    assert contact.unbroken_for() == 30
    sent = clock.now
    clock.now += 4.0  # etcd paused for 4 s, then resumed
    contact.answered(sent)
    assert contact.unbroken_for() == 0.0
    clock.now += 2.5
    assert contact.unbroken_for() == 2.5
