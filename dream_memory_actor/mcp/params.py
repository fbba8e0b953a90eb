"""What the MCP tools' parameters mean, in words and JSON-Schema bounds.

One vocabulary for every tool: a parameter is described by its name (``owner``,
``content``, ``limit``, ...), so a new tool with the usual parameter names needs
no descriptions of its own. The bounds come from the library's own rules
(``validation``, ``limits`` and the settings), so the schema a client sees is what
the server enforces; the server still checks every argument itself and answers a
bad one with a typed error (``InvalidQuery``, ``InvalidContent``, ...).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import validation as check
from ..config import MemorySettings

Bounds = Callable[[MemorySettings], dict[str, Any]]


def _fixed(**bounds: Any) -> Bounds:
    """Bounds that do not depend on the settings (a fresh copy for each schema)."""
    return lambda _: dict(bounds)


@dataclass(frozen=True)
class Param:
    """One parameter: a plain-words description and its JSON-Schema bounds."""

    description: str
    bounds: Bounds = field(default=_fixed())


def _pattern(regex: re.Pattern[str]) -> str:
    return f"^{regex.pattern}$"


def _text(s: MemorySettings) -> dict[str, Any]:
    # maxLength counts characters; a character is at least one UTF-8 byte
    return {"minLength": 1, "maxLength": s.max_content_bytes}


def _metadata(s: MemorySettings) -> dict[str, Any]:
    return {"maxProperties": s.max_metadata_keys}


_owner = _fixed(pattern=_pattern(check.OWNER_ID_PATTERN), maxLength=128)
_name = _fixed(minLength=1, maxLength=check.MAX_NAME_CHARS)
_item_id = _fixed(minLength=1, maxLength=128)
_limit = _fixed(minimum=1, maximum=check.MAX_SEARCH_LIMIT)
_offset = _fixed(minimum=0, maximum=check.MAX_OFFSET)
_status_key = _fixed(pattern=_pattern(check.STATUS_KEY_PATTERN), maxLength=64)
_ttl = _fixed(exclusiveMinimum=0, exclusiveMaximum=check.MAX_TTL_S)
_messages = _fixed(minItems=1, maxItems=check.MAX_MESSAGES)


def _owners(s: MemorySettings) -> dict[str, Any]:
    return {"minItems": 1, "items": _owner(s)}


#: The parameters of every tool, by name.
PARAMS: Mapping[str, Param] = {
    "owner": Param("The owner (a user, a team) whose memory this is. 1-128 characters: "
                   "letters, digits and . _ : @ -, starting with a letter or digit.", _owner),
    "owners": Param("Several owners to search at once, instead of owner.", _owners),
    "query": Param("What to look for, in plain words.", _text),
    "content": Param("The text to remember (UTF-8, at most max_content_bytes bytes).", _text),
    "metadata": Param("Optional JSON object kept with the memory (for example the agent "
                      "or the source); merged_from, merged_at and merge_count are reserved.",
                      _metadata),
    "context": Param("Optional: what helps find the memory later without being part of it "
                     "(the turn it answers, the conversation's date, who spoke), a line each; "
                     "searched and embedded with it, never returned as its content.", _text),
    "limit": Param("How many results at most.", _limit),
    "offset": Param("How many results to skip (for paging).", _offset),
    "source": Param("Where this comes from, for example user or agent:deploy.", _name),
    "key": Param("The status key: letters, digits and _ . -, starting with a letter or _.",
                 _status_key),
    "value": Param("The status value.", _text),
    "ttl_s": Param("Optional lifetime in seconds; the entry disappears by itself after it.",
                   _ttl),
    "pending_id": Param("The id of the pending item, as list_pending shows it.", _item_id),
    "edited_content": Param("Optional text to write instead of the item's own (the content, "
                            "the value of a status item, or the text of the memory a "
                            "consolidation proposal keeps).", _text),
    "apply_all": Param("Confirm every proposal at once in the caller's name, instead of "
                       "queuing each for a person (for an owner who asked for that)."),
    "memory_id": Param("The id of the semantic memory, as search or list_memories shows it.",
                       _item_id),
    "item_id": Param("The id of the rule, fact or memory, as read_snapshot or search shows "
                     "it (for a history, any of its versions' ids).", _item_id),
    "reason": Param("Optional: why, kept in the item's history.", _text),
    "filter": Param("Optional: only memories whose metadata has these values (equality on "
                    "each key, at most 16 keys).", _fixed(maxProperties=16)),
    "items": Param("The memories to store, oldest first: each a text, or an object with "
                   "content and optional metadata and context.", _fixed(minItems=1, maxItems=1000)),
    "rule_id": Param("The id of the rule, as read_snapshot shows it.", _item_id),
    "fact_id": Param("The id of the fact, as read_snapshot shows it.", _item_id),
    "conversation": Param("The conversation id (same alphabet as an owner id); each keeps "
                          "its own chat window.", _owner),
    "messages": Param("The new messages of the conversation, oldest first, each with a role "
                      "(user, assistant, system or tool) and its content.", _messages),
}


def document(schema: dict[str, Any], settings: MemorySettings, own: Mapping[str, Param]
             ) -> None:
    """Add descriptions and bounds to the ``properties`` of a tool's input ``schema``
    (in place); ``own`` overrides the vocabulary for one tool."""
    for name, prop in schema.get("properties", {}).items():
        param = own.get(name) or PARAMS.get(name)
        if param is None:
            continue
        prop["description"] = param.description
        bounds = param.bounds(settings)
        variants = [v for v in prop.get("anyOf", []) if v.get("type") != "null"]
        for target in variants or [prop]:  # an optional parameter: bound its non-null form
            target.update(bounds)


_ROLE = re.compile(r":[a-z]+:`~?\.{0,2}([^`]+)`")


def plain(text: str) -> str:
    """Text without reStructuredText markup: ``x`` and :class:`y` become x and y."""
    return _ROLE.sub(lambda m: m.group(1).rsplit(".", 1)[-1], text).replace("``", "")


def plain_schema(value: Any) -> Any:
    """``plain`` applied to every description of a JSON schema (in place; returned)."""
    if isinstance(value, dict):
        for k, v in value.items():
            if k == "description" and isinstance(v, str):
                value[k] = plain(v)
            else:
                plain_schema(v)
    elif isinstance(value, list):
        for v in value:
            plain_schema(v)
    return value
