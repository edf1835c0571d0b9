"""The HTTP client a judge call goes through: no redirects, a bounded reply.

A judge endpoint is trusted with the prompt, not with our memory or our prompt's
destination: a redirect must not forward the transcript, a reply must not fill the
memory of the agent's process. litellm's own clients follow redirects (a 307 would send
the whole transcript on to wherever the Location header points) and inflate a compressed
reply in full before anyone looks at its size (a 200 kB gzip bomb became ~1 GB). litellm
takes a client per call (``client=`` of ``acompletion``), of one of two kinds: an
``AsyncOpenAI`` for the calls it makes through the OpenAI SDK (OpenAI and endpoints named
"openai/..."), litellm's own ``AsyncHTTPHandler`` for the providers it calls over httpx
itself (Anthropic, Gemini, Vertex, Bedrock, Ollama, ...). `judge_client` builds the right
kind around one httpx client that:

- never follows a redirect: a 3xx is an HTTP error of the judge call, and the prompt is
  sent to the configured endpoint only;
- decodes gzip and deflate itself, a chunk at a time, and stops with `ReplyTooLarge` once
  the decoded body passes MAX_REPLY_BYTES (a plain body the same);
- is made for one call and closed after it, so it never outlives the event loop it
  was made on (a tracker may be driven by a new loop each turn).

Nothing global of litellm is touched (``litellm.aclient_session`` and the module-level
clients stay as the application set them): the guard is this call's client only. Not
covered: the providers litellm calls through an SDK other than ``AsyncOpenAI`` with our
client (Azure's ``AsyncAzureOpenAI``, the other OpenAI-compatible providers: ``SDK_PROVIDERS``):
their calls keep litellm's defaults.

httpx is imported here only when a judge call is made (litellm brings it along).
"""

from __future__ import annotations

import ssl
import threading
import zlib
from collections.abc import AsyncIterator
from typing import Any, cast

import anyio

# Decoded bytes a judge reply may have: a reply is at most JUDGE_MAX_TOKENS (600) tokens,
# ~2.4 kB of text in a JSON envelope of ~1 kB; providers' error pages run to tens of kB.
# 1 MiB is hundreds of times any real reply and bounds what a hostile one can cost.
MAX_REPLY_BYTES = 1024 * 1024
# Decoded bytes produced per step when inflating: the most a step holds beyond what the
# body already has.
_INFLATE_STEP = 64 * 1024
# Encodings the client offers and decodes itself (zlib covers both): a server that sends
# another one (br, zstd) anyway is refused rather than decoded without a bound.
ACCEPT_ENCODING = "gzip, deflate"
# zlib window bits: 32 + 15 reads a gzip or a zlib header, whichever is there; -15 is a raw
# deflate stream (some servers send "deflate" without the zlib wrapper).
_AUTO_HEADER_WBITS = 32 + zlib.MAX_WBITS
_RAW_DEFLATE_WBITS = -zlib.MAX_WBITS

# Providers whose calls litellm makes through the OpenAI SDK, which takes an ``AsyncOpenAI``
# client per call: OpenAI itself and every OpenAI-compatible endpoint named "openai/..."
# with an api_base (llama.cpp, vLLM, a gateway). Other providers keep litellm's defaults.
OPENAI_SDK_PROVIDERS = frozenset({"openai"})
# Providers litellm calls through an SDK client of its own kind (an ``AsyncOpenAI`` made
# for their endpoint, ``AsyncAzureOpenAI``): handed litellm's ``AsyncHTTPHandler`` they
# would fail, so they keep litellm's defaults. Every other provider goes over
# ``AsyncHTTPHandler`` (litellm.llms.custom_httpx), which takes ours.
# (litellm 1.110's main.py, ``completion``: the dispatchers that take
# ``_dispatch_client_openai`` or ``_dispatch_client_azure``, and its OpenAI-compatible branch,
# ``_complete_custom_openai``. tests/llm/test_judge_http_providers.py reads that chain from the
# installed litellm and fails when a release moves a provider.)
SDK_PROVIDERS = frozenset(
    {
        "azure",
        "azure_text",
        "text-completion-openai",
        "text-completion-inception",
        "custom_openai",
        "deepinfra",
        "perplexity",
        "nvidia_nim",
        "cerebras",
        "baseten",
        "sambanova",
        "volcengine",
        "anyscale",
        "nebius",
        "wandb",
        "clarifai",
        "bigmodel",  # joined the OpenAI-compatible branch after 1.106
    }
)


class ReplyTooLarge(Exception):
    """The judge's reply passed MAX_REPLY_BYTES decoded, or came in an encoding we do not
    decode with a bound. Raised while the body is read, inside litellm's call; the caller
    finds it in the chain of litellm's exception (`reply_too_large`)."""


