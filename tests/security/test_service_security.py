"""Session isolation in the sidecar: tokens and principals, the Host check, session ids.

Each principal's sessions are its own: another principal (another bearer token) cannot
read, continue, reset or delete them, and learns nothing about whether they exist.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed")

from judge import LoopTracker, TrackerConfig, Verdict
from judge.errors import ConfigError
from judge.service.app import create_app, host_name
from judge.service.settings import ServerSettings
from judge.service.store import MemoryStore
from tests.serving import failing_repeat_history, prefixes

pytestmark = pytest.mark.anyio
ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef00"


def client(app: Any, token: str | None, host: str = "localhost") -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url=f"http://{host}", headers=headers
    )


def two_principals(**kwargs: Any) -> Any:
    settings = ServerSettings(server_tokens=f"alice={ALICE},bob={BOB}", **kwargs)
    return create_app(settings, MemoryStore(TrackerConfig()))


def test_a_token_is_required_unless_the_operator_opts_out() -> None:
    with pytest.raises(ConfigError, match=r"LOOP_JUDGE_SERVER_TOKEN.*--insecure-no-token"):
        create_app(ServerSettings(), MemoryStore())
    create_app(ServerSettings(insecure_no_token=True), MemoryStore())
    with pytest.raises(ConfigError, match="loopback binds only"):
        create_app(ServerSettings(host="0.0.0.0", insecure_no_token=True), MemoryStore())
    with pytest.raises(ConfigError, match="remove one or the other"):
        ServerSettings(server_token=ALICE, insecure_no_token=True).check_bind()


def test_principals_from_the_environment_and_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"# ops team\ncarol={ALICE}x\n\ndave {BOB}x\n", "utf-8")
    monkeypatch.setenv("LOOP_JUDGE_SERVER_TOKENS", f"alice={ALICE}, bob={BOB}")
    monkeypatch.setenv("LOOP_JUDGE_SERVER_TOKENS_FILE", str(tokens))
    assert ServerSettings().principals() == {
        ALICE: "alice",
        BOB: "bob",
        ALICE + "x": "carol",
        BOB + "x": "dave",
    }


@pytest.mark.parametrize(
    ("tokens", "error"),
    [
        ("alice=short", "shorter than 16 characters"),
        (f"alice={ALICE},bob={ALICE}", "share a token"),
        (f"alice={ALICE},alice={BOB}", "configured twice"),
        (f"al/ice={ALICE}", "must be 1-64 of"),
        ("alice=", "has no token"),
    ],
)
def test_bad_token_lists_are_refused_with_the_reason(tokens: str, error: str) -> None:
    with pytest.raises(ConfigError, match=error) as caught:
        ServerSettings(server_tokens=tokens).check_bind()
    assert ALICE not in str(caught.value) and BOB not in str(caught.value)


def test_an_unreadable_tokens_file_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"LOOP_JUDGE_SERVER_TOKENS_FILE.*cannot read"):
        ServerSettings(server_tokens_file=tmp_path / "missing").check_bind()


async def test_one_principal_cannot_touch_anothers_session() -> None:
    app = two_principals()
    history = failing_repeat_history(4)
    async with client(app, ALICE) as alice, client(app, BOB) as bob:
        for h in prefixes(history, 3):
            r = await alice.post("/v1/sessions/shared-id/turns", json={"messages": h})
        assert Verdict.model_validate(r.json()).looping
        # bob's preflight reads a session of his own (none): not alice's repeat
        r = await bob.post(
            "/v1/sessions/shared-id/calls",
            json={"name": "run_tests", "arguments": {"path": "tests/"}},
        )
        assert r.status_code == 200 and not r.json()["looping"] and r.json()["turn"] == 0
        # deleting it answers exactly as for a session that never existed
        theirs = await bob.delete("/v1/sessions/shared-id")
        never = await bob.delete("/v1/sessions/never-was")
        assert theirs.status_code == never.status_code == 404
        assert theirs.json()["detail"].replace("shared-id", "X") == never.json()["detail"].replace(
            "never-was", "X"
        )
        # bob's turn under the same id starts his own session, inheriting no ladder
        r = await bob.post("/v1/sessions/shared-id/turns", json={"messages": history})
        fresh = await LoopTracker(TrackerConfig()).turn_started(history)
        assert Verdict.model_validate(r.json()) == fresh and fresh.turn == 1
        # alice's session went on untouched
        r = await alice.post("/v1/sessions/shared-id/turns", json={"messages": history})
        assert r.json()["turn"] == 4 and r.json()["looping"]
        assert (await alice.delete("/v1/sessions/shared-id")).json() == {"deleted": True}


async def test_the_host_header_must_name_this_server() -> None:
    app = two_principals()
    for host in ("localhost", "127.0.0.1:8787", "[::1]:8787", "LOCALHOST"):
        async with client(app, ALICE, host) as c:
            assert (await c.get("/metrics")).status_code == 200, host
    async with client(app, ALICE, "attacker.example") as c:
        r = await c.post("/v1/sessions/s/turns", json={"messages": []})
        assert r.status_code == 400 and "LOOP_JUDGE_ALLOWED_HOSTS" in r.json()["detail"]
        assert (await c.get("/healthz")).status_code == 200  # probes come by IP address
    app = two_principals(allowed_hosts="sidecar.internal, judge.svc")
    async with client(app, ALICE, "sidecar.internal:8787") as c:
        assert (await c.get("/metrics")).status_code == 200
    async with client(app, ALICE, "attacker.example") as c:
        assert (await c.get("/metrics")).status_code == 400
    app = two_principals(allowed_hosts="*")
    async with client(app, ALICE, "anything.example") as c:
        assert (await c.get("/metrics")).status_code == 200


@pytest.mark.parametrize(
    ("header", "name"),
    [
        (b"localhost:8787", "localhost"),
        (b"[::1]:80", "::1"),
        (b"::1", "::1"),
        (b"Ex.COM", "ex.com"),
    ],
)
def test_host_name(header: bytes, name: str) -> None:
    assert host_name(header) == name


@pytest.mark.parametrize("session_id", ["a" * 129, "bad%7Bid%7D", "sp%20ace", "semi;colon"])
async def test_bad_session_ids_are_422_naming_the_rule(session_id: str) -> None:
    async with client(two_principals(), ALICE) as c:
        r = await c.post(f"/v1/sessions/{session_id}/turns", json={"messages": []})
    assert r.status_code == 422
    (item,) = r.json()["detail"]
    assert item["loc"] == ["path", "session_id"]
    assert item["msg"].startswith("session id must be 1-128 characters of")


async def test_the_token_is_checked_on_every_session_route() -> None:
    app = two_principals()
    async with client(app, None) as anonymous, client(app, "not-a-token-at-all-000") as wrong:
        for c in (anonymous, wrong):
            assert (await c.post("/v1/sessions/s/turns", json={"messages": []})).status_code == 401
            assert (await c.post("/v1/sessions/s/calls", json={"name": "x"})).status_code == 401
            assert (await c.delete("/v1/sessions/s")).status_code == 401
            assert (await c.get("/metrics")).status_code == 401
