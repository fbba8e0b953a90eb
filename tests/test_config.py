"""Settings: one object, env prefix DREAM_MEMORY_, YAML file, typed errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from dream_memory_actor.config import MemorySettings
from dream_memory_actor.errors import ConfigurationError, UnsupportedBackend


def test_defaults_are_the_documented_values() -> None:
    s = MemorySettings()
    assert (s.vector_weight, s.keyword_weight, s.time_weight) == (0.6, 0.3, 0.1)
    assert s.dedup_threshold == 0.75
    assert (s.hitl_write_threshold, s.hitl_pending_threshold) == (0.82, 0.55)
    assert s.max_content_bytes == 32 * 1024
    assert s.backend == "postgres" and s.postgres_dsn is None


def test_environment_switches_backend_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DREAM_MEMORY_BACKEND", "redis")
    monkeypatch.setenv("DREAM_MEMORY_REDIS_URL", "redis://127.0.0.1:6379/0")
    s = MemorySettings()
    assert s.backend == "redis"
    assert s.redis_url is not None and "6379" in s.redis_url.get_secret_value()
    assert "6379" not in repr(s)  # secrets stay out of logs


def test_yaml_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "memory.yaml"
    f.write_text("backend: memory\nvector_weight: 0.5\ndedup_threshold: 0.9\n")
    s = MemorySettings.from_yaml(f)
    assert (s.backend, s.vector_weight, s.dedup_threshold) == ("memory", 0.5, 0.9)
    monkeypatch.setenv("DREAM_MEMORY_VECTOR_WEIGHT", "0.7")
    assert MemorySettings.from_yaml(f).vector_weight == 0.7  # environment wins
    monkeypatch.setenv("DREAM_MEMORY_CONFIG_FILE", str(f))
    assert MemorySettings().backend == "memory"


def test_unsupported_backend_is_typed() -> None:
    with pytest.raises(UnsupportedBackend):
        MemorySettings(backend="milvus")


def test_inconsistent_thresholds_rejected() -> None:
    with pytest.raises(ConfigurationError):
        MemorySettings(hitl_pending_threshold=0.9, hitl_write_threshold=0.8)


def test_missing_yaml_file() -> None:
    with pytest.raises(ConfigurationError):
        MemorySettings.from_yaml("/nonexistent/memory.yaml")
