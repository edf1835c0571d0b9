"""Secrets known by where they stand, keys in other envelopes, and stable placeholders.

A credential of a format no rule knows is still found where its place says credential (a
URL's user part or path, a secret's name on an earlier line or one level up, a clip's
ellipsis) when it also looks machine-made (`_secret_like`); a key a terminal folded is
joined again; a private key in base64, PuTTY or SSH2 form is hidden; look-alikes (UUIDs,
git SHAs, checksums, base64 images and text, CDN ids, AWS's example keys, placeholders)
stay. A keyed redactor (one per tracker) writes a placeholder derived from the secret, so
equal secrets read alike and different ones do not; a saved state keeps plain markers.

The corpus (tests/data/secrets/context.json) was written for these categories from the
formats' own documentation; every secret in it is random.
"""

from __future__ import annotations

import base64
import json
import random
import re
import string
import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest

from judge import LoopTracker, TrackerConfig
from judge.history import bounded
from judge.llm.redaction import BUILTIN_KINDS, PLACEHOLDER_HEX, Redactor, redact
from judge.llm.redaction._opaque import _secret_like
from tests.redaction_support import (
    PIECE,
    assert_no_leaks,
    assert_redaction_grows_linearly,
    case_line,
    leaks,
    security_bench,
    written_forms,
)

ROOT = Path(__file__).resolve().parents[2]
CONTEXT = ROOT / "tests" / "data" / "secrets" / "context.json"
CORPUS: dict[str, Any] = json.loads(CONTEXT.read_text(encoding="utf-8"))
KEYED = re.compile(rf"\[REDACTED:[a-z_]+:[0-9a-f]{{{PLACEHOLDER_HEX}}}\]")

_RNG = random.Random(7)
_B62 = string.ascii_letters + string.digits


def _token(n: int, alphabet: str = _B62) -> str:
    return "".join(_RNG.choice(alphabet) for _ in range(n))


def _b64(nbytes: int, rng: random.Random = _RNG) -> str:
    return base64.b64encode(bytes(rng.getrandbits(8) for _ in range(nbytes))).decode()


# -- the corpus --------------------------------------------------------------------------------


def test_the_corpus_covers_every_category() -> None:
    ids = {c["id"] for c in CORPUS["secrets"]}
    for prefix in ("url_user", "url_path", "yaml_", "json_", "folded_", "putty", "ssh2", "auth_"):
        assert any(i.startswith(prefix) for i in ids), prefix
    assert {"kubeconfig_client_key_data", "base64_wrapped_pem"} <= ids
    lookalikes = {c["id"] for c in CORPUS["lookalikes"]}
    assert {"uuid_url_path", "git_sha_url", "sha256_checksum", "png_data_uri"} <= lookalikes
    assert {"aws_example_key_id", "placeholder_block", "base64_text"} <= lookalikes
    for case in CORPUS["secrets"]:
        assert case["source"] and case["secrets"], case["id"]


@pytest.mark.parametrize("case", CORPUS["secrets"], ids=lambda c: c["id"])
def test_every_secret_is_hidden_as_written_and_as_json(case: dict[str, Any]) -> None:
    for form, text in written_forms(case_line(case)).items():
        assert not leaks(redact(text), case["secrets"]), (case["id"], form)


@pytest.mark.parametrize("case", CORPUS["lookalikes"], ids=lambda c: c["id"])
def test_no_lookalike_changes(case: dict[str, Any]) -> None:
    for form, text in written_forms(case_line(case)).items():
        assert redact(text) == text, (case["id"], form)


@pytest.mark.slow
@pytest.mark.model_requests
def test_a_sample_reaches_no_sink() -> None:
    """Through a tracker, an HTTP judge and the Claude Code hook: every sink clean."""
    bench = security_bench()
    sample = ["url_user_token", "yaml_block_secret", "folded_github_pat", "putty_ppk_v3"]
    figures = bench.measure_independent(sample + ["cdn_asset_ids"], path=CONTEXT)
    assert figures["secret_cases"] == 4 and figures["lookalike_cases"] == 1
    assert_no_leaks(figures)


