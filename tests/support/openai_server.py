"""A scripted, OpenAI-compatible HTTP server for tests (not a model: it answers what it is told).

It listens on 127.0.0.1 on a free port, in a background thread, and serves
``POST /v1/embeddings`` and ``POST /v1/chat/completions``. A test queues the
replies it wants, per endpoint, in order; each request takes the next one::

    with ScriptedOpenAIServer(embedding_dim=8) as server:
        server.queue_embeddings(status=500, times=3)       # three failures
        server.queue_chat('{"facts": []}')                  # one chat completion
        ...  # point the client at server.base_url with any api key
        assert server.requests[0].json["model"] == "text-embedding-3-small"

Queued replies can be: a good reply, a body that is not JSON (``raw_body``), any
JSON body (``json_body``, e.g. one missing required fields), an HTTP error
status (``status``; with ``retry_after`` for 429), and a ``delay_s`` before the
reply is sent (a slow server). Every request received is recorded (method, path,
headers, body, parsed JSON) in :attr:`ScriptedOpenAIServer.requests`.

When nothing is queued:

* ``/v1/embeddings`` answers deterministically: each input text gets a unit
  vector derived from the SHA-256 of the text (dimension ``embedding_dim``, or
  the request's ``dimensions``), so the same text always gets the same vector.
* ``/v1/chat/completions`` answers HTTP 400 (with ``x-should-retry: false``) and
  a message saying that the test queued no chat reply.

Every other path answers 404. Replies follow OpenAI's shapes (``object: list``
of ``embedding`` items; ``chat.completion`` with ``choices``, ``usage``;
errors as ``{"error": {"message", "type", "param", "code"}}``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import random
import struct
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

EMBEDDINGS_PATH = "/v1/embeddings"
CHAT_PATH = "/v1/chat/completions"

_UNSET: Any = object()

_ERROR_TYPES = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", None),
    404: ("invalid_request_error", None),
    408: ("timeout", None),
    429: ("requests", "rate_limit_exceeded"),
}


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server received."""

    method: str
    path: str
    #: Header names are lower-cased.
    headers: Mapping[str, str]
    body: bytes
    #: The body parsed as JSON, or ``None`` when it is not JSON.
    json: Any


@dataclass
class Reply:
    """What the server sends back: status, headers, body, after ``delay_s`` seconds."""

    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


#: Turns the parsed request body into the reply.
Responder = Callable[[Any], Reply]


def error_body(status: int, message: str) -> dict[str, Any]:
    """An OpenAI-style error object for ``status``."""
    kind, code = _ERROR_TYPES.get(status, ("server_error" if status >= 500 else "api_error", None))
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def hashed_vector(text: str, dim: int) -> list[float]:
    """A deterministic unit vector for ``text``: seeded by the SHA-256 of the text."""
    seed = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")
    rng = random.Random(seed)
    values = [rng.gauss(0.0, 1.0) for _ in range(dim)]
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return [v / norm for v in values]


def _token_count(value: Any) -> int:
    """A rough token count (words) of a prompt, a message list or an input list."""
    if isinstance(value, str):
        return max(1, len(value.split()))
    if isinstance(value, Mapping):
        return sum(_token_count(v) for v in value.values())
    if isinstance(value, Sequence):
        return sum(_token_count(v) for v in value)
    return 1


def _json_bytes(value: Any) -> bytes:
    return json.dumps(value).encode("utf-8")


def _inputs(request: Any) -> list[str]:
    """The texts of an embeddings request (tokens arrays are hashed by their repr)."""
    raw = request.get("input") if isinstance(request, Mapping) else None
    if isinstance(raw, str):
        return [raw]
    if isinstance(raw, list):
        if raw and all(isinstance(x, int) for x in raw):
            return [repr(raw)]  # one text given as token ids
        return [x if isinstance(x, str) else repr(x) for x in raw]
    return []


def _encode_vector(vector: Sequence[float], encoding_format: Any) -> Any:
    if encoding_format == "base64":
        packed = struct.pack(f"<{len(vector)}f", *vector)
        return base64.b64encode(packed).decode("ascii")
    return list(vector)  # as given: a test may send values that are not numbers


