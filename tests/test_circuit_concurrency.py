"""Threads racing on one host's circuit in the store: every outcome counted, one transition to
open. In the integration tier: each thread opens and closes the file as a run's process does."""

from __future__ import annotations

import threading

from tests.test_circuit import HOST, POLICY


def test_concurrent_outcomes_lose_no_count(store):
    threads, each = 4, 15
    transitions = []

    def record() -> None:
        for _ in range(each):
            transition = store.hosts.record_host_outcome(HOST, True, "timed out", 1_000, POLICY)
            if transition is not None:
                transitions.append(transition)

    workers = [threading.Thread(target=record) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert store.hosts.host_circuits()[HOST].failures == threads * each
    assert [t.opened for t in transitions] == [True], "the circuit opened more or less than once"