class RedirectRefused(Exception):
    """The judge endpoint answered with a redirect, which is never followed. Raised as
    soon as its headers are in, inside litellm's call, whichever client litellm used (an
    SDK would otherwise report it as a connection error and retry it)."""

    def __init__(self, status: int) -> None:
        super().__init__(
            f"HTTP {status}: the judge endpoint redirected; redirects are not followed"
        )
        self.status = status


def _in_chain(exc: BaseException, kind: type[Exception]) -> Any:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def reply_too_large(exc: BaseException) -> ReplyTooLarge | None:
    """The `ReplyTooLarge` behind a litellm/openai exception, if one is in its chain."""
    found: ReplyTooLarge | None = _in_chain(exc, ReplyTooLarge)
    return found


def redirect_refused(exc: BaseException) -> RedirectRefused | None:
    """The `RedirectRefused` behind a litellm/openai exception, if one is in its chain."""
    found: RedirectRefused | None = _in_chain(exc, RedirectRefused)
    return found


class _Inflater:
    """Decodes one body a chunk at a time, never holding more than the cap."""

    def __init__(self, encoding: str, limit: int) -> None:
        self._limit = limit
        self._total = 0
        self._encoding = encoding
        self._zlib: Any = None
        self._raw = False
        if encoding in ("gzip", "x-gzip", "deflate"):
            self._zlib = zlib.decompressobj(_AUTO_HEADER_WBITS)
        elif encoding not in ("", "identity"):
            raise ReplyTooLarge(f"the judge replied in encoding {encoding!r}, not one we offered")

    def _count(self, data: bytes) -> bytes:
        self._total += len(data)
        if self._total > self._limit:
            raise ReplyTooLarge(
                f"the judge's reply passed {self._limit} bytes decoded "
                f"(sent as {self._encoding or 'identity'})"
            )
        return data

    def feed(self, chunk: bytes) -> list[bytes]:
        if self._zlib is None:
            return [self._count(chunk)]
        out: list[bytes] = []
        data = chunk
        while data:
            try:
                piece = self._zlib.decompress(data, _INFLATE_STEP)
            except zlib.error as exc:
                if self._encoding == "deflate" and not self._raw and self._total == 0:
                    # a raw deflate stream: start again without the zlib header
                    self._zlib, self._raw = zlib.decompressobj(_RAW_DEFLATE_WBITS), True
                    continue
                raise ReplyTooLarge(
                    f"the judge's {self._encoding} reply is corrupt: {exc}"
                ) from exc
            out.append(self._count(piece))
            data = self._zlib.unconsumed_tail
        return out

    def flush(self) -> list[bytes]:
        if self._zlib is None:
            return []
        return [self._count(self._zlib.flush())]


async def _bound_reply(response: Any) -> None:
    """httpx response hook: swap the body for one decoded here, within MAX_REPLY_BYTES.

    Runs once the headers are in and before the body is read; the encoding header is
    dropped so httpx does not decode the body a second time, without a bound.
    """
    import httpx

    length = response.headers.get("content-length", "")
    if length.isdigit() and int(length) > MAX_REPLY_BYTES:
        await response.aclose()
        raise ReplyTooLarge(f"the judge's reply announces {length} bytes")
    encoding = response.headers.get("content-encoding", "").strip().lower()
    inflater = _Inflater(encoding, MAX_REPLY_BYTES)
    for name in ("content-encoding", "content-length"):
        if name in response.headers:
            del response.headers[name]

    class _Stream(httpx.AsyncByteStream):
        def __init__(self, raw: Any) -> None:
            self._raw = raw

        async def __aiter__(self) -> AsyncIterator[bytes]:
            async for chunk in self._raw:
                for piece in inflater.feed(chunk):
                    if piece:
                        yield piece
            for piece in inflater.flush():
                if piece:
                    yield piece

        async def aclose(self) -> None:
            await self._raw.aclose()

    response.stream = _Stream(response.stream)


async def _no_redirect(response: Any) -> None:
    """httpx response hook: a 3xx is never followed (see the module docstring)."""
    if response.is_redirect:
        response.next_request = None  # nothing for a caller's own redirect logic to follow
        await response.aclose()
        raise RedirectRefused(response.status_code)


_ssl: ssl.SSLContext | None = None
_ssl_lock = threading.Lock()


def _ssl_context() -> ssl.SSLContext:
    """One TLS context for every judge client: building one reads the CA bundle (~0.5 s
    on a busy machine), too slow to pay per call. httpx's own defaults (certifi, or
    SSL_CERT_FILE / SSL_CERT_DIR when set)."""
    global _ssl
    with _ssl_lock:
        if _ssl is None:
            import httpx

            _ssl = httpx.create_ssl_context()
    return _ssl