# -- secret-ness ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        _token(20),
        _token(40),
        _token(32, string.ascii_lowercase + string.digits),
        _token(43, _B62 + "-_"),
        "PDuxaeEwKlzdH39r84_lBCTOPchGoGyUCw4oE6zTNiA7Di5K",
    ],
)
def test_random_tokens_look_machine_made(value: str) -> None:
    assert _secret_like(value)


@pytest.mark.parametrize(
    "value",
    [
        "OrderProcessingServiceImpl",  # CamelCase words
        "DeployNightlyBuildConfig2024",
        "3f2b8c1e-9d4a-4e7b-8f21-6c0d5a9e7b13",  # UUID
        "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",  # sha256
        "e9438de558c983ccce8129ddc20e1b8b4c1d2e3f",  # git SHA
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",  # AWS's example
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJ",  # a PNG's first bytes
        base64.b64encode(b"Deploy finished: 14 services updated, 0 failed.").decode(),
        "aaaaaaaaaaaaaaaaaaaaaaaa1",
        "tests_test_redaction_context_py",
        "short1A",
    ],
)
def test_look_alikes_do_not(value: str) -> None:
    assert not _secret_like(value)


def test_a_named_context_accepts_hex_and_shorter_tokens() -> None:
    hex40 = "".join(_RNG.choice("0123456789abcdef") for _ in range(40))
    assert not _secret_like(hex40) and _secret_like(hex40, named=True)
    assert not _secret_like("x7Kp2mQ9vL4t") and _secret_like("x7Kp2mQ9vL4t", named=True)
    assert not _secret_like("3f2b8c1e-9d4a-4e7b-8f21-6c0d5a9e7b13", named=True)


# -- contexts --------------------------------------------------------------------------------


def test_a_url_user_without_password() -> None:
    token = _token(36)
    assert token not in redact(f"git clone https://{token}@github.com/acme/app.git")
    hex40 = "".join(_RNG.choice("0123456789abcdef") for _ in range(40))
    assert hex40 not in redact(f"remote: https://{hex40}@git.example.com/a/b.git")
    for kept in ("https://git@github.com/a/b", "ssh://deploy-user@host.example.com/srv"):
        assert redact(kept) == kept
    assert redact("https://<YOUR_TOKEN>@github.com/a/b") == "https://<YOUR_TOKEN>@github.com/a/b"


def test_url_path_segments_where_the_url_is_for_secrets() -> None:
    token = _token(32)
    text = f"curl -X POST https://hooks.example.net/hooks/T0123/{token} -d @p.json"
    assert redact(text) == text.replace(token, "[REDACTED:opaque_token]")
    key = _token(22, _B62 + "-_")
    assert key not in redact(f"https://maker.ifttt.com/trigger/done/with/key/{key}")
    kept = [
        # ids in a CDN's paths, a hashed file name, a commit, a UUID
        "https://images.ctfassets.net/slt3lc6tev37/2FNnxFZOBEha1W2MhF44EN/e94/hero.png",
        "https://cdn.bfldr.com/I22OPSFM/at/b4c73zg6s3qnvfqqjc3tvwx/logo.svg",
        "https://hooks.example.net/static/main.8f3a2c1b9d7e6f5a4b3c.chunk.js",
        "https://github.com/acme/app/commit/e9438de558c983ccce8129ddc20e1b8b4c1d2e3f",
        "https://api.example.com/token/3f2b8c1e-9d4a-4e7b-8f21-6c0d5a9e7b13/info",
    ]
    for text in kept:
        assert redact(text) == text