def embeddings_reply(
    request: Any,
    vectors: Sequence[Sequence[float]] | None,
    dim: int,
) -> Reply:
    """A good ``/v1/embeddings`` reply: ``vectors``, or hashed vectors of the inputs."""
    texts = _inputs(request)
    if vectors is None:
        wanted = request.get("dimensions") if isinstance(request, Mapping) else None
        size = wanted if isinstance(wanted, int) and wanted > 0 else dim
        vectors = [hashed_vector(t, size) for t in texts]
    fmt = request.get("encoding_format") if isinstance(request, Mapping) else None
    model = request.get("model", "unknown") if isinstance(request, Mapping) else "unknown"
    tokens = _token_count(texts)
    body = {
        "object": "list",
        "data": [
            {"object": "embedding", "index": i, "embedding": _encode_vector(v, fmt)}
            for i, v in enumerate(vectors)
        ],
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
    return Reply(200, _json_bytes(body), {"content-type": "application/json"})


def chat_completion(
    request: Any,
    content: str | None,
    *,
    model: str | None = None,
    finish_reason: str | None = None,
    tool_calls: Sequence[Mapping[str, Any]] | None = None,
    usage: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """A ``chat.completion`` object, as OpenAI returns it for a non-streaming request.

    ``tool_calls`` items are ``{"name": ..., "arguments": str or JSON-able}``; with
    them, ``content`` may be ``None`` and ``finish_reason`` defaults to ``"tool_calls"``.
    """
    req_model = request.get("model") if isinstance(request, Mapping) else None
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
    if tool_calls:
        message["tool_calls"] = [
            {
                "id": f"call_{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": {
                    "name": str(call["name"]),
                    "arguments": (call["arguments"] if isinstance(call.get("arguments"), str)
                                  else json.dumps(call.get("arguments", {}))),
                },
            }
            for call in tool_calls
        ]
    if usage is None:
        prompt = _token_count(request.get("messages", []) if isinstance(request, Mapping) else [])
        completion = _token_count(content or "") if content else 1
        usage = {"prompt_tokens": prompt, "completion_tokens": completion,
                 "total_tokens": prompt + completion}
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model or req_model or "unknown",
        "system_fingerprint": None,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish_reason or ("tool_calls" if tool_calls else "stop"),
            }
        ],
        "usage": dict(usage),
    }


def _scripted(
    good: Responder,
    *,
    status: int,
    json_body: Any,
    raw_body: bytes | None,
    delay_s: float,
    headers: Mapping[str, str] | None,
    retry_after: float | str | None,
) -> Responder:
    """A responder for one queued reply: the explicit body or status wins over ``good``."""
    extra = {k.lower(): v for k, v in (headers or {}).items()}
    if retry_after is not None:
        extra["retry-after"] = str(retry_after)

    def respond(request: Any) -> Reply:
        if raw_body is not None:
            reply = Reply(status, raw_body, {"content-type": "application/json"})
        elif json_body is not _UNSET:
            reply = Reply(status, _json_bytes(json_body), {"content-type": "application/json"})
        elif status != 200:
            message = f"scripted HTTP {status} from ScriptedOpenAIServer"
            reply = Reply(status, _json_bytes(error_body(status, message)),
                          {"content-type": "application/json"})
        else:
            reply = good(request)
        reply.headers.update(extra)
        reply.delay_s = delay_s
        return reply

    return respond


