"""Each model host's circuit (`digest.circuit`): the outcome of every model call on it, and which
hosts a run may go to now (a half-open host's one probe run taken here)."""

from __future__ import annotations

import threading

import duckdb

from digest.circuit import CircuitPolicy, CircuitState, HostCircuit, Transition, after_outcome, after_probe
from resources.store.connection import Repository, records

COLUMNS = ["host", "failures", "opens", "retry_at_ms", "probe_until_ms", "last_error", "changed_at_ms"]
# DuckDB's optimistic concurrency fails the second of two threads of one process that update the same
# row ("Conflict on update"), so this process's circuit writes take turns; another process waits for
# the file's lock in `connect`.
_write_lock = threading.Lock()


def read_circuits(con: duckdb.DuckDBPyConnection, hosts: list[str] | None = None) -> dict[str, HostCircuit]:
    """The stored circuits (of these hosts), by host; a host with none is closed."""
    sql = f"SELECT {', '.join(COLUMNS)} FROM host_circuits"
    if hosts is not None:
        sql += " WHERE host IN (SELECT unnest(?::VARCHAR[]))"
    rows = records(con, sql + " ORDER BY host", [hosts] if hosts is not None else None)
    return {row["host"]: HostCircuit(**row) for row in rows}


def _put(con: duckdb.DuckDBPyConnection, circuit: HostCircuit) -> None:
    con.execute(
        f"INSERT OR REPLACE INTO host_circuits ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})",
        [getattr(circuit, column) for column in COLUMNS],
    )


class Hosts(Repository):
    def record_host_outcome(
        self, host: str, failed: bool, error_text: str | None, now_ms: int, policy: CircuitPolicy
    ) -> Transition | None:
        """One call's outcome on the host's circuit, in one short transaction; the transition it
        made (the circuit opened, again or first, or closed), else None."""
        with _write_lock, self.file.transaction() as con:
            circuit = read_circuits(con, [host]).get(host, HostCircuit(host))
            if not failed and circuit.failures == 0 and circuit.retry_at_ms is None:
                return None  # closed and clean: the common success writes nothing
            circuit, transition = after_outcome(circuit, failed, error_text, now_ms, policy)
            _put(con, circuit)
        return transition

    def host_in_rotation(self, host: str, now_ms: int) -> bool:
        """Whether a run already placed on `host` may still call it: not while its circuit is open
        (a half-open host is being probed: the run's call may be the probe). Only reads."""
        with self.file.connect() as con:
            circuit = read_circuits(con, [host]).get(host)
        return circuit is None or circuit.state(now_ms) != CircuitState.OPEN

    def host_circuits(self) -> dict[str, HostCircuit]:
        """Every host with a stored circuit (one that has failed since it last succeeded, or did once)."""
        with self.file.connect() as con:
            return read_circuits(con)

    def available_hosts(self, names: list[str], now_ms: int, policy: CircuitPolicy, probe: bool = True) -> list[str]:
        """Of these hosts, in their order, those a run may go to now: closed, or half-open with no
        probe out. A half-open host returned is its one probe run, taken here (give it one run: its
        `host_circuits()` state is half-open): the next call sees the probe out until the probe's
        outcome is recorded, or another backoff passes. `probe=False`: only look (`plan`), take none."""
        with self.file.connect() as con:
            circuits = read_circuits(con, list(names))
        if not probe or not any(
            c.state(now_ms) == CircuitState.HALF_OPEN and c.available(now_ms) for c in circuits.values()
        ):
            # No probe to take: a read, no write transaction on each sensor tick.
            return [name for name in names if name not in circuits or circuits[name].available(now_ms)]
        with _write_lock, self.file.transaction() as con:
            circuits = read_circuits(con, list(names))  # again under the lock: another tick may have taken it
            available = []
            for name in names:
                circuit = circuits.get(name)
                if circuit is not None and not circuit.available(now_ms):
                    continue
                if circuit is not None and circuit.state(now_ms) == CircuitState.HALF_OPEN:
                    _put(con, after_probe(circuit, now_ms, policy))
                available.append(name)
        return available
