"""The claim's group-head reads on PostgreSQL are served in the index's order (issue 38):
``model IS NOT DISTINCT FROM`` was only a filter there, and "model IS NULL" is no equality
to its planner, so each claim sorted every READY task of the class (2 ms at 5,000, in the
lock every brain's writes take turns on)."""

from __future__ import annotations

import brain_helpers as h
import pytest

from airig.brain.store import candidates


@pytest.mark.parametrize("model", [None, "qwen2.5:7b"])
def test_a_group_head_is_read_from_tasks_ready_heads_without_a_sort(tmp_path, pg_url, model):
    brain = h.make_brain(tmp_path, BRAIN_DATABASE_URL=pg_url)
    try:
        tasks = [h.noop(f"t{i}") for i in range(2000)]
        if model:
            tasks = [
                {**t, "type": "llm", "model": model, "payload": {"prompt": "p"}} for t in tasks
            ]
        h.submit(brain, tasks)
        with brain.db.tx() as conn:
            conn.execute("ANALYZE tasks")  # what autovacuum does on a live server
        task_class = "llm" if model else "cpu"
        next_head, group_size = candidates._QUERIES[True]
        with brain.db.read() as conn:
            head = _plan(conn, candidates._pg_form(next_head, model), (task_class, model, 0))
            # the head: the first row of the index's range, nothing read past it
            assert "tasks_ready_heads" in head and "Sort" not in head, head
            size = _plan(conn, candidates._pg_form(group_size, model), (task_class, model, 5, 100))
            # the count stops at its cap, whichever scan reads the rows
            assert "Limit" in size and "Sort" not in size, size
            heads = candidates.group_heads(conn, [task_class], True, (), 100)
        assert [(head[1], head[4], head[5]) for head in heads] == [(task_class, model, 100)]
    finally:
        brain.db.close()


def _plan(conn, query: str, params: tuple) -> str:
    return "\n".join(row[0] for row in conn.execute("EXPLAIN " + query, params).fetchall())
