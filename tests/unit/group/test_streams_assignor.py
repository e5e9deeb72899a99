"""The streams-group task assignor (broker/group/streams_assignor.py) on the cases of Kafka 4.4's own
StickyTaskAssignorTest: the expected assignments are the ones that test asserts for Kafka's assignor."""

from __future__ import annotations

from odradek.broker.group.streams_assignor import AssignmentMember, assign


def member(member_id: str, process: str, active: dict[str, set[int]] | None = None,
           standby: dict[str, set[int]] | None = None) -> AssignmentMember:
    return AssignmentMember(member_id, process, {s: frozenset(p) for s, p in (active or {}).items()},
                            {s: frozenset(p) for s, p in (standby or {}).items()})


def active_count(result, member_id: str) -> int:
    return sum(len(ps) for ps in result[member_id].active.values())


def merged_active(result) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {}
    for tasks in result.values():
        for s, ps in tasks.active.items():
            out.setdefault(s, set()).update(ps)
    return out


def test_one_active_task_per_process_when_as_many_tasks_as_processes() -> None:
    result = assign([member("member1", "process1"), member("member2", "process2"), member("member3", "process3")],
                    {"test-subtopology": 3}, set(), 0)
    assert [active_count(result, m) for m in ("member1", "member2", "member3")] == [1, 1, 1]
    assert merged_active(result) == {"test-subtopology": {0, 1, 2}}


def test_tasks_spread_evenly_over_members_of_several_processes_with_and_without_standbys() -> None:
    members = [member(f"member{p}_{i}", f"process{p}") for p in (1, 2, 3) for i in (1, 2)]
    tasks = {"test-subtopology1": 3, "test-subtopology2": 3}
    for standbys, stateful in ((0, set()), (1, set(tasks))):
        result = assign(members, tasks, stateful, standbys)
        assert all(active_count(result, m.member_id) == 1 for m in members)
        assert merged_active(result) == {"test-subtopology1": {0, 1, 2}, "test-subtopology2": {0, 1, 2}}
        if standbys:
            # Each task's standby is on another process than its active.
            where_active = {(s, p): m.process_id for m in members for s, ps in result[m.member_id].active.items()
                            for p in ps}
            standby_procs = [((s, p), m.process_id) for m in members
                             for s, ps in result[m.member_id].standby.items() for p in ps]
            assert len(standby_procs) == 6
            assert all(where_active[t] != proc for t, proc in standby_procs)


def test_an_active_task_does_not_migrate_to_another_process() -> None:
    result = assign([member("member1", "process1", {"test-subtopology": {0}}),
                     member("member2", "process2", {"test-subtopology": {1}})], {"test-subtopology": 3}, set(), 0)
    assert 0 in result["member1"].active["test-subtopology"] and 1 in result["member2"].active["test-subtopology"]
    assert active_count(result, "member1") + active_count(result, "member2") == 3
    result = assign([member("member2", "process2", {"test-subtopology": {1}}),
                     member("member3", "process1", {"test-subtopology": {2}})], {"test-subtopology": 3}, set(), 0)
    assert 1 in result["member2"].active["test-subtopology"] and 2 in result["member3"].active["test-subtopology"]


def test_active_tasks_stay_put_when_there_are_more_clients_than_tasks() -> None:
    members = [member("member1", "process1", {"test-subtopology": {0}}),
               member("member2", "process2", {"test-subtopology": {2}}),
               member("member3", "process3", {"test-subtopology": {1}}),
               member("member4", "process4"), member("member5", "process5")]
    result = assign(members, {"test-subtopology": 3}, set(), 0)
    assert [result[f"member{i}"].active.get("test-subtopology") for i in range(1, 6)] == \
        [{0}, {2}, {1}, None, None]
    members = [member("member1", "process1"), member("member2", "process2", {"test-subtopology": {0}}),
               member("member3", "process3"), member("member4", "process4", {"test-subtopology": {2}}),
               member("member5", "process5", {"test-subtopology": {1}})]
    result = assign(members, {"test-subtopology": 3}, set(), 0)
    assert [result[f"member{i}"].active.get("test-subtopology") for i in range(1, 6)] == \
        [None, {0}, None, {2}, {1}]


def test_unequal_subtopologies_are_balanced_by_task_count() -> None:
    result = assign([member("member1", "process1", {"test-subtopology1": {0, 1, 2, 3, 4, 5},
                                                     "test-subtopology2": {0}}),
                     member("member2", "process2")], {"test-subtopology1": 6, "test-subtopology2": 1}, set(), 0)
    assert (active_count(result, "member1"), active_count(result, "member2")) == (4, 3)
    assert merged_active(result) == {"test-subtopology1": {0, 1, 2, 3, 4, 5}, "test-subtopology2": {0}}
