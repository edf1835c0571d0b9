"""``loop-judge serve``: run the HTTP sidecar (judge.service) with uvicorn.

The server stack (fastapi, uvicorn, redis: the ``serve`` extra) is imported inside `run`
only, so every other command works without it, and a missing extra is a usage error
naming the package, not a traceback.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from rich.console import Console

from judge.cli.shared import UsageError

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    srv = sub.add_parser(
        "serve",
        help="run the HTTP sidecar (needs the serve extra: pip install 'loop-judge[serve]')",
        description="Serve one tracker per session over HTTP. Settings come from LOOP_JUDGE_* "
        "variables (tracker and server); these flags override them. A bearer token "
        "(LOOP_JUDGE_SERVER_TOKEN, or LOOP_JUDGE_SERVER_TOKENS / _FILE for several "
        "principals) is required unless --insecure-no-token is given on a loopback bind.",
    )
    srv.add_argument("--host", help="address to bind (default: LOOP_JUDGE_HOST or 127.0.0.1)")
    srv.add_argument("--port", type=int, help="port (default: LOOP_JUDGE_PORT or 8787)")
    srv.add_argument("--redis-url", help="keep sessions in Redis (default: LOOP_JUDGE_REDIS_URL)")
    srv.add_argument(
        "--tokens-file",
        type=Path,
        help="principals and their tokens, 'name=token' per line "
        "(default: LOOP_JUDGE_SERVER_TOKENS_FILE)",
    )
    srv.add_argument(
        "--insecure-no-token",
        action="store_true",
        default=None,
        help="serve without any token: every local process (and any web page whose domain "
        "you add to the allowed hosts) can read and reset every session. Loopback only",
    )
    srv.add_argument(
        "--dump-openapi",
        nargs="?",
        const="",
        metavar="FILE",
        help="write the OpenAPI schema (default: the committed judge/service/openapi.json; "
        "'-' for stdout) and exit",
    )
    srv.set_defaults(func=run)


def http_protocol(request_timeout_s: float) -> type[Any]:
    """The HTTP/1.1 protocol class with the per-request read deadline: httptools (C) where
    it is installed, else h11 (uvicorn's pure-Python parser, more CPU a request).

    Both are guarded alike (`judge.service.protocol`, `judge.service.protocol_httptools`):
    a deadline on each request and a 16 KiB cap on its head.
    """
    try:
        from judge.service.protocol_httptools import guarded_httptools_protocol
    except ImportError:  # httptools has no wheel here: the serve extra leaves it out
        from judge.service.protocol import guarded_protocol

        return guarded_protocol(request_timeout_s)
    return guarded_httptools_protocol(request_timeout_s)


def uvicorn_config(app: Any, settings: Any) -> Any:
    """uvicorn's settings for the sidecar: the guarded protocol and connection limits.

    The protocol is never uvicorn's own choice ("auto"), so the per-request read deadline
    holds whatever is installed (`http_protocol`). The event loop is: uvloop where it is
    installed (the serve extra has it except on Windows), else asyncio's.
    """
    import uvicorn

    return uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        http=http_protocol(settings.request_timeout_s),
        timeout_keep_alive=max(1, round(settings.keep_alive_s)),
        limit_concurrency=settings.max_connections,
        log_level="info",
        server_header=False,
        access_log=settings.access_log,
    )


def run(args: argparse.Namespace, console: Console) -> int:
    """Run the sidecar with uvicorn; the server stack is imported only here."""
    try:
        import uvicorn

        from judge.service import tune_collector
        from judge.service.app import OPENAPI_FILE, create_app, openapi_text
        from judge.service.settings import ServerSettings
    except ImportError as exc:
        raise UsageError(
            f"the server needs the serve extra ({exc.name} is missing): "
            "pip install 'loop-judge[serve]'"
        ) from exc
    if args.dump_openapi is not None:
        text = openapi_text()
        if args.dump_openapi == "-":
            sys.stdout.write(text)
        else:
            target = Path(args.dump_openapi or OPENAPI_FILE)
            target.write_text(text, encoding="utf-8")
            console.print(f"wrote {target}", highlight=False)
        return 0
    flags = (
        ("host", args.host),
        ("port", args.port),
        ("redis_url", args.redis_url),
        ("server_tokens_file", args.tokens_file),
        ("insecure_no_token", args.insecure_no_token),
    )
    overrides = {key: value for key, value in flags if value is not None}
    try:
        settings = ServerSettings(**overrides)
    except ValidationError as exc:
        problems = "; ".join(str(e["msg"]) for e in exc.errors())
        raise UsageError(f"invalid server settings: {problems}") from exc
    settings.check_bind()  # ConfigError: exit 2 with the message, before binding anything
    app = create_app(settings)
    principals = settings.principals()
    who = (
        f"{len(principals)} principal(s)"
        if principals
        else "NO TOKEN (--insecure-no-token): any local process can use every session"
    )
    console.print(
        f"loop-judge sidecar on http://{settings.host}:{settings.port} "
        f"(sessions: {'redis' if settings.redis_url else 'memory'}; auth: {who})",
        highlight=False,
    )
    server = uvicorn.Server(uvicorn_config(app, settings))
    tune_collector()  # after the app and its imports exist: they are frozen with it
    server.run()
    return 0
