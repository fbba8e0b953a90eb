"""What the subcommands of ``dream-memory`` share: options, output, the memory they
open, and short ids.

A command module (``ops``, ``memory``, ...) has a ``register(sub)`` that adds
its subcommands to ``sub`` and gives each a handler with ``set_defaults(run=...)``;
the ``dream-memory`` program (``cli``) calls each one's.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import sys
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from .. import validation as check
from ..config import MemorySettings
from ..engine import operations as ops
from ..engine.doors import LocalBackend, MemoryBackend
from ..engine.operations import Operation
from ..errors import InvalidInput, InvalidQuery
from ..process import route_options

T = TypeVar("T")
P = ParamSpec("P")
R = TypeVar("R")
if TYPE_CHECKING:
    #: The type of what ``add_subparsers()`` returns.
    Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]


def json_option() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    return p


def memory_options() -> list[argparse.ArgumentParser]:
    """The parents of a command on one owner's memory: --json, --owner, --system."""
    owner = argparse.ArgumentParser(add_help=False)
    owner.add_argument("--owner", required=True, help="the owner (user or team) id")
    return [json_option(), owner, route_options()]


def default_by() -> str:
    try:
        return getpass.getuser()[:64] or "cli"
    except Exception:  # no user name in some containers
        return "cli"


def emit(args: argparse.Namespace, data: Any, text: str) -> None:
    """``data`` as JSON with ``--json``, else ``text``."""
    if getattr(args, "json", False):
        # JSON is UTF-8 (RFC 8259): Chinese stays readable, whatever the terminal's locale.
        out = json.dumps(data, indent=2, sort_keys=True, default=str, ensure_ascii=False)
        raw = getattr(sys.stdout, "buffer", None)
        if raw is None:  # a text-only stream (a test's StringIO)
            sys.stdout.write(out + "\n")
        else:
            sys.stdout.flush()
            raw.write((out + "\n").encode("utf-8"))
            raw.flush()
    else:
        print(text)


def with_memory(args: argparse.Namespace, fn: Callable[[MemoryBackend], Awaitable[T]]) -> T:
    """Run ``fn`` on the memory: the running system ``args.system`` if one is named,
    else the configured storage opened in this process (and closed again)."""
    async def go() -> T:
        backend: MemoryBackend
        if getattr(args, "system", None):
            from ..runtime.doors import RayBackend

            backend = RayBackend.connect(args.system, args.route_ray_address)
        else:
            backend = await LocalBackend.open(MemorySettings())
        try:
            return await fn(backend)
        finally:
            await backend.close()

    return asyncio.run(go())


def owner_call(args: argparse.Namespace, op: Operation[P, R], *op_args: P.args,
               **op_kwargs: P.kwargs) -> R:
    """The described operation ``op`` for ``args.owner`` (checked) on the memory
    (``with_memory``)."""
    return with_memory(args, lambda m: m.call(op, check.owner_id(args.owner), *op_args,
                                              **op_kwargs))


def resolve(prefix: str, ids: Iterable[str] | Mapping[str, str], what: str) -> str | None:
    """The one id of ``ids`` that starts with ``prefix`` (an id itself if it is one);
    ``None`` if none does; ``InvalidQuery`` if several do or ``prefix`` is empty."""
    if not prefix:
        raise InvalidQuery(f"give the {what} id, or the start of it")
    known = list(ids)
    if prefix in known:
        return prefix
    found = sorted(i for i in known if i.startswith(prefix))
    if len(found) > 1:
        shown = ", ".join(found[:5]) + (", ..." if len(found) > 5 else "")
        raise InvalidQuery(f"{len(found)} {what}s start with {prefix!r} ({shown}): "
                           "give more of the id")
    return found[0] if found else None


#: How many memories an id prefix is looked up among (pages of 1000).
MAX_SCAN = 100_000


async def item_kinds(m: MemoryBackend, owner: str, *, memories: bool = True) -> dict[str, str]:
    """The ids of ``owner``'s current rules, facts and (with ``memories``) semantic
    memories, each with its kind: what an id prefix is resolved among."""
    snap = await m.snapshot(owner)
    kinds = {r.id: "rule" for r in snap.rules} | {f.id: "fact" for f in snap.facts}
    offset = 0
    while memories and offset < MAX_SCAN:
        page = await m.call(ops.list_memories, owner, 1000, offset)
        kinds.update({x.id: "memory" for x in page})
        if len(page) < 1000:
            break
        offset += 1000
    return kinds


def json_value(text: str | None, option: str, error: type[InvalidInput] = InvalidQuery
               ) -> Any:
    """``text`` (the value of ``option``) parsed as JSON, ``None`` when not given; a typed
    error naming the option when it is not JSON."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise error(f"{option} is not JSON: {exc}") from None


def read_text(path: str, what: str) -> str:
    """The UTF-8 text of the file ``path`` (``-``: standard input); ``InvalidQuery``
    naming ``what`` and the path when it cannot be read or is not UTF-8 text."""
    try:
        if path == "-":
            return sys.stdin.read()
        return Path(path).read_text("utf-8")
    except UnicodeDecodeError:
        raise InvalidQuery(f"the {what} {path!r} is not UTF-8 text") from None
    except OSError as exc:
        raise InvalidQuery(f"cannot read the {what} {path!r}: {exc.strerror or exc}") from None


def write_text(path: str, text: str, what: str) -> None:
    """Write ``text`` to the file ``path`` in UTF-8; ``InvalidQuery`` naming ``what``
    and the path when it cannot be written (nothing of the memory changed then)."""
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InvalidQuery(f"cannot write the {what} {path!r}: {exc.strerror or exc}") from None


async def current_id(m: MemoryBackend, owner: str, prefix: str,
                     kinds: tuple[str, ...] = ("rule", "fact", "memory")) -> str:
    """The id of ``owner``'s current item of ``kinds`` that starts with ``prefix``;
    ``prefix`` itself when it is a whole id (nothing read) or when none does (an id of
    an earlier version, or one the command then reports as not found)."""
    if _whole_id(prefix):
        return prefix
    found = {i: k for i, k in (await item_kinds(m, owner, memories="memory" in kinds)).items()
             if k in kinds}
    return resolve(prefix, found, "memory" if kinds == ("memory",) else "item") or prefix


async def version_id(m: MemoryBackend, owner: str, prefix: str) -> str:
    """The id of ``owner``'s rule or fact version that starts with ``prefix``: a current
    item's, else one of the earlier versions in the current items' chains (read only
    then, a chain per current item); ``prefix`` itself when it is a whole id or none does."""
    if _whole_id(prefix):
        return prefix
    current = {i for i, k in (await item_kinds(m, owner, memories=False)).items()
               if k in ("rule", "fact")}
    found = resolve(prefix, current, "item")
    if found is not None:
        return found
    versions: set[str] = set()
    for item_id in current:
        chain = await m.call(ops.history, owner, item_id)
        versions.update(v.id for v in chain.versions)
    return resolve(prefix, versions, "item") or prefix


def _whole_id(value: str) -> bool:
    try:
        return str(uuid.UUID(value)) == value
    except ValueError:
        return False
