"""The broker-side task assignor of streams groups: Kafka 4.4's ``sticky`` (streams/assignor/
StickyTaskAssignor and ProcessState), the only one Kafka ships and ``group.streams.assignors``'s
default.

A task is (subtopology, partition); a subtopology has as many tasks as its largest input topic has
partitions. Members belong to processes (a Kafka Streams instance runs one member per stream
thread, all with its process id); the load of a process is its tasks per member.

Active tasks, with a quota of ceil(tasks / members) per member (recomputed as members fill up):

1. a task goes back to the member that owned it as active, while that member is under quota;
2. else to the least loaded of the members that had it as standby (or reported offsets for it),
   if under quota - its state is warm there;
3. the rest, ordered by (subtopology, partition), each to the least loaded member of the least
   loaded process.

Standby tasks (``num.standby.replicas`` copies of each task of a stateful subtopology, one that has
changelog topics), never on a process that holds the same task already: first to the previous
active owner (if it no longer has the task), then to the least loaded previous standby holder, each
within the total quota; the rest to the least loaded process that lacks the task. When no process
is left the copy is dropped (Kafka logs that capacity is short).

Kafka's priority queues break ties by heap order; here ties go to the process and member seen first
(members in id order), so one input always gives one assignment. Warm-up tasks are not assigned:
Kafka 4.4.0's refinement step after this assignor (AssignmentRefiner.refine), where they would be,
returns the assignor's target unchanged (see streams_group.py).

Pure functions; any thread.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

TaskId = tuple[str, int]
Tasks = dict[str, frozenset[int]]

ASSIGNOR_NAME = "sticky"


@dataclass(frozen=True, slots=True)
class AssignmentMember:
    """What the assignor knows of a member: its process and what it owns now."""

    member_id: str
    process_id: str
    active: Tasks = field(default_factory=dict)
    standby: Tasks = field(default_factory=dict)
    task_offsets: Mapping[TaskId, int] = field(default_factory=dict)


@dataclass(slots=True)
class MemberTasks:
    active: Tasks
    standby: Tasks


class _Process:
    def __init__(self, process_id: str, order: int) -> None:
        self.process_id = process_id
        self.order = order
        self.capacity = 0
        self.task_count = 0
        self.counts: dict[str, int] = {}
        self.active: dict[str, set[TaskId]] = {}
        self.standby: dict[str, set[TaskId]] = {}
        self.tasks: set[TaskId] = set()

    @property
    def load(self) -> float:
        return self.task_count / self.capacity if self.capacity > 0 else -1.0

    def add_member(self, member_id: str) -> None:
        self.counts[member_id] = 0
        self.capacity += 1

    def add(self, member_id: str, task: TaskId, active: bool) -> int:
        self.task_count += 1
        self.tasks.add(task)
        (self.active if active else self.standby).setdefault(member_id, set()).add(task)
        self.counts[member_id] += 1
        return self.counts[member_id]

    def add_to_least_loaded(self, task: TaskId, active: bool) -> int:
        member = min(self.counts, key=lambda m: self.counts[m])  # first in id order on a tie
        return self.add(member, task, active)


class _State:
    def __init__(self, members: list[AssignmentMember], tasks_per_subtopology: Mapping[str, int],
                 stateful: set[str], num_standby: int) -> None:
        self.num_standby = num_standby
        self.total_active = sum(tasks_per_subtopology.values())
        self.total = self.total_active + sum(n * num_standby for s, n in tasks_per_subtopology.items()
                                             if s in stateful)
        self.members_with_active_capacity = len(members)
        self.members_with_capacity = len(members)
        self.active_quota = _per_member(self.total_active, len(members))
        self.total_quota = _per_member(self.total, len(members))
        self.processes: dict[str, _Process] = {}
        self.prev_active: dict[TaskId, tuple[str, str]] = {}  # task -> (process, member)
        candidates: dict[TaskId, list[tuple[int, int, int, tuple[str, str]]]] = {}
        for i, m in enumerate(sorted(members, key=lambda m: m.member_id)):
            proc = self.processes.get(m.process_id)
            if proc is None:
                proc = self.processes[m.process_id] = _Process(m.process_id, len(self.processes))
            proc.add_member(m.member_id)
            who = (m.process_id, m.member_id)
            for s, ps in m.active.items():
                for p in ps:
                    self.prev_active[(s, p)] = who
            # Kafka's standby candidates: previous standbys first, then by reported offset sum, larger first.
            for s, ps in m.standby.items():
                for p in ps:
                    candidates.setdefault((s, p), []).append((0, -m.task_offsets.get((s, p), 0), i, who))
            for (s, p), offset in m.task_offsets.items():
                if p not in m.standby.get(s, ()):
                    candidates.setdefault((s, p), []).append((1, -offset, i, who))
        self.prev_standby = {t: [c[3] for c in sorted(cs)] for t, cs in candidates.items()}

    def filled_active(self, count: int) -> None:
        if count == self.active_quota:
            self.members_with_active_capacity -= 1
            self.total_active -= count
            self.active_quota = _per_member(self.total_active, self.members_with_active_capacity)

    def filled_total(self, count: int) -> None:
        if count == self.total_quota:
            self.members_with_capacity -= 1
            self.total -= count
            self.total_quota = _per_member(self.total, self.members_with_capacity)

    def least_loaded_process(self, exclude_task: TaskId | None = None) -> _Process | None:
        procs = [p for p in self.processes.values() if exclude_task is None or exclude_task not in p.tasks]
        return min(procs, key=lambda p: (p.load, p.order)) if procs else None

    def least_loaded_previous(self, members: list[tuple[str, str]] | None,
                              standby_task: TaskId | None) -> tuple[str, str] | None:
        """Kafka's findPrevMemberWithLeastLoad: a candidate replaces the current one only when both
        its process load and its own task count are lower."""
        best = None
        best_proc_load = best_member_load = math.inf
        for process_id, member_id in members or ():
            proc = self.processes.get(process_id)
            if proc is None or member_id not in proc.counts:
                continue
            if standby_task is not None and standby_task in proc.tasks:
                continue
            proc_load, member_load = proc.load, proc.counts[member_id]
            if best is not None and not (proc_load < best_proc_load and member_load < best_member_load):
                continue
            best, best_proc_load, best_member_load = (process_id, member_id), proc_load, member_load
        return best


def _per_member(tasks: int, members: int) -> int:
    return 0 if members == 0 else -(-tasks // members)


def assign(members: Iterable[AssignmentMember], tasks_per_subtopology: Mapping[str, int], stateful: set[str],
           num_standby_replicas: int) -> dict[str, MemberTasks]:
    """The target assignment of every member (members without tasks get empty ones)."""
    member_list = list(members)
    state = _State(member_list, tasks_per_subtopology, stateful, num_standby_replicas)
    all_tasks = [(s, p) for s in sorted(tasks_per_subtopology) for p in range(tasks_per_subtopology[s])]
    _assign_active(state, all_tasks)
    if num_standby_replicas > 0:
        _assign_standby(state, [t for t in all_tasks if t[0] in stateful])
    out: dict[str, MemberTasks] = {}
    for m in member_list:
        proc = state.processes[m.process_id]
        out[m.member_id] = MemberTasks(_compact(proc.active.get(m.member_id, ())),
                                       _compact(proc.standby.get(m.member_id, ())))
    return out


def _compact(tasks: Iterable[TaskId]) -> Tasks:
    out: dict[str, set[int]] = {}
    for s, p in tasks:
        out.setdefault(s, set()).add(p)
    return {s: frozenset(ps) for s, ps in out.items()}


def _assign_active(state: _State, tasks: list[TaskId]) -> None:
    pending = sorted(tasks, key=lambda t: (t[1], t[0]))
    # 1. back to the previous active owner, within quota
    rest = []
    for task in pending:
        prev = state.prev_active.get(task)
        if prev is not None and prev[0] in state.processes and prev[1] in state.processes[prev[0]].counts:
            proc = state.processes[prev[0]]
            if proc.counts[prev[1]] < state.active_quota:
                n = proc.add(prev[1], task, True)
                state.filled_active(n)
                state.filled_total(n)
                continue
        rest.append(task)
    # 2. to a previous standby holder, within quota
    pending, rest = rest, []
    for task in pending:
        prev = state.least_loaded_previous(state.prev_standby.get(task), None)
        if prev is not None:
            proc = state.processes[prev[0]]
            if proc.counts[prev[1]] < state.active_quota:
                n = proc.add(prev[1], task, True)
                state.filled_active(n)
                state.filled_total(n)
                continue
        rest.append(task)
    # 3. the least loaded process's least loaded member
    for task in sorted(rest):
        least = state.least_loaded_process()
        if least is None:
            return  # no member at all: nothing to assign to
        n = least.add_to_least_loaded(task, True)
        state.filled_active(n)
        state.filled_total(n)


def _assign_standby(state: _State, tasks: list[TaskId]) -> None:
    to_least_loaded: list[tuple[TaskId, int]] = []
    for task in sorted(tasks, key=lambda t: (t[1], t[0]), reverse=True):
        for i in range(state.num_standby):
            prev = state.prev_active.get(task)
            if prev is not None and prev[0] in state.processes and prev[1] in state.processes[prev[0]].counts:
                proc = state.processes[prev[0]]
                if task not in proc.tasks and proc.counts[prev[1]] < state.total_quota:
                    state.filled_total(proc.add(prev[1], task, False))
                    continue
            holder = state.least_loaded_previous(state.prev_standby.get(task), task)
            if holder is not None:
                proc = state.processes[holder[0]]
                if proc.counts[holder[1]] < state.total_quota:
                    state.filled_total(proc.add(holder[1], task, False))
                    continue
            to_least_loaded.append((task, state.num_standby - i))
            break
    for task, remaining in sorted(to_least_loaded, reverse=True):
        for _ in range(remaining):
            least = state.least_loaded_process(exclude_task=task)
            if least is None:
                break  # not enough processes for the requested standby replicas (Kafka: a warning)
            state.filled_total(least.add_to_least_loaded(task, False))
