"""One settings object for the whole system.

Values come, strongest first, from keyword arguments, ``DREAM_MEMORY_*``
environment variables, the YAML file named by ``DREAM_MEMORY_CONFIG_FILE`` (or
passed to :meth:`MemorySettings.from_yaml`), and the defaults below. Switching
the storage engine is one line::

    backend: redis            # or postgres (default) or memory
    redis_url: redis://cache:6379/0

With ``backend: postgres`` and no ``postgres_dsn``, an embedded PostgreSQL with
pgvector is started in a per-user data directory and used.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import (
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from .errors import ConfigurationError, UnsupportedBackend
from .limits import Limits
from .scoring import Weights

BACKENDS = ("memory", "postgres", "redis")
PLACEMENTS = ("dedicated", "sharded")
#: The settings that take one of a few names, and the names.
CHOICES = {"backend": BACKENDS, "placement": PLACEMENTS, "rerank_on_error": ("fallback", "raise")}


def default_data_dir() -> Path:
    """Per-user data directory: ``$XDG_DATA_HOME/dream-memory``, else under ``~/.local/share``."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "dream-memory"


class MemorySettings(BaseSettings):
    """Every knob of dream-memory-actor, with the documented defaults."""

    model_config = SettingsConfigDict(
        env_prefix="DREAM_MEMORY_", extra="forbid", frozen=True, validate_default=True
    )

    # storage
    backend: str = "postgres"
    postgres_dsn: SecretStr | None = None
    postgres_schema: str = "dream_memory"
    postgres_pool_min: int = Field(1, ge=0, le=100)
    postgres_pool_max: int = Field(8, ge=1, le=200)
    # memories of recently searched owners each process keeps, so that a search of them
    # runs no statement after its query's vector (storage/owner_rows.py); 0: none
    postgres_cache_rows: int = Field(10_000, ge=0)
    data_dir: Path = Field(default_factory=default_data_dir)
    redis_url: SecretStr | None = None
    redis_prefix: str = "dm"
    # Redis Cluster: True, or a redis_url of the form redis+cluster://host:port[,host:port...]
    # (rediss+cluster:// for TLS); the client reads the slot map from those hosts.
    redis_cluster: bool = False
    # After each write transaction, WAIT until this many replicas acknowledged it (0: do
    # not wait; Redis replication is asynchronous) or redis_wait_timeout_ms passed.
    redis_wait_replicas: int = Field(0, ge=0, le=16)
    redis_wait_timeout_ms: int = Field(1000, ge=1, le=60_000)

    # embeddings: None = keyword-only search.
    # "local:multilingual-e5-small" (extra multilingual), "local:use-multilingual" (extra use),
    # "local:all-MiniLM-L6-v2" (English only, extra local; other local names go to
    # sentence-transformers) run in-process; anything else = a litellm model.
    embedding_model: str | None = None
    embedding_dim: int | None = Field(None, ge=1, le=16000)
    embedding_cache_size: int = Field(10_000, ge=0)
    embedding_api_base: str | None = None
    embedding_api_key: SecretStr | None = None
    embedding_timeout_s: float = Field(30.0, gt=0)
    # calls a local numpy model (e5, USE) runs at once, each on an engine of its own;
    # None = e5's default (``multilingual.engines_for``, with the idle engines of
    # ``multilingual.idle_engines_for``), USE's one; a number leaves no idle engines.
    # e5 keeps one engine more for search queries alone, whatever this says, where
    # OMP_NUM_THREADS is set (as Ray sets it); without it, one engine takes every core
    embedding_engines: int | None = Field(None, ge=1, le=64)
    # a calibration file written by `python -m dream_memory_actor.embedding.calibrate`;
    # None = the one shipped for the model, else raw cosines
    embedding_calibration: Path | None = None

    # hybrid search (the defaults are ``scoring.Weights``')
    vector_weight: float = Field(Weights.vector, ge=0)
    keyword_weight: float = Field(Weights.keyword, ge=0)
    time_weight: float = Field(Weights.time, ge=0)
    time_half_life_days: float = Field(Weights.half_life_days, gt=0)
    vector_candidates: int = Field(40, ge=1, le=10_000)
    keyword_candidates: int = Field(40, ge=1, le=10_000)
    hnsw_ef_search: int = Field(100, ge=1, le=1000)

    # reranking (``rerank``): None = off. "cross-encoder:<path or name>" runs a
    # sentence-transformers CrossEncoder in-process (extra local); anything else = a
    # litellm rerank model (Cohere/Jina-compatible endpoint, extra litellm)
    rerank_model: str | None = None
    rerank_candidates: int = Field(20, ge=1, le=1000)
    rerank_api_base: str | None = None
    rerank_api_key: SecretStr | None = None
    rerank_timeout_s: float = Field(10.0, gt=0)
    rerank_max_length: int | None = Field(None, ge=8, le=8192)
    # when the reranker fails: "fallback" = answer the hybrid order (rerank_score None),
    # "raise" = RerankError
    rerank_on_error: str = "fallback"

    # writes: a new memory is judged against the owner's ``dedup_nearest`` nearest ones
    # above ``dedup_candidate_threshold`` (storage.dedup.judge); a rewording with
    # nothing in conflict merges above ``dedup_threshold`` (both calibrated similarity)
    dedup_threshold: float = Field(0.75, ge=0, le=1)
    dedup_candidate_threshold: float = Field(0.70, ge=0, le=1)
    dedup_nearest: int = Field(3, ge=1, le=20)
    # None = the rules alone; else a litellm chat model that decides the pairs the
    # rules call "unsure" (JSON reply; any failure keeps both memories)
    judge_model: str | None = None
    judge_api_base: str | None = None
    judge_api_key: SecretStr | None = None
    judge_timeout_s: float = Field(10.0, gt=0)
    # consolidation ("dreaming", engine.consolidation): proposals per pass; a memory
    # neither changed nor found by a search for longer than the days is proposed to
    # expire (None: never); an owner who opts in has every proposal applied at once
    # (else a person decides each)
    consolidation_max_proposals: int = Field(100, ge=1, le=10_000)
    consolidation_expire_after_days: float | None = Field(None, gt=0)
    consolidation_auto_apply: bool = False
    # on Ray, a pass for each owner whose memories have not changed for this long
    # (runtime.dreamer; None: only when asked), at most this many owners per run
    consolidation_idle_s: float | None = Field(None, gt=0)
    consolidation_owners_per_run: int = Field(10, ge=1, le=10_000)
    max_content_bytes: int = Field(32 * 1024, ge=16, le=1024 * 1024)
    # caps that also hold after merges and over many calls (``limits.Limits``)
    max_metadata_bytes: int = Field(16 * 1024, ge=256, le=1024 * 1024)
    max_metadata_keys: int = Field(128, ge=1, le=10_000)
    max_merge_history: int = Field(20, ge=0, le=1000)
    max_merge_history_bytes: int = Field(64 * 1024, ge=0, le=16 * 1024 * 1024)
    max_status_keys: int = Field(256, ge=1, le=100_000)
    # at least 8000: the evidence of an extracted item (2000 characters) always fits
    max_pending_field_bytes: int = Field(8 * 1024, ge=8000, le=1024 * 1024)
    # values each status key keeps in its history, the current one included
    max_status_history: int = Field(20, ge=1, le=10_000)

    # human-in-the-loop gate
    hitl_write_threshold: float = Field(0.82, ge=0, le=1)
    hitl_pending_threshold: float = Field(0.55, ge=0, le=1)
    pending_ttl_s: float | None = Field(7 * 24 * 3600.0, gt=0)

    # extraction: None = the rule-based extractor (offline); else a litellm model name
    extraction_model: str | None = None
    extraction_api_base: str | None = None
    extraction_api_key: SecretStr | None = None
    extraction_temperature: float = Field(0.0, ge=0, le=2)
    extraction_timeout_s: float = Field(60.0, gt=0)
    extraction_max_retries: int = Field(2, ge=0, le=10)
    extraction_pool_size: int = Field(2, ge=1, le=256)
    # what a memory extracted from a conversation carries as its context (embedded and
    # searched with it, see VectorMemory.context): the turns before the one its evidence
    # quotes, and the conversation's date (two turns: LoCoMo's hybrid recall@10 was 1.8
    # points above one turn and above three, paired, python -m benchmarks retrieval
    # --context beside --context-turns N)
    extraction_context_turns: int = Field(2, ge=0, le=20)
    extraction_context_date: bool = True

    # runtime
    placement: str = "sharded"
    shards: int = Field(2, ge=1, le=1024)
    max_live_owners: int = Field(10_000, ge=1)
    idle_timeout_s: float = Field(3600.0, gt=0)
    chat_window: int = Field(20, ge=1, le=10_000)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # A value of the wrong type or range (a keyword, a DREAM_MEMORY_* variable or
        # the YAML file) is a ConfigurationError naming the setting, not pydantic's error.
        try:
            super().__init__(*args, **kwargs)
        except ValidationError as exc:
            raise ConfigurationError(f"invalid settings: {_problems(exc)}") from None

    @field_validator(*CHOICES)
    @classmethod
    def _known(cls, value: str, info: ValidationInfo) -> str:
        # Not a ValueError on purpose: pydantic lets it through unwrapped, so the
        # caller sees our typed error rather than a pydantic ValidationError.
        name = info.field_name or ""
        if value not in CHOICES[name]:
            error = UnsupportedBackend if name == "backend" else ConfigurationError
            raise error(f"unsupported {name} {value!r}; choose one of: "
                        f"{', '.join(CHOICES[name])}")
        return value

    @field_validator("postgres_schema", "redis_prefix")
    @classmethod
    def _identifier(cls, value: str) -> str:
        # Interpolated into DDL and key names, so whitelisted rather than quoted.
        if not value.isascii() or not value.replace("_", "a").isalnum() or value[0].isdigit():
            raise ConfigurationError(
                f"{value!r} is not a plain identifier (letters, digits, _; not starting "
                "with a digit)"
            )
        if len(value) > 48:
            raise ConfigurationError(f"{value!r} is longer than 48 characters")
        return value.lower()

    @model_validator(mode="after")
    def _consistent(self) -> MemorySettings:
        if self.hitl_pending_threshold > self.hitl_write_threshold:
            raise ConfigurationError(
                "hitl_pending_threshold must not exceed hitl_write_threshold "
                f"({self.hitl_pending_threshold} > {self.hitl_write_threshold})"
            )
        if self.postgres_pool_min > self.postgres_pool_max:
            raise ConfigurationError("postgres_pool_min must not exceed postgres_pool_max")
        return self

    @property
    def limits(self) -> Limits:
        """The size caps besides ``max_content_bytes``, for the stores and the handles."""
        return Limits.of(self)

    @property
    def weights(self) -> Weights:
        return Weights(
            self.vector_weight, self.keyword_weight, self.time_weight, self.time_half_life_days
        )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        path = os.environ.get("DREAM_MEMORY_CONFIG_FILE")
        if path:
            if not Path(path).is_file():
                raise ConfigurationError(f"DREAM_MEMORY_CONFIG_FILE={path!r} is not a file")
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=path))
        return tuple(sources)

    @classmethod
    def from_yaml(cls, path: str | Path, **overrides: Any) -> MemorySettings:
        """Settings from a YAML file; environment variables and ``overrides`` win over it."""
        import yaml

        p = Path(path)
        if not p.is_file():
            raise ConfigurationError(f"settings file {str(p)!r} does not exist")
        data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
        if not isinstance(data, dict):
            raise ConfigurationError(f"settings file {str(p)!r} must hold a mapping")
        env_names = {k.removeprefix("DREAM_MEMORY_").lower() for k in os.environ
                     if k.startswith("DREAM_MEMORY_")}
        merged = {k: v for k, v in data.items() if k not in env_names}
        merged.update(overrides)
        return cls(**merged)


def _problems(exc: ValidationError) -> str:
    """One line for the errors of a settings validation: each setting and what is wrong."""
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err.get("loc", ())) or "settings"
        parts.append(f"{where}: {err.get('msg', 'invalid')} (got {err.get('input')!r})")
    return "; ".join(parts)
