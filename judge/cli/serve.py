"""``loop-judge serve``: run the HTTP sidecar (judge.service) with uvicorn.

The server stack (fastapi, uvicorn, redis: the ``serve`` extra) is imported inside `run`
only, so every other command works without it, and a missing extra is a usage error
naming the package, not a traceback.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pydantic import ValidationError
from rich.console import Console

from judge.cli.shared import UsageError

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    srv = sub.add_parser(
        "serve",
        help="run the HTTP sidecar (needs the serve extra: pip install 'loop-judge[serve]')",
        description="Serve one tracker per session over HTTP. Settings come from LOOP_JUDGE_* "
        "variables (tracker and server); these flags override them.",
    )
    srv.add_argument("--host", help="address to bind (default: LOOP_JUDGE_HOST or 127.0.0.1)")
    srv.add_argument("--port", type=int, help="port (default: LOOP_JUDGE_PORT or 8787)")
    srv.add_argument("--redis-url", help="keep sessions in Redis (default: LOOP_JUDGE_REDIS_URL)")
    srv.add_argument(
        "--dump-openapi",
        nargs="?",
        const="",
        metavar="FILE",
        help="write the OpenAPI schema (default: the committed judge/service/openapi.json; "
        "'-' for stdout) and exit",
    )
    srv.set_defaults(func=run)


def run(args: argparse.Namespace, console: Console) -> int:
    """Run the sidecar with uvicorn; the server stack is imported only here."""
    try:
        import uvicorn

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
    overrides = {
        key: value
        for key, value in (("host", args.host), ("port", args.port), ("redis_url", args.redis_url))
        if value is not None
    }
    try:
        settings = ServerSettings(**overrides)
    except ValidationError as exc:
        problems = "; ".join(str(e["msg"]) for e in exc.errors())
        raise UsageError(f"invalid server settings: {problems}") from exc
    settings.check_bind()  # ConfigError: exit 2 with the message, before binding anything
    app = create_app(settings)
    console.print(
        f"loop-judge sidecar on http://{settings.host}:{settings.port} "
        f"(sessions: {'redis' if settings.redis_url else 'memory'})",
        highlight=False,
    )
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="info")
    return 0