@pytest.mark.parametrize(
    "template",
    [
        "client_secret: |\n  {t}\nscopes: [openid]",
        "client_secret: >-\n    {t}\n",
        '{{"api_key": {{"value": "{t}", "created": "2026-01-02"}}}}',
        "registration_tokens:\n  - {t}\n  - {t2}\n",
        '{{"tokens": ["{t}", "{t2}"], "ttl": 3600}}',
    ],
)
def test_a_secret_name_with_its_value_on_later_lines_or_nested(template: str) -> None:
    t, t2 = _token(40), _token(30)
    for form, text in written_forms(template.format(t=t, t2=t2)).items():
        out = redact(text)
        assert t not in out and t2 not in out, form


def test_a_harmless_name_or_a_non_random_value_nearby_stays() -> None:
    for text in (
        "client_secret:\n  id: 3f2b8c1e-9d4a-4e7b-8f21-6c0d5a9e7b13\n",
        '{"api_key": {"created": "2026-01-02", "owner": "platform-team"}}',
        f"metadata:\n  labels:\n    build: {_token(40)}\n",  # no secret name
        "token:\n  type: OrderProcessingServiceImpl\n",
    ):
        assert redact(text) == text


def test_other_authorization_schemes() -> None:
    for scheme in ("Splunk", "SSWS", "GenieKey", "Negotiate", "DPoP"):
        token = _token(36)
        assert token not in redact(f"Authorization: {scheme} {token}"), scheme
    token = _token(48, _B62 + "-_")
    assert token not in redact(f"X-Auth-Token: {token}")


# -- terminal folds -------------------------------------------------------------------------


def test_a_token_folded_by_the_terminal_is_hidden_whole() -> None:
    pat = "github_pat_11A" + _token(82, _B62 + "_")
    text = f"$ gh auth token\n{pat[:80]}\n{pat[80:]}\n$ echo done"
    out = redact(text)
    assert pat[80:] not in out and pat[:20] not in out
    assert out.endswith("\n$ echo done")
    for form, shown in written_forms(text).items():
        assert pat[80:] not in redact(shown), form


def test_lines_that_only_end_long_are_not_joined() -> None:
    secret = _token(40)
    text = f"aws_secret_access_key = {secret}\nregion = us-east-1\nOutput = json"
    assert redact(text).endswith("\nregion = us-east-1\nOutput = json")
    text = f"Authorization: Bearer ghp_{_token(36)}\nPASSWORD=hunter2hunter2"
    assert redact(text).count("[REDACTED:") == 2
    log = "".join(
        f"2026-11-27 step {i:05d} wrote /srv/data/shard_{i:05d}_out.parquet\n" for i in range(50)
    )
    assert redact(log) == log


# -- private keys in other envelopes ----------------------------------------------------------


def _pem(kind: str, nbytes: int) -> str:
    body = "\n".join(textwrap.wrap(_b64(nbytes), 64))
    return f"-----BEGIN {kind}-----\n{body}\n-----END {kind}-----\n"


def test_a_base64_pem_private_key_and_not_a_certificate() -> None:
    key = base64.b64encode(_pem("RSA PRIVATE KEY", 300).encode()).decode()
    cert = base64.b64encode(_pem("CERTIFICATE", 200).encode()).decode()
    text = f"  client-certificate-data: {cert}\n  client-key-data: {key}\n"
    assert (
        redact(text)
        == f"  client-certificate-data: {cert}\n  client-key-data: [REDACTED:private_key]\n"
    )
    wrapped = "\n".join(textwrap.wrap(key, 76))
    out = redact(f"$ base64 tls.key\n{wrapped}\n$ ls")
    assert out == "$ base64 tls.key\n[REDACTED:private_key]\n$ ls"


def test_the_tail_of_a_base64_pem_key_a_clip_cut() -> None:
    """A kept copy's digest marker can cut a key's base64 anywhere: its end still decodes
    to the private key's END line; a certificate's does not."""
    key = base64.b64encode(_pem("RSA PRIVATE KEY", 300).encode()).decode()
    cert = base64.b64encode(_pem("CERTIFICATE", 300).encode()).decode()
    for cut in range(200, 204):
        out = redact(f"data: [... 1208 chars, blake2b 0a1b ...] {key[cut:]}\n")
        assert out == "data: [... 1208 chars, blake2b 0a1b ...] [REDACTED:private_key]\n"
        assert redact(f"ca: {cert[cut:]}") == f"ca: {cert[cut:]}"


