"""Ray's errors become the project's at one place: ``ray_errors`` (no cluster needed)."""

from __future__ import annotations

import pytest
from ray.exceptions import GetTimeoutError, RayActorError

from dream_memory_actor.errors import ExtractionUnavailable, UnknownStatusKey
from dream_memory_actor.runtime.errors import RuntimeTimeout, RuntimeUnavailable, ray_errors


def test_timeouts_and_lost_actors_are_translated_and_chained() -> None:
    late = "search did not finish in time"
    with pytest.raises(RuntimeTimeout, match=late) as info, ray_errors("search"):
        raise GetTimeoutError("slow")
    assert isinstance(info.value.__cause__, GetTimeoutError)
    with pytest.raises(RuntimeUnavailable, match="the actor is unavailable"), ray_errors("search"):
        raise RayActorError()


def test_a_chosen_class_replaces_the_runtime_ones() -> None:
    for raised in (GetTimeoutError("slow"), RayActorError()):
        with (pytest.raises(ExtractionUnavailable) as info,
              ray_errors("extraction", ExtractionUnavailable)):
            raise raised
        assert type(info.value) is ExtractionUnavailable and info.value.__cause__ is raised


def test_our_errors_and_other_errors_pass_unchanged() -> None:
    ours = UnknownStatusKey("no key")
    with pytest.raises(UnknownStatusKey) as info, ray_errors("apply"):
        raise ours
    assert info.value is ours and info.value.__cause__ is None
    with pytest.raises(KeyError), ray_errors("apply"):
        raise KeyError("not a Ray error")