class ScriptedOpenAIServer:
    """A local OpenAI-compatible server whose replies the test scripts (see the module doc)."""

    def __init__(self, *, embedding_dim: int = 8, host: str = "127.0.0.1", port: int = 0) -> None:
        self.embedding_dim = embedding_dim
        self._host = host
        self._port = port
        self._lock = threading.Lock()
        self._queues: dict[str, deque[Responder]] = {EMBEDDINGS_PATH: deque(), CHAT_PATH: deque()}
        self._requests: list[RecordedRequest] = []
        #: Exceptions raised by queued responders (each answered with HTTP 500).
        self.errors: list[BaseException] = []
        #: The most requests that were in a scripted delay at one time (calls overlapping).
        self.most_delayed_at_once = 0
        self._delayed = 0
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------

    def start(self) -> ScriptedOpenAIServer:
        if self._httpd is not None:
            raise RuntimeError("ScriptedOpenAIServer is already started")
        self._stopping.clear()
        httpd = ThreadingHTTPServer((self._host, self._port), _handler_for(self))
        httpd.daemon_threads = True
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
            name="scripted-openai-server", daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; requests still sleeping in a scripted delay are cut short."""
        self._stopping.set()
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> ScriptedOpenAIServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("ScriptedOpenAIServer is not started")
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/v1``: what an OpenAI client takes as its base URL."""
        return f"http://{self._host}:{self.port}/v1"

    # -- scripting -------------------------------------------------------

    def queue_embeddings(
        self,
        vectors: Sequence[Sequence[float]] | None = None,
        *,
        dim: int | None = None,
        status: int = 200,
        json_body: Any = _UNSET,
        raw_body: bytes | None = None,
        delay_s: float = 0.0,
        headers: Mapping[str, str] | None = None,
        retry_after: float | str | None = None,
        times: int = 1,
    ) -> None:
        """Queue the next ``times`` replies of ``/v1/embeddings``.

        The body is, first match wins: ``raw_body`` (bytes as is, e.g. broken JSON),
        ``json_body`` (any JSON, e.g. without ``data``), an OpenAI error object when
        ``status`` is not 200, ``vectors`` (exactly these, whatever the input), or
        hashed vectors of the inputs with ``dim`` dimensions (default: the server's).
        """
        size = dim if dim is not None else self.embedding_dim

        def good(request: Any) -> Reply:
            return embeddings_reply(request, vectors, size)

        self._queue(EMBEDDINGS_PATH, _scripted(
            good, status=status, json_body=json_body, raw_body=raw_body, delay_s=delay_s,
            headers=headers, retry_after=retry_after), times)

    def queue_chat(
        self,
        content: str | Callable[[Any], str] | None = None,
        *,
        model: str | None = None,
        finish_reason: str | None = None,
        tool_calls: Sequence[Mapping[str, Any]] | None = None,
        usage: Mapping[str, int] | None = None,
        status: int = 200,
        json_body: Any = _UNSET,
        raw_body: bytes | None = None,
        delay_s: float = 0.0,
        headers: Mapping[str, str] | None = None,
        retry_after: float | str | None = None,
        times: int = 1,
    ) -> None:
        """Queue the next ``times`` replies of ``/v1/chat/completions``.

        A good reply is a ``chat.completion`` whose ``choices[0].message.content``
        is ``content`` (or ``content(request_json)`` when it is callable). The
        other options work as in :meth:`queue_embeddings`.
        """
        if (content is None and not tool_calls and status == 200 and raw_body is None
                and json_body is _UNSET):
            raise ValueError("queue_chat needs content, tool_calls, a status or a body")

        def good(request: Any) -> Reply:
            if isinstance(request, Mapping) and request.get("stream"):
                return Reply(400, _json_bytes(error_body(
                    400, "ScriptedOpenAIServer does not script streaming replies; "
                         "call without stream=True")),
                    {"content-type": "application/json", "x-should-retry": "false"})
            text = content(request) if callable(content) else content
            body = chat_completion(request, text, model=model, finish_reason=finish_reason,
                                   tool_calls=tool_calls, usage=usage)
            return Reply(200, _json_bytes(body), {"content-type": "application/json"})

        self._queue(CHAT_PATH, _scripted(
            good, status=status, json_body=json_body, raw_body=raw_body, delay_s=delay_s,
            headers=headers, retry_after=retry_after), times)

    def queue(self, path: str, responder: Responder, times: int = 1) -> None:
        """Queue a custom responder (parsed request JSON -> :class:`Reply`) for ``path``."""
        self._queue(path, responder, times)

    def _queue(self, path: str, responder: Responder, times: int) -> None:
        if times < 1:
            raise ValueError("times must be at least 1")
        with self._lock:
            self._queues.setdefault(path, deque()).extend([responder] * times)

    def pending(self, path: str | None = None) -> int:
        """How many queued replies are still unused (for ``path``, or in all)."""
        with self._lock:
            if path is not None:
                return len(self._queues.get(path, ()))
            return sum(len(q) for q in self._queues.values())

    def clear(self) -> None:
        """Forget queued replies and recorded requests."""
        with self._lock:
            for q in self._queues.values():
                q.clear()
            self._requests.clear()
            self.errors.clear()

    @property
    def requests(self) -> list[RecordedRequest]:
        """A copy of the requests received so far, oldest first."""
        with self._lock:
            return list(self._requests)

    def requests_to(self, path: str) -> list[RecordedRequest]:
        """The requests received for ``path`` (e.g. ``"/v1/embeddings"``)."""
        return [r for r in self.requests if r.path == path]

    # -- serving (called from handler threads) ---------------------------

    def _reply_for(self, method: str, path: str, headers: Mapping[str, str], body: bytes
                   ) -> Reply:
        try:
            parsed: Any = json.loads(body) if body else None
        except ValueError:
            parsed = None
        with self._lock:
            self._requests.append(RecordedRequest(method, path, dict(headers), body, parsed))
            queue = self._queues.get(path)
            responder = queue.popleft() if queue else None
        if responder is not None:
            try:
                return responder(parsed)
            except Exception as exc:  # a broken script: say so instead of dropping the connection
                with self._lock:
                    self.errors.append(exc)
                return Reply(500, _json_bytes(error_body(
                    500, f"ScriptedOpenAIServer: the queued reply failed: {exc!r}")),
                    {"content-type": "application/json", "x-should-retry": "false"})
        if method != "POST" or path not in (EMBEDDINGS_PATH, CHAT_PATH):
            return Reply(404, _json_bytes(error_body(
                404, f"ScriptedOpenAIServer serves POST {EMBEDDINGS_PATH} and POST {CHAT_PATH}; "
                     f"got {method} {path}")),
                {"content-type": "application/json", "x-should-retry": "false"})
        if parsed is None or not isinstance(parsed, Mapping):
            return Reply(400, _json_bytes(error_body(400, "request body is not a JSON object")),
                         {"content-type": "application/json", "x-should-retry": "false"})
        if path == EMBEDDINGS_PATH:
            return embeddings_reply(parsed, None, self.embedding_dim)
        return Reply(400, _json_bytes(error_body(
            400, "ScriptedOpenAIServer: no chat reply queued for this request; the test must "
                 "call queue_chat(...) before the client calls /v1/chat/completions")),
            {"content-type": "application/json", "x-should-retry": "false"})

    def _wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; False when the server is stopping."""
        with self._lock:
            self._delayed += 1
            self.most_delayed_at_once = max(self.most_delayed_at_once, self._delayed)
        try:
            return not self._stopping.wait(seconds)
        finally:
            with self._lock:
                self._delayed -= 1


def _handler_for(server: ScriptedOpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        # HTTP/1.0: one request per connection, so no idle keep-alive threads linger.
        protocol_version = "HTTP/1.0"
        server_version = "ScriptedOpenAIServer/1"

        def _handle(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length > 0 else b""
            headers = {k.lower(): v for k, v in self.headers.items()}
            path = self.path.split("?", 1)[0]
            reply = server._reply_for(self.command, path, headers, body)
            if reply.delay_s > 0 and not server._wait(reply.delay_s):
                return  # stopping: drop the connection
            try:
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.send_header("content-length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (e.g. its timeout fired during a delay)

        do_POST = _handle
        do_GET = _handle
        do_PUT = _handle
        do_DELETE = _handle

        def log_message(self, format: str, *args: Any) -> None:
            pass  # quiet; the test reads server.requests instead

    return Handler