def test_putty_keys_hide_the_private_lines_and_mac_only() -> None:
    public = "\n".join(textwrap.wrap("AAAAC3NzaC1lZDI1NTE5AAAAI" + _b64(33), 64))
    private = textwrap.wrap(_b64(96), 64)
    mac = "".join(_RNG.choice("0123456789abcdef") for _ in range(64))
    head = "PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nComment: ci\n"
    head += f"Public-Lines: 2\n{public}\n"
    text = (
        head + f"Private-Lines: {len(private)}\n" + "\n".join(private) + f"\nPrivate-MAC: {mac}\n"
    )
    assert redact(text) == head + "[REDACTED:private_key]\n"
    cut = head + f"Private-Lines: {len(private)}\n{private[0]}"
    assert private[0] not in redact(cut)


def test_an_encrypted_putty_key_whose_head_a_clip_took() -> None:
    """A long tool call's raw arguments (and a saved state's values) keep the head and
    tail of an encrypted v2 key around `bounded`'s marker: "Private-Lines: N" is in the
    cut, its last private lines and MAC are not; the public lines before the cut stay."""
    rng = random.Random(20261127)  # its own: the module's generator feeds the tests after
    public = textwrap.wrap("AAAAB3NzaC1yc2EAAAADAQABAAABAQ" + _b64(240, rng), 64)
    private = textwrap.wrap(_b64(880, rng), 64)
    mac = "".join(rng.choice("0123456789abcdef") for _ in range(40))
    key = (
        "PuTTY-User-Key-File-2: ssh-rsa\nEncryption: aes256-cbc\nComment: imported-openssh-key\n"
        f"Public-Lines: {len(public)}\n" + "\n".join(public) + "\n"
        f"Private-Lines: {len(private)}\n" + "\n".join(private) + f"\nPrivate-MAC: {mac}"
    )
    command = f"gh auth status\n{key}\n./deploy.sh --check"
    # The cut in the public lines, and (900) in the private ones after their header.
    for limit in (600, 900, 1_024):
        clipped = bounded(command, limit)
        assert "Private-MAC" in clipped and mac[:PIECE] in clipped, limit
        head, marker, tail = clipped.partition(" [... ")
        kept = head.partition("Private-Lines")[0]
        for text in (
            clipped,
            json.dumps({"cmd": clipped}),
            f"exact:bash({json.dumps({'cmd': command}, separators=(',', ':'))})",
            clipped.replace("\n", " "),  # a summary's blanks for line breaks
        ):
            out = redact(bounded(text, limit) if text.startswith("exact:") else text)
            assert not leaks(out, [*private, mac]), (limit, text[:40])
        # The public lines before the cut and the clip's marker stay; the tail is the key's.
        out = redact(clipped)
        assert out.startswith(kept) and marker.lstrip() + tail.partition("...] ")[0] in out, limit
        assert out.endswith("...] [REDACTED:private_key]\n./deploy.sh --check"), limit
    # The same tail behind an ellipsis, and the whole key as before.
    assert not leaks(redact("…" + "\n".join(private[-3:]) + f"\nPrivate-MAC: {mac}"), [mac])
    assert redact(key) == key.partition("Private-Lines")[0] + "[REDACTED:private_key]"
    # No clip, no lines: prose and a MAC-shaped word stay; a lone MAC is still hidden.
    for kept in (
        "the Private-MAC: bad line",
        "words here\nPrivate-MAC: cafe",
        f"{public[0]}\n{public[1][:20]}\nPrivate-MAC: beef",
    ):
        assert redact(kept) == kept
    assert mac not in redact(f"a {public[1][:20]}\nPrivate-MAC: {mac}")
    assert public[1][:20] in redact(f"a {public[1][:20]}\nPrivate-MAC: {mac}")


