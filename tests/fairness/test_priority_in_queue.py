"""Priority inside a queue, asked directly (:class:`UsersInQueue`): which lower-priority pods
of its own queue a pod may take, the refusal it is told, and when the end state is asked."""

from __future__ import annotations

import numpy as np
from fairness_builders import cluster, node, pod

from fairgpu.engine.actions.order import lanes
from fairgpu.engine.actions.priority_in_queue import UsersInQueue
from fairgpu.engine.actions.victim_eligibility import HeldBack
from fairgpu.engine.engine import Engine
from fairgpu.engine.jobs import Job
from fairgpu.model.pod import LABEL_USER, PodInfo


def user_pod(name: str, user: str, priority: int = 0) -> PodInfo:
    return pod(name, "q", priority=priority, labels={LABEL_USER: user})


def _users(placed: list[PodInfo], preemptor: PodInfo) -> tuple[UsersInQueue, Job, list[int]]:
    """The within-queue rule for ``preemptor`` on a 4-GPU node holding ``placed``; the list
    counts the calls of the end-state callable."""
    state = cluster(node("n1", gpus=4), placed=[(p, "n1", 0.0) for p in placed])
    engine = Engine()
    session = engine.session(state, 1000.0)
    job = Job(preemptor.uid, [preemptor], engine.tenant(preemptor))
    return UsersInQueue(session, lanes([job])), job, []


def test_a_user_above_its_share_keeps_to_its_own_pods_and_is_told_why() -> None:
    placed = [user_pod(f"al{j}", "alice") for j in range(3)] + [user_pod("bob0", "bob")]
    users, job, calls = _users(placed, user_pod("al-new", "alice", 50))

    def ask() -> np.ndarray:
        calls.append(1)
        return users.s.book.pending_vector(job.pods[0])

    pods, why = users.lower_priority(job, job.pods[0], HeldBack(), ask)
    assert pods == ["q/al0", "q/al1", "q/al2"]
    assert "user 'alice' would be above its share of queue 'q'" in why
    assert len(calls) == 1  # asked once, for the first other user's pod


def test_a_user_below_its_share_may_take_another_users_lower_priority_pods() -> None:
    placed = [user_pod(f"bob{j}", "bob") for j in range(4)]
    users, job, _ = _users(placed, user_pod("al-new", "alice", 50))
    pods, why = users.lower_priority(
        job, job.pods[0], HeldBack(), lambda: users.s.book.pending_vector(job.pods[0])
    )
    assert pods == [f"q/bob{j}" for j in range(4)] and why == ""


def test_the_end_state_is_not_asked_when_only_the_users_own_pods_are_candidates() -> None:
    placed = [user_pod(f"al{j}", "alice") for j in range(2)] + [user_pod("bob0", "bob", 90)]
    users, job, calls = _users(placed, user_pod("al-new", "alice", 50))

    def ask() -> np.ndarray:
        calls.append(1)
        return users.s.book.pending_vector(job.pods[0])

    # bob's pod has the higher priority: it is no candidate, so no share is asked.
    pods, why = users.lower_priority(job, job.pods[0], HeldBack(), ask)
    assert pods == ["q/al0", "q/al1"] and why == "" and not calls
