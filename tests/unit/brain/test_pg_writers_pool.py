"""store/pg_writers.py's pool on its own, with fake connections: what a write leaves behind
(a lost connection, a transaction a failed COMMIT left open, a connect that fails) never
reaches the next write, and no more than ``size`` connections are ever open."""

from __future__ import annotations

import sqlite3
import threading

import pytest

from airig.brain.store.pg_writers import Writers


class Fake:
    def __init__(self, log: list[str], name: str) -> None:
        self.log, self.name = log, name
        self.locks_rows = False
        self.in_transaction = False
        self.lost = False
        self.fail_rollback = False

    def execute(self, sql: str, params: object = ()) -> None:
        self.log.append(f"{self.name} {sql}")
        if sql == "ROLLBACK":
            if self.fail_rollback:
                raise sqlite3.OperationalError("server closed the connection")
            self.in_transaction = False

    def close(self) -> None:
        self.log.append(f"{self.name} close")


def pool(size: int, fail: list[bool] | None = None) -> tuple[Writers[Fake], list[str]]:
    log: list[str] = []
    made = iter(range(100))
    failures = list(fail or [])

    def connect() -> Fake:
        if failures and failures.pop(0):
            log.append("connect failed")
            raise sqlite3.OperationalError("connection refused")
        name = f"c{next(made)}"
        log.append(f"{name} open")
        return Fake(log, name)

    return Writers[Fake](connect, size), log


def test_a_lost_connection_is_closed_and_the_next_write_opens_anew() -> None:
    writers, log = pool(1)
    with writers.take() as conn:
        assert conn.locks_rows  # row locks: other writes run beside it
        conn.lost = True
    with writers.take() as conn:
        assert conn.name == "c1"
    assert log == ["c0 open", "c0 close", "c1 open"]


def test_a_transaction_left_open_is_rolled_back_before_the_connection_is_lent_again() -> None:
    writers, log = pool(1)
    with writers.take() as conn:
        conn.in_transaction = True  # a COMMIT that failed
    with writers.take() as again:
        assert again is conn and not again.in_transaction
    assert log == ["c0 open", "c0 ROLLBACK"]


def test_a_transaction_whose_rollback_fails_is_closed_not_lent_again(caplog) -> None:
    writers, log = pool(1)
    with writers.take() as conn:
        conn.in_transaction, conn.fail_rollback = True, True  # still open after it
    with writers.take() as fresh:
        assert fresh.name == "c1"  # every BEGIN on c0 would have failed
    assert log == ["c0 open", "c0 ROLLBACK", "c0 close", "c1 open"]
    assert "could not roll back" in caplog.text


def test_a_connect_that_fails_frees_its_place_for_the_next_write() -> None:
    writers, log = pool(1, fail=[True, False])
    with pytest.raises(sqlite3.OperationalError), writers.take():
        pass
    with writers.take() as conn:  # not blocked forever by the failed one's place
        assert conn.name == "c0"
    assert log == ["connect failed", "c0 open"]


def test_never_more_than_size_open_and_a_third_write_waits_for_one_given_back() -> None:
    writers, log = pool(2)
    first, second = writers.take(), writers.take()
    a, _ = first.__enter__(), second.__enter__()
    got: list[Fake] = []
    third = threading.Thread(target=lambda: got.append(writers.take().__enter__()))
    third.start()
    third.join(0.3)
    assert third.is_alive() and got == []  # waits: two are open and lent
    first.__exit__(None, None, None)
    third.join(5)
    assert got == [a] and [line for line in log if line.endswith("open")] == ["c0 open", "c1 open"]
    second.__exit__(None, None, None)
    writers._give_back(got[0])
    writers.close()
    assert sorted(line for line in log if line.endswith("close")) == ["c0 close", "c1 close"]