def test_ssh2_private_keys_and_not_public_ones() -> None:
    body = "\n".join(textwrap.wrap("P2/56wAAA" + _b64(500), 70))
    text = (
        f'---- BEGIN SSH2 ENCRYPTED PRIVATE KEY ----\nComment: "k"\n{body}\n'
        "---- END SSH2 ENCRYPTED PRIVATE KEY ----"
    )
    assert redact(f"$ cat id\n{text}\n$") == "$ cat id\n[REDACTED:private_key]\n$"
    assert redact(text[:160] + "…") == "[REDACTED:private_key]…"
    public = (
        f'---- BEGIN SSH2 PUBLIC KEY ----\nComment: "k"\n{_b64(100)}\n---- END SSH2 PUBLIC KEY ----'
    )
    assert redact(public) == public


# -- what a clip leaves --------------------------------------------------------------------


def test_a_clipped_random_run_of_no_known_format_is_hidden() -> None:
    token = "vnd_" + _token(40)
    assert token[:14] not in redact(f'bash({{"cmd":"login\\n{token[:30]}…) called 3x')
    assert "glpat-yN-al" not in redact("value: glpat-yN-al…)")
    user = _token(36)
    assert user[:12] not in redact(f"git clone https://{user[:30]}…")
    for kept in ("see https://www.example.com/very/long…", "ipfs://Qme37SmsH138dvk8HgqhHt…"):
        assert redact(kept) == kept
    for kept in (
        "class RemovedInDjango…",
        "soup = BeautifulSoup…",
        "echo 'RXZpbCBDb3JwLCB3ZSBoYXZlIGRlbGl2ZXJlZCBvbiBvdXIgcHJvbWlzZSBh…",
        "npm_package_ver…",
        "see /usr/local/lib/python3.12/site-packages/judge/l…",
        # clipped base64 data: a go.sum hash, an integrity string, a public key
        "golang.org/x/net v0.24.0 h1:zQ8vN2kLp5XwR7tY1mB4cD9fG3hJ…",
        '"integrity": "sha512-Zx9Kp2LmQ8rT4vW7yB1nC3dF6gH0jS5a…',
        "MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA…",
    ):
        assert redact(kept) == kept


def test_a_summary_that_joined_the_lines_with_blanks() -> None:
    """A verdict's summary quotes a result with its line breaks turned into blanks."""
    token = _token(40)
    assert token not in redact(f"oauth: client_secret: | {token} scopes: [openid]")
    assert token not in redact(f"runner: registration_tokens: - {token} concurrent: 4")
    private = textwrap.wrap(_b64(96), 64)
    joined = f"Public-Lines: 1 AAAA Private-Lines: 2 {private[0]} {private[1]} Private-MAC: ab12"
    assert private[0] not in redact(joined) and private[1] not in redact(joined)
    pat = "github_pat_11A" + _token(82, _B62 + "_")
    assert pat[80:] not in redact(f"$ gh auth token {pat[:80]} {pat[80:]} $ echo done")


def test_a_csv_flattened_onto_one_line() -> None:
    secret = _token(40)
    text = f"Access key ID,Secret access key AKIAN3FEJ3Z6ONVV6YQR,{secret[:12]}…"
    assert secret[:10] not in redact(text)
    text = f"id,name,api_token,created 1,ci-bot,{secret},2026-01-02"
    assert redact(text) == "id,name,api_token,created 1,ci-bot,[REDACTED:secret],2026-01-02"
    kept = "id,name,created 1,ci-bot,2026-01-02 2,web,2026-01-03"
    assert redact(kept) == kept


# -- stable placeholders ----------------------------------------------------------------------


