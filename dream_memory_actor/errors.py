"""The one error hierarchy of dream-memory-actor.

Every failure a caller can see is one of these; driver, HTTP and Ray errors are
translated at the boundary and chained (``raise ... from exc``)::

    DreamMemoryError
    ├── InvalidInput (also a ValueError)     bad arguments; nothing was written
    │   ├── InvalidOwnerId
    │   ├── InvalidContent                   empty, too large, NUL characters
    │   ├── InvalidEmbedding                 NaN/inf, wrong dimension
    │   ├── InvalidStatusKey
    │   ├── InvalidMetadata
    │   ├── InvalidQuery
    │   │   ├── InvalidFilter                a metadata filter that is not key = scalar
    │   │   └── InvalidBatch                 an empty, oversized or malformed batch
    │   ├── DuplicateId                      an id the owner uses for other content
    │   ├── InvalidImport                    an export document that cannot be imported
    │   ├── OwnerNotEmpty                    an import into an owner that holds data
    │   ├── AuditNotWritable                 the audit trail is written by decisions only
    │   ├── SupersessionCycle                a supersession that would close a loop
    │   └── ProposalChanged                  its memories changed since it was proposed
    ├── NotFound (also a LookupError)
    │   ├── UnknownStatusKey
    │   ├── MemoryNotFound
    │   │   └── MemorySuperseded             closed by a supersession (see its history)
    │   ├── RuleNotFound / FactNotFound
    │   ├── PendingItemNotFound
    │   │   └── PendingItemDecided           confirmed or rejected already (the other way)
    │   ├── ProposalNotApplied               no applied consolidation proposal to undo
    │   └── ItemNotFound                     no current rule or fact with that id
    │       └── ItemSuperseded               the item was superseded already
    ├── ConfigurationError                   the settings cannot work
    │   ├── UnsupportedBackend
    │   └── MissingDependency                an optional extra is not installed
    ├── BackendError                         the storage server failed
    │   ├── BackendUnavailable               cannot connect / connection lost
    │   └── SchemaError                      migrations missing or incompatible
    ├── EmbeddingError                       the embedding model failed
    ├── RerankError                          the reranker failed (rerank_on_error="raise")
    ├── ExtractionError                      the extraction LLM failed; nothing was written
    │   ├── MalformedExtraction              its reply is not the expected JSON
    │   └── ExtractionUnavailable            timeout, rate limit, 5xx, no connection
    └── SystemClosed                         a call after shutdown()
"""

from __future__ import annotations

import importlib.util


class DreamMemoryError(Exception):
    """Base class of every error raised by dream-memory-actor."""


class InvalidInput(DreamMemoryError, ValueError):
    """An argument is not acceptable. Nothing was written."""


class InvalidOwnerId(InvalidInput):
    """The owner id does not have the allowed form (see ``validation.OWNER_ID_PATTERN``)."""


class InvalidContent(InvalidInput):
    """Memory content is empty, whitespace only, too large or contains NUL characters."""


class InvalidEmbedding(InvalidInput):
    """An embedding has the wrong dimension or a non-finite value."""


class InvalidStatusKey(InvalidInput):
    """A status key does not have the allowed form."""


class InvalidMetadata(InvalidInput):
    """Metadata is not a JSON object of acceptable size."""


class InvalidQuery(InvalidInput):
    """A search query or its options are not acceptable."""


class InvalidFilter(InvalidQuery):
    """A metadata filter is not a mapping of a few keys to scalar values (equality only)."""


class InvalidBatch(InvalidQuery):
    """A batch of memories is empty, has too many items or bytes, or an item is malformed."""


class DuplicateId(InvalidInput):
    """A rule, fact or pending item id the owner already uses for other content."""


class AuditNotWritable(InvalidInput):
    """An ``AddAudit`` operation from a caller: audit entries are written only by the
    decisions themselves (confirm and reject), never through ``apply``."""


