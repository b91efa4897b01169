"""A 401 to a request sent with the old token, answered after the worker registered again,
asks for no further registration (the race that made a worker register three times after
its brain lost its state: the heartbeat's in-flight beat, then the claim loop)."""

from __future__ import annotations

from airig.worker.heartbeat import Heartbeat
from airig.worker.link import BrainLink, Unregistered
from airig.worker.runner import CurrentAttempt


def refused(token: str | None) -> Unregistered:
    exc = Unregistered("unknown token")
    exc.token = token
    return exc


def test_only_a_refusal_of_the_token_held_now_means_register_again():
    link = BrainLink("http://127.0.0.1:9", "boot")
    link._token = "new"
    assert link.still_unregistered(refused("new"))
    assert not link.still_unregistered(refused("old"))
    assert link.still_unregistered(refused(None))  # no token known: register, as before


class RefusingLink(BrainLink):
    def __init__(self, token_refused: str) -> None:
        super().__init__("http://127.0.0.1:9", "boot")
        self._token, self.token_refused = "new", token_refused

    def heartbeat(self, request, timeout):
        raise refused(self.token_refused)


def beat_with(token_refused: str, tmp_path) -> bool:
    link = RefusingLink(token_refused)
    beat = Heartbeat(link, "w1", 5.0, CurrentAttempt(), lambda: None, tmp_path / "state.json")
    beat.beat()
    return beat.needs_register.is_set()


def test_a_beat_refused_with_the_old_token_does_not_ask_again(tmp_path):
    assert not beat_with("old", tmp_path)
    assert beat_with("new", tmp_path)