def _httpx_options(timeout: float) -> dict[str, Any]:
    return {
        "verify": _ssl_context(),
        "timeout": timeout,
        "follow_redirects": False,
        "headers": {"accept-encoding": ACCEPT_ENCODING},
        "event_hooks": {"response": [_no_redirect, _bound_reply]},
    }


class JudgeHTTP:
    """The per-call client (``client=`` of ``litellm.acompletion``) and how to close it."""

    def __init__(self, client: Any, closer: Any) -> None:
        self.client = client
        self._closer = closer

    async def aclose(self) -> None:
        await self._closer()


def _sdk_provider(provider: str | None) -> bool:
    if provider in SDK_PROVIDERS:
        return True
    import litellm

    compatible: list[str] = getattr(litellm, "openai_compatible_providers", [])
    if provider in compatible:
        return True
    try:  # providers configured by litellm's JSON files, also called through the SDK
        from litellm.llms.openai_like.json_loader import JSONProviderRegistry
    except ImportError:
        return False
    return provider is not None and bool(JSONProviderRegistry.exists(provider))


def _handler_client(timeout: float) -> JudgeHTTP:
    """litellm's ``AsyncHTTPHandler`` around our client. Its own retry after a dropped
    connection builds a client from the same hooks, without redirects, so that one is
    bounded too."""
    import httpx
    from litellm.llms.custom_httpx.http_handler import AsyncHTTPHandler

    options = _httpx_options(timeout)
    handler = AsyncHTTPHandler(
        timeout=timeout,
        event_hooks=options["event_hooks"],
        # a transport of ours: litellm's would read its CA bundle again on every call
        transport=httpx.AsyncHTTPTransport(verify=options["verify"]),
        follow_redirects=False,
    )
    spare = handler.client  # made by the constructor, replaced by ours
    http = httpx.AsyncClient(**options)
    handler.client = http

    async def close() -> None:
        await http.aclose()
        await spare.aclose()

    return JudgeHTTP(handler, close)


def judge_client(
    provider: str | None, *, api_base: str | None, api_key: str | None, timeout: float
) -> JudgeHTTP | None:
    """A guarded client for one judge call to ``provider``; None for a provider whose
    calls litellm makes through another SDK (`SDK_PROVIDERS`: litellm's defaults)."""
    import httpx

    if provider not in OPENAI_SDK_PROVIDERS:
        return None if _sdk_provider(provider) else _handler_client(timeout)
    import openai

    http = httpx.AsyncClient(**_httpx_options(timeout))
    try:
        sdk = openai.AsyncOpenAI(
            api_key=api_key,
            base_url=api_base,
            # httpx, as litellm's own OpenAI clients are: openai 3 is typed for httpx2 but
            # takes an httpx client as well (openai._httpx2); openai 2 takes only httpx.
            http_client=cast(Any, http),
            timeout=timeout,
            max_retries=0,  # ours (tenacity) only
        )
    except openai.OpenAIError:
        # no key anywhere: let litellm make (and report) the call as it would have
        return None
    return JudgeHTTP(sdk, http.aclose)


async def guarded_client(
    litellm: Any, model: str, *, api_base: str | None, api_key: str | None, timeout: float
) -> JudgeHTTP | None:
    """`judge_client` for ``model`` as litellm routes it (None when litellm cannot say).

    The TLS context is built in a worker thread the first time, off the event loop."""
    try:
        _, provider, _, _ = litellm.get_llm_provider(model=model, api_base=api_base)
    except Exception:  # litellm raises its own BadRequestError (and others) for unknown models
        return None
    if provider is None or (provider not in OPENAI_SDK_PROVIDERS and _sdk_provider(provider)):
        return None
    if _ssl is None:
        await anyio.to_thread.run_sync(_ssl_context)
    return judge_client(provider, api_base=api_base, api_key=api_key, timeout=timeout)


async def server_props(api_base: str, *, api_key: str | None, timeout: float) -> Any:
    """llama.cpp's server's GET /props (beside /v1) as JSON, or None on any failure.

    The same guards as a judge call: no redirect followed, the reply bounded.
    """
    import httpx

    root = api_base.rstrip("/")
    root = root.removesuffix("/v1")
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    if _ssl is None:
        await anyio.to_thread.run_sync(_ssl_context)
    try:
        async with httpx.AsyncClient(**_httpx_options(timeout)) as http:
            response = await http.get(f"{root}/props", headers=headers)
            if response.status_code != 200:
                return None
            return response.json()
    except Exception:  # a server without /props, or none at all: nothing learned
        return None