class InvalidImport(InvalidInput):
    """An export document that cannot be imported (unknown format or version, a record
    of another owner, a wrong embedding dimension, a malformed or missing record)."""


class OwnerNotEmpty(InvalidInput):
    """An import into an owner that already holds data (forget it first)."""


class ProposalChanged(InvalidInput):
    """A consolidation proposal whose memories changed since it was made (or, to undo,
    since it was applied); nothing was written."""


class NotFound(DreamMemoryError, LookupError):
    """The addressed item does not exist for this owner."""


class UnknownStatusKey(NotFound):
    """Deleting a status key the owner does not have."""


class MemoryNotFound(NotFound):
    """No semantic memory with that id for this owner."""


class MemorySuperseded(MemoryNotFound):
    """The memory was superseded: it is closed, and only its history shows it.

    ``superseded_by`` is the id of the memory that replaced it.
    """

    def __init__(self, message: str, superseded_by: str | None = None) -> None:
        super().__init__(message)
        self.superseded_by = superseded_by

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (str(self), self.superseded_by))


class RuleNotFound(NotFound):
    """No rule with that id for this owner."""


class FactNotFound(NotFound):
    """No fact with that id for this owner."""


class PendingItemNotFound(NotFound):
    """No pending item with that id for this owner."""


class SupersessionCycle(InvalidInput):
    """A supersession whose new item would be one of the items it descends from."""


class ProposalNotApplied(NotFound):
    """No consolidation proposal of that id was applied to the owner (nothing to undo)."""


class ItemNotFound(NotFound):
    """No current rule or fact with that id for this owner (superseding, history)."""


class ItemSuperseded(ItemNotFound):
    """The item was superseded already: only the current item of a chain can be."""


class ConfigurationError(DreamMemoryError):
    """The settings cannot work (raised while loading or opening them)."""


class EmbeddingModelMismatch(ConfigurationError):
    """The store's memories were embedded with another model than the one configured:
    their vectors and the new ones would be compared as if they were one scale."""


class UnsupportedBackend(ConfigurationError):
    """The backend name is not one of the supported backends."""


class MissingDependency(ConfigurationError, ImportError):
    """An optional dependency is not installed; the message names the extra to install."""


class BackendError(DreamMemoryError):
    """The storage backend failed; the driver's exception is chained as ``__cause__``."""


class BackendUnavailable(BackendError):
    """The storage server cannot be reached or the connection was lost."""


class SchemaError(BackendError):
    """The database schema is missing, too new, or incompatible with the settings."""


class EmbeddingError(DreamMemoryError):
    """The embedding model failed or returned something unusable."""


class RerankError(DreamMemoryError):
    """The reranker failed or returned something unusable (the cause is chained). Raised
    only with ``rerank_on_error="raise"``; by default the search answers the hybrid order."""


class SystemClosed(DreamMemoryError):
    """The memory system (or store) was shut down; no call is accepted after that."""


class PendingItemDecided(PendingItemNotFound):
    """The pending item was already decided the other way (rejected, or confirmed)."""


class ExtractionError(DreamMemoryError):
    """Memory extraction failed; nothing of that extraction was written."""


class MalformedExtraction(ExtractionError):
    """The extractor's reply is not the expected JSON (shape, fields or value ranges)."""


class ExtractionUnavailable(ExtractionError):
    """The extraction model could not answer in time: timeout, rate limit, 5xx, no connection."""


def require(module: str, extra: str) -> None:
    """``MissingDependency`` naming ``extra`` unless ``module`` is installed (looked up,
    not imported: instant, where importing a model's stack takes seconds)."""
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module without a spec
        found = False
    if not found:
        raise missing_dependency(module, extra)


def missing_dependency(module: str, extra: str) -> MissingDependency:
    """The error for an optional import that failed, naming the extra that provides it."""
    return MissingDependency(
        f"the optional dependency {module!r} is not installed; "
        f"install it with: pip install 'dream-memory-actor[{extra}]'"
    )