def test_keyed_placeholders_are_equal_for_equal_secrets_only() -> None:
    redactor = Redactor().keyed()
    a, b = f"ghp_{_token(36)}", f"ghp_{_token(36)}"
    one, two, again = (redactor.redact(f"git push https://x:{t}@github.com") for t in (a, b, a))
    assert one == again and one != two
    assert KEYED.search(one) and a not in one
    # The same secret in a tool call's JSON and in a plain result reads alike.
    escaped = redactor.redact(json.dumps({"cmd": f"echo {a}\n"}))
    assert KEYED.search(one).group() in escaped  # type: ignore[union-attr]


def test_each_redactor_has_its_own_key_and_a_plain_one_has_none() -> None:
    secret = f"sk-ant-api03-{_token(80)}"
    first, second = Redactor().keyed(), Redactor().keyed()
    assert first.redact(secret) != second.redact(secret)
    assert Redactor().redact(secret) == "[REDACTED:anthropic_key]"
    fixed = b"k" * 32
    assert Redactor().keyed(fixed).redact(secret) == Redactor().keyed(fixed).redact(secret)
    with pytest.raises(ValueError):
        Redactor().keyed(b"short")
    with pytest.raises(ValueError):
        Redactor(key=b"short")


def test_keyed_redaction_is_idempotent() -> None:
    redactor = Redactor().keyed()
    once = redactor.redact(f"password: {_token(20)}\nhttps://{_token(30)}@github.com/a/b")
    assert redactor.redact(once) == once and redact(once) == once


def test_opaque_token_is_a_kind_that_can_be_turned_off() -> None:
    assert "opaque_token" in BUILTIN_KINDS
    text = f"git clone https://{_token(36)}@github.com/a/b"
    assert Redactor(disable=["opaque_token"]).redact(text) == text


def test_a_tracker_publishes_keyed_placeholders_and_saves_plain_markers() -> None:
    """Two calls that differ only in their token still differ in the verdict; the saved
    state, read by a tracker restored without the key, keeps the plain marker."""
    token = f"ghp_{_token(36)}"
    call = {
        "id": "c",
        "type": "function",
        "function": {"name": "bash", "arguments": json.dumps({"cmd": f"gh auth login {token}"})},
    }
    history: list[dict[str, Any]] = [{"role": "user", "content": "Log in to GitHub."}]
    for n in range(6):
        history.append(
            {"role": "assistant", "content": "", "tool_calls": [{**call, "id": f"c{n}"}]}
        )
        history.append({"role": "tool", "tool_call_id": f"c{n}", "content": "error: bad token"})

    async def run() -> tuple[list[Any], LoopTracker]:
        tracker = LoopTracker(TrackerConfig(semantic="off"))
        verdicts = []
        for end in range(3, len(history) + 1, 2):
            verdicts.append(await tracker.turn_started(history[:end]))
        return verdicts, tracker

    verdicts, tracker = anyio.run(run)
    texts = " ".join(v.summary or "" for v in verdicts if v.looping)
    assert texts and token[:10] not in texts and KEYED.search(texts)
    state = tracker.state.model_dump_json()
    assert token[:10] not in state and not KEYED.search(state)


# -- cost ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "unit",
    [
        f"git clone https://{_token(30)}@github.com/a/b.git\n",
        f"https://hooks.example.net/hooks/{_token(30)}/x/{_token(20)}\n",
        f"client_secret:\n  {_token(40)}\n",
        f"{_token(79)}\n{_token(40)}\n",  # every line a fold
        f"{_token(30)}…\n",
        "Private-Lines: 2\nAAAA\n",
        # A clip's tail walked back from each MAC, and a MAC behind every full line.
        "...] qT4wZp9LmX2vK8rN\n" + "aZ09+/" * 10 + "Xy\nPrivate-MAC: " + "ab" * 20 + "\n",
        "aZ09+/" * 10 + "XyZ0\nPrivate-MAC: ",
        f"LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVkt{_token(40)}\n",
        "id,name,api_token,created 1,ci-bot,x,y ",
    ],
)
@pytest.mark.slow
def test_context_rules_grow_linearly(unit: str) -> None:
    assert_redaction_grows_linearly(unit)
