"""Build the secret-redaction corpus: ``secrets.jsonl`` and ``lookalikes.jsonl`` beside this file.

Every credential here is made up from a seeded random generator in the documented shape of
its format (prefix, alphabet, length); none is real. Each format is placed in the four
places an agent's history carries text to the judge: a tool result, a tool call's JSON
arguments, the assistant's own text, and the task (the first user message). Look-alikes are
the strings a redactor must leave alone (hashes, ids, base64, code that only names a
secret), placed the same four ways. Each line after the first (a note) is one case: its
text, its placement and, for a secret, the substrings that must never reach the judge;
``evals/bench_security.py`` builds the history around it and measures.

Regenerate after editing the specs:  .venv/bin/python tests/data/secrets/generate.py
The output is deterministic (fixed seed), so a regeneration without edits changes nothing.
"""

# ruff: noqa: E501 (one format or look-alike per line reads best as a table)
from __future__ import annotations

import json
import random
import string
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
SEED = 20261123
PLACEMENTS = ("result", "arguments", "assistant", "task")

LOWER = string.ascii_lowercase
UPPER = string.ascii_uppercase
DIGITS = string.digits
ALNUM = LOWER + UPPER + DIGITS
HEX = DIGITS + "abcdef"
B64 = ALNUM + "+/"
B64URL = ALNUM + "-_"


@dataclass(frozen=True)
class Format:
    """One credential format: how to make a value and the line it usually appears in.

    ``make`` returns (line, secrets): the text to place and the substrings of it that must
    never reach the judge (the credential, not the key name or host around it).
    """

    name: str
    make: Callable[[random.Random], tuple[str, list[str]]]


def r(rng: random.Random, alphabet: str, n: int) -> str:
    """``n`` random characters, at least one digit and one letter when the alphabet has both
    (real tokens do, and a value without either would be a weaker test)."""
    while True:
        value = "".join(rng.choice(alphabet) for _ in range(n))
        has_digit = any(c.isdigit() for c in value) or not any(c in DIGITS for c in alphabet)
        has_alpha = any(c.isalpha() for c in value) or not any(c.isalpha() for c in alphabet)
        if has_digit and has_alpha:
            return value


def token(template: str, **parts: tuple[str, int]) -> Callable[[random.Random], str]:
    """A value from ``template`` with each ``{name}`` filled by (alphabet, length) randoms."""

    def make(rng: random.Random) -> str:
        return template.format(**{k: r(rng, a, n) for k, (a, n) in parts.items()})

    return make


def bare(line: str, value: Callable[[random.Random], str]) -> Callable[..., Any]:
    """A format whose whole value is the secret, shown in ``line`` (``{s}``)."""

    def make(rng: random.Random) -> tuple[str, list[str]]:
        s = value(rng)
        return line.format(s=s), [s]

    return make


def pem(label: str, cut: bool = False) -> Callable[..., Any]:
    def make(rng: random.Random) -> tuple[str, list[str]]:
        body = [r(rng, B64, 64) for _ in range(4)] + [r(rng, B64, 20) + "=="]
        end = "" if cut else f"\n-----END {label}-----"
        return f"-----BEGIN {label}-----\n" + "\n".join(body) + end, body

    return make


def pem_in_json(rng: random.Random) -> tuple[str, list[str]]:
    body = [r(rng, B64, 64) for _ in range(3)]
    key = "-----BEGIN PRIVATE KEY-----\\n" + "\\n".join(body) + "\\n-----END PRIVATE KEY-----\\n"
    project = "demo-" + r(rng, LOWER + DIGITS, 6)
    line = (
        f'{{"type": "service_account", "project_id": "{project}", '
        f'"private_key_id": "{r(rng, HEX, 40)}", "private_key": "{key}"}}'
    )
    return line, body


def pair(line: str, user: Callable[[random.Random], str], secret: Callable[[random.Random], str]):
    """A format with a user (kept) and a secret: ``{u}`` and ``{s}`` in ``line``."""

    def make(rng: random.Random) -> tuple[str, list[str]]:
        s = secret(rng)
        return line.format(u=user(rng), s=s), [s]

    return make


def word(choices: list[str]) -> Callable[[random.Random], str]:
    return lambda rng: rng.choice(choices)


def password(rng: random.Random) -> str:
    """A human-made password: a word, digits and maybe a symbol (hunter2-style)."""
    stem = rng.choice(
        ["hunter", "sunshine", "dragon", "Winter", "letmein", "Passw0rd", "tr0ub4dor"]
    )
    return stem + r(rng, DIGITS, 4) + rng.choice(["", "!", "#", "x"]) + r(rng, LOWER, 3)


USERS = word(["admin", "deploy", "app", "root", "ci-bot", "svc_backup"])


FORMATS: list[Format] = [
    Format("openai_project_key", bare("OPENAI_API_KEY={s}", token("sk-proj-{a}", a=(B64URL, 120)))),
    Format(
        "openai_legacy_key",
        bare("using key {s}", token("sk-{a}T3BlbkFJ{b}", a=(ALNUM, 20), b=(ALNUM, 20))),
    ),
    Format(
        "openai_svcacct_key",
        bare("export OPENAI_KEY='{s}'", token("sk-svcacct-{a}", a=(B64URL, 60))),
    ),
    Format(
        "anthropic_key", bare("ANTHROPIC_API_KEY={s}", token("sk-ant-api03-{a}AA", a=(B64URL, 93)))
    ),
    Format(
        "anthropic_admin_key", bare("x-api-key: {s}", token("sk-ant-admin01-{a}AA", a=(B64URL, 93)))
    ),
    Format("google_api_key", bare("GOOGLE_API_KEY={s}", token("AIza{a}", a=(B64URL, 35)))),
    Format(
        "google_api_key_in_url",
        bare(
            "GET https://maps.googleapis.com/maps/api/geocode/json?address=x&key={s}",
            token("AIza{a}", a=(B64URL, 35)),
        ),
    ),
    Format("google_oauth_access_token", bare("token: {s}", token("ya29.{a}", a=(B64URL, 150)))),
    Format(
        "google_oauth_refresh_token",
        bare('"refresh_token": "{s}"', token("1//0{a}", a=(B64URL, 98))),
    ),
    Format(
        "aws_access_key_id",
        bare("aws_access_key_id = {s}", token("AKIA{a}", a=(UPPER + "234567", 16))),
    ),
    Format("aws_sts_key_id", bare("AccessKeyId: {s}", token("ASIA{a}", a=(UPPER + "234567", 16)))),
    Format("aws_secret_access_key", bare("aws_secret_access_key = {s}", token("{a}", a=(B64, 40)))),
    Format("aws_secret_env", bare("AWS_SECRET_ACCESS_KEY={s}", token("{a}", a=(B64, 40)))),
    Format(
        "aws_session_token",
        bare("AWS_SESSION_TOKEN={s}", token("IQoJb3JpZ2luX2Vj{a}", a=(B64, 200))),
    ),
    Format(
        "github_pat_classic",
        bare("git push https://github.com using {s}", token("ghp_{a}", a=(ALNUM, 36))),
    ),
    Format(
        "github_pat_fine",
        bare("GH_TOKEN={s}", token("github_pat_{a}_{b}", a=(ALNUM, 22), b=(ALNUM, 59))),
    ),
    Format("github_oauth", bare("oauth token {s}", token("gho_{a}", a=(ALNUM, 36)))),
    Format("github_app_token", bare("installation token {s}", token("ghs_{a}", a=(ALNUM, 36)))),
    Format(
        "github_in_remote_url",
        bare(
            "git remote add origin https://x-access-token:{s}@github.com/acme/app.git",
            token("ghp_{a}", a=(ALNUM, 36)),
        ),
    ),
    Format("gitlab_pat", bare("GITLAB_TOKEN={s}", token("glpat-{a}", a=(B64URL, 20)))),
    Format("gitlab_runner_token", bare('token = "{s}"', token("glrt-{a}", a=(B64URL, 20)))),
    Format("gitlab_deploy_token", bare("deploy token {s}", token("gldt-{a}", a=(B64URL, 20)))),
    Format(
        "slack_bot_token",
        bare(
            "SLACK_BOT_TOKEN={s}",
            token("xoxb-{a}-{b}-{c}", a=(DIGITS, 12), b=(DIGITS, 13), c=(ALNUM, 24)),
        ),
    ),
    Format(
        "slack_user_token",
        bare(
            "slack token {s}",
            token(
                "xoxp-{a}-{b}-{c}-{d}", a=(DIGITS, 12), b=(DIGITS, 12), c=(DIGITS, 13), d=(HEX, 32)
            ),
        ),
    ),
    Format(
        "slack_app_token",
        bare(
            "SLACK_APP_TOKEN={s}",
            token("xapp-1-{a}-{b}-{c}", a=(UPPER + DIGITS, 11), b=(DIGITS, 13), c=(HEX, 64)),
        ),
    ),
    Format(
        "slack_webhook",
        bare(
            "curl -X POST -d @msg.json https://hooks.slack.com/services/{s}",
            token("T{a}/B{b}/{c}", a=(UPPER + DIGITS, 10), b=(UPPER + DIGITS, 10), c=(ALNUM, 24)),
        ),
    ),
    Format(
        "discord_webhook",
        bare(
            "webhook: https://discord.com/api/webhooks/{s}",
            token("{a}/{b}", a=(DIGITS, 18), b=(B64URL, 68)),
        ),
    ),
    Format(
        "discord_bot_token",
        bare(
            "DISCORD_TOKEN={s}", token("{a}.{b}.{c}", a=(B64URL, 24), b=(B64URL, 6), c=(B64URL, 38))
        ),
    ),
    Format(
        "teams_webhook",
        bare(
            "posting to https://acme.webhook.office.com/webhookb2/{s}",
            token(
                "{a}@{b}/IncomingWebhook/{c}/{d}",
                a=(HEX, 32),
                b=(HEX, 32),
                c=(HEX, 32),
                d=(HEX, 32),
            ),
        ),
    ),
    Format(
        "sendgrid_key",
        bare("SENDGRID_API_KEY={s}", token("SG.{a}.{b}", a=(B64URL, 22), b=(B64URL, 43))),
    ),
    Format(
        "sendgrid_bare",
        bare(
            "mail client configured with {s}", token("SG.{a}.{b}", a=(B64URL, 22), b=(B64URL, 43))
        ),
    ),
    Format(
        "npm_token", bare("//registry.npmjs.org/:_authToken={s}", token("npm_{a}", a=(ALNUM, 36)))
    ),
    Format("npm_token_bare", bare("published with {s}", token("npm_{a}", a=(ALNUM, 36)))),
    Format("pypi_token", bare("password = {s}", token("pypi-AgEIcHlwaS5vcmc{a}", a=(B64URL, 70)))),
    Format(
        "pypi_token_twine",
        bare(
            "twine upload -u __token__ -p {s} dist/*",
            token("pypi-AgEIcHlwaS5vcmc{a}", a=(B64URL, 70)),
        ),
    ),
    Format(
        "stripe_secret_live", bare("Stripe.api_key = '{s}'", token("sk_live_{a}", a=(ALNUM, 24)))
    ),
    Format("stripe_secret_test", bare("STRIPE_KEY={s}", token("sk_test_{a}", a=(ALNUM, 99)))),
    Format("stripe_restricted", bare("using {s}", token("rk_live_{a}", a=(ALNUM, 24)))),
    Format(
        "stripe_webhook_secret",
        bare("STRIPE_WEBHOOK_SECRET={s}", token("whsec_{a}", a=(ALNUM, 32))),
    ),
    Format("stripe_webhook_bare", bare("signing secret is {s}", token("whsec_{a}", a=(ALNUM, 32)))),
    Format("vault_service_token", bare("VAULT_TOKEN={s}", token("hvs.{a}", a=(B64URL, 90)))),
    Format("vault_token_bare", bare("vault login {s}", token("hvs.{a}", a=(B64URL, 24)))),
    Format("vault_batch_token", bare("token {s}", token("hvb.{a}", a=(B64URL, 120)))),
    Format(
        "jwt",
        bare(
            "Cookie: id_token={s}",
            token(
                "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJ{a}.{b}", a=(B64URL, 60), b=(B64URL, 43)
            ),
        ),
    ),
    Format(
        "jwt_bare",
        bare(
            "decoded {s} ok",
            token("eyJ{a}.eyJ{b}.{c}", a=(B64URL, 30), b=(B64URL, 80), c=(B64URL, 43)),
        ),
    ),
    Format("rsa_private_key", pem("RSA PRIVATE KEY")),
    Format("openssh_private_key", pem("OPENSSH PRIVATE KEY")),
    Format("ec_private_key_cut", pem("EC PRIVATE KEY", cut=True)),
    Format("pkcs8_private_key", pem("PRIVATE KEY")),
    Format("pgp_private_key", pem("PGP PRIVATE KEY BLOCK")),
    Format("gcp_service_account", pem_in_json),
    Format(
        "azure_storage_conn",
        bare(
            "AZURE_STORAGE_CONNECTION_STRING=DefaultEndpointsProtocol=https;AccountName=acme;AccountKey={s};EndpointSuffix=core.windows.net",
            token("{a}==", a=(B64, 86)),
        ),
    ),
    Format(
        "azure_sas",
        bare(
            "https://acme.blob.core.windows.net/c/f.zip?sv=2022-11-02&ss=b&srt=o&sp=r&se=2026-01-01&sig={s}",
            token("{a}%3D", a=(ALNUM, 43)),
        ),
    ),
    Format(
        "azure_ad_client_secret",
        bare("AZURE_CLIENT_SECRET={s}", token("{a}8Q~{b}", a=(ALNUM, 3), b=(ALNUM + "_~.-", 34))),
    ),
    Format(
        "azure_ad_secret_bare",
        bare("client secret {s} created", token("{a}7Q~{b}", a=(ALNUM, 3), b=(ALNUM, 34))),
    ),
    Format("huggingface_token", bare("HF_TOKEN={s}", token("hf_{a}", a=(ALNUM, 34)))),
    Format("huggingface_bare", bare("login with {s}", token("hf_{a}", a=(ALNUM, 34)))),
    Format("groq_key", bare("GROQ_API_KEY={s}", token("gsk_{a}", a=(ALNUM, 52)))),
    Format("xai_key", bare("XAI key {s}", token("xai-{a}", a=(ALNUM, 80)))),
    Format("twilio_api_key", bare("TWILIO_API_KEY={s}", token("SK{a}", a=(HEX, 32)))),
    Format(
        "mailchimp_key", bare("mailchimp key {s}", token("{a}-us{b}", a=(HEX, 32), b=(DIGITS, 2)))
    ),
    Format("shopify_token", bare("X-Shopify-Access-Token: {s}", token("shpat_{a}", a=(HEX, 32)))),
    Format(
        "telegram_bot_token",
        bare(
            "https://api.telegram.org/bot{s}/sendMessage",
            token("{a}:AA{b}", a=(DIGITS, 10), b=(B64URL, 33)),
        ),
    ),
    Format("digitalocean_token", bare("DIGITALOCEAN_TOKEN={s}", token("dop_v1_{a}", a=(HEX, 64)))),
    Format("databricks_token", bare("databricks token {s}", token("dapi{a}", a=(HEX, 32)))),
    Format("linear_key", bare("LINEAR_API_KEY={s}", token("lin_api_{a}", a=(ALNUM, 40)))),
    Format("doppler_token", bare("doppler {s}", token("dp.pt.{a}", a=(ALNUM, 43)))),
    Format(
        "age_secret_key",
        bare("{s}", token("AGE-SECRET-KEY-1{a}", a=("QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L", 58))),
    ),
    Format("square_token", bare("square token {s}", token("EAAA{a}", a=(B64URL, 60)))),
    Format("atlassian_token", bare("JIRA_API_TOKEN={s}", token("ATATT3{a}", a=(B64URL, 186)))),
    Format("supabase_token", bare("supabase login --token {s}", token("sbp_{a}", a=(HEX, 40)))),
    Format(
        "newrelic_key", bare("NEW_RELIC_API_KEY={s}", token("NRAK-{a}", a=(UPPER + DIGITS, 27)))
    ),
    Format(
        "grafana_token",
        bare("grafana service account {s}", token("glsa_{a}_{b}", a=(ALNUM, 32), b=(HEX, 8))),
    ),
    Format(
        "postman_key", bare("postman api key {s}", token("PMAK-{a}-{b}", a=(HEX, 24), b=(HEX, 34)))
    ),
    Format("pulumi_token", bare("PULUMI_ACCESS_TOKEN={s}", token("pul-{a}", a=(HEX, 40)))),
    Format(
        "sentry_auth_token", bare("SENTRY_AUTH_TOKEN={s}", token("sntrys_{a}", a=(B64URL, 100)))
    ),
    Format(
        "heroku_key",
        bare(
            "HEROKU_API_KEY={s}",
            token(
                "{a}-{b}-{c}-{d}-{e}", a=(HEX, 8), b=(HEX, 4), c=(HEX, 4), d=(HEX, 4), e=(HEX, 12)
            ),
        ),
    ),
    Format(
        "postgres_url",
        pair("DATABASE_URL=postgres://{u}:{s}@db.internal:5432/app", USERS, password),
    ),
    Format(
        "postgres_url_in_trace",
        pair(
            "psycopg.OperationalError: connection to postgresql://{u}:{s}@10.0.0.5/app failed",
            USERS,
            password,
        ),
    ),
    Format(
        "mongodb_srv_url",
        pair("mongodb+srv://{u}:{s}@cluster0.ab1cd.mongodb.net/?retryWrites=true", USERS, password),
    ),
    Format("redis_url", pair("REDIS_URL=redis://{u}:{s}@cache:6379/0", word([""]), password)),
    Format("amqp_url", pair("amqp://{u}:{s}@rabbit:5672/", USERS, password)),
    Format(
        "https_basic_url",
        pair("pip install --index-url https://{u}:{s}@pypi.acme.dev/simple pkg", USERS, password),
    ),
    Format("curl_user", pair("curl -u {u}:{s} https://api.acme.dev/v1/items", USERS, password)),
    Format("curl_user_long", pair("curl --user '{u}:{s}' https://api.acme.dev", USERS, password)),
    Format("mysql_p", pair("mysql -u {u} -p{s} -h db app", USERS, password)),
    Format(
        "mysql_password_flag",
        pair("mysqldump --user={u} --password={s} app > dump.sql", USERS, password),
    ),
    Format("pgpassword_env", pair("PGPASSWORD={s} psql -U {u} -h db app", USERS, password)),
    Format("pgpassword_export", pair("export PGPASSWORD='{s}'  # for {u}", USERS, password)),
    Format("mysql_pwd_env", pair("MYSQL_PWD={s} mysql -u {u}", USERS, password)),
    Format("sshpass", pair("sshpass -p '{s}' ssh {u}@bastion", USERS, password)),
    Format("docker_login", pair("docker login -u {u} -p {s} registry.acme.dev", USERS, password)),
    Format(
        "password_flag_space",
        pair("./manage.py createsuperuser --username {u} --password {s}", USERS, password),
    ),
    Format("netrc", pair("machine api.acme.dev login {u} password {s}", USERS, password)),
    Format("htpasswd_cli", pair("htpasswd -b -c .htpasswd {u} {s}", USERS, password)),
    Format("redis_cli_auth", pair("redis-cli -h cache -a {s} --user {u} ping", USERS, password)),
    Format(
        "openssl_passin",
        pair("openssl rsa -in {u}.key -passin pass:{s} -out plain.key", USERS, password),
    ),
    Format(
        "npmrc_legacy_token",
        bare(
            "//registry.npmjs.org/:_authToken={s}",
            token(
                "{a}-{b}-{c}-{d}-{e}", a=(HEX, 8), b=(HEX, 4), c=(HEX, 4), d=(HEX, 4), e=(HEX, 12)
            ),
        ),
    ),
    Format(
        "kubectl_from_literal",
        pair("kubectl create secret generic {u} --from-literal=password={s}", USERS, password),
    ),
    Format(
        "set_cookie_access_token",
        bare("Set-Cookie: access_token={s}; Path=/; HttpOnly", token("{a}", a=(B64URL, 40))),
    ),
    Format(
        "set_cookie_session",
        bare(
            "< set-cookie: sessionid={s}; expires=Wed, 01 Jan 2027 00:00:00 GMT",
            token("{a}", a=(LOWER + DIGITS, 32)),
        ),
    ),
    Format(
        "cookie_header",
        bare("Cookie: _ga=GA1.1.1; session={s}; theme=dark", token("{a}", a=(B64URL, 48))),
    ),
    Format("authorization_bearer", bare("Authorization: Bearer {s}", token("{a}", a=(B64URL, 40)))),
    Format(
        "authorization_basic", bare("-H 'Authorization: Basic {s}'", token("{a}=", a=(B64, 31)))
    ),
    Format("authorization_token", bare("Authorization: token {s}", token("{a}", a=(HEX, 40)))),
    Format("x_api_key_header", bare("-H 'X-API-Key: {s}'", token("{a}", a=(ALNUM, 32)))),
    Format(
        "private_token_header", bare('--header "PRIVATE-TOKEN: {s}"', token("{a}", a=(ALNUM, 20)))
    ),
    Format("env_db_password", bare("DB_PASSWORD={s}", password)),
    Format("env_secret_key", bare("SECRET_KEY={s}", token("{a}", a=(ALNUM + "!@#%^&*(-_=+)", 50)))),
    Format("env_client_secret", bare("OAUTH_CLIENT_SECRET={s}", token("{a}", a=(ALNUM, 40)))),
    Format(
        "yaml_password", bare("database:\n  user: app\n  password: {s}\n  port: 5432", password)
    ),
    Format("json_password", bare('{{"username": "app", "password": "{s}"}}', password)),
    Format(
        "python_password_kwarg",
        bare('psycopg.connect(host="db", user="app", password="{s}")', password),
    ),
    Format("js_api_key_const", bare('const apiKey = "{s}";', token("{a}", a=(ALNUM, 32)))),
    Format("k8s_secret_data", bare("data:\n  password: {s}\n", token("{a}==", a=(B64, 22)))),
    Format("passphrase", bare("GPG_PASSPHRASE={s}", password)),
    Format("webhook_secret_generic", bare("GITHUB_WEBHOOK_SECRET={s}", token("{a}", a=(HEX, 40)))),
    Format("encryption_key", bare("ENCRYPTION_KEY={s}", token("{a}=", a=(B64, 43)))),
    Format("session_secret", bare("app.secret_key = '{s}'", token("{a}", a=(ALNUM, 24)))),
    Format("lowercase_token_arg", bare("--token {s}", token("{a}", a=(ALNUM, 40)))),
    Format(
        "api_key_query_param",
        bare("GET https://api.acme.dev/v2/data?api_key={s}&page=2", token("{a}", a=(HEX, 32))),
    ),
    Format(
        "access_token_query",
        bare(
            "redirect to https://app.acme.dev/cb#access_token={s}&token_type=bearer",
            token("{a}", a=(B64URL, 43)),
        ),
    ),
]


@dataclass(frozen=True)
class LookAlike:
    """Text that resembles a secret but is not one; ``make`` returns the text."""

    name: str
    make: Callable[[random.Random], str]


def fixed(text: str) -> Callable[[random.Random], str]:
    return lambda rng: text


def shaped(template: str, **parts: tuple[str, int]) -> Callable[[random.Random], str]:
    return token(template, **parts)


def png_data_url(rng: random.Random) -> str:
    return "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAA" + r(rng, B64, 400) + "AAAAAElFTkSuQmCC"


LOOKALIKES: list[LookAlike] = [
    LookAlike("git_sha", shaped("HEAD is now at {a} fix parser", a=(HEX, 40))),
    LookAlike("git_short_sha", shaped("[main {a}] Add retries", a=(HEX, 7))),
    LookAlike("git_log_line", shaped("commit {a}\nAuthor: Dev <dev@example.com>", a=(HEX, 40))),
    LookAlike("sha256_sum", shaped("{a}  dist/app-1.2.0.tar.gz", a=(HEX, 64))),
    LookAlike("sha256_prefixed", shaped("sha256:{a}", a=(HEX, 64))),
    LookAlike("docker_digest", shaped("Digest: sha256:{a}", a=(HEX, 64))),
    LookAlike("docker_image_ref", shaped("ghcr.io/acme/app@sha256:{a}", a=(HEX, 64))),
    LookAlike("md5", shaped("MD5 (file.bin) = {a}", a=(HEX, 32))),
    LookAlike("sha1_etag", shaped('ETag: "{a}"', a=(HEX, 40))),
    LookAlike("npm_integrity", shaped('"integrity": "sha512-{a}=="', a=(B64, 86))),
    LookAlike("pip_hash", shaped("requests==2.32.3 --hash=sha256:{a}", a=(HEX, 64))),
    LookAlike(
        "uuid4",
        shaped(
            "request_id={a}-{b}-4{c}-a{d}-{e}",
            a=(HEX, 8),
            b=(HEX, 4),
            c=(HEX, 3),
            d=(HEX, 3),
            e=(HEX, 12),
        ),
    ),
    LookAlike(
        "uuid_session",
        shaped(
            "session {a}-{b}-{c}-{d}-{e} started",
            a=(HEX, 8),
            b=(HEX, 4),
            c=(HEX, 4),
            d=(HEX, 4),
            e=(HEX, 12),
        ),
    ),
    LookAlike(
        "uuid_json",
        shaped(
            '{{"id": "{a}-{b}-{c}-{d}-{e}", "status": "ok"}}',
            a=(HEX, 8),
            b=(HEX, 4),
            c=(HEX, 4),
            d=(HEX, 4),
            e=(HEX, 12),
        ),
    ),
    LookAlike("ulid", shaped("event 01{a} queued", a=("0123456789ABCDEFGHJKMNPQRSTVWXYZ", 24))),
    LookAlike("png_data_url", png_data_url),
    LookAlike("base64_blob_json", shaped('{{"image": "{a}"}}', a=(B64, 600))),
    LookAlike("base64_line", shaped("UEsDBBQAAAAIA{a}", a=(B64, 76))),
    LookAlike(
        "ssh_public_key", shaped("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI{a} dev@laptop", a=(B64, 43))
    ),
    LookAlike(
        "ssh_rsa_public_key",
        shaped("ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQ{a} ci@runner", a=(B64, 300)),
    ),
    LookAlike(
        "public_key_pem",
        shaped(
            "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8A{a}\n-----END PUBLIC KEY-----",
            a=(B64, 32),
        ),
    ),
    LookAlike(
        "certificate_pem",
        shaped(
            "-----BEGIN CERTIFICATE-----\nMIIDdzCCAl+gAwIBAgIE{a}\n-----END CERTIFICATE-----",
            a=(B64, 44),
        ),
    ),
    LookAlike("webpack_chunk", shaped("static/js/main.{a}.chunk.js  182.5 kB", a=(HEX, 8))),
    LookAlike(
        "css_hashes", shaped(".btn-{a} {{ color: #{b}; }}", a=(LOWER + DIGITS, 6), b=(HEX, 6))
    ),
    LookAlike(
        "k8s_pod_name",
        shaped("pod/api-{a}-{b} Running", a=(LOWER + DIGITS, 10), b=(LOWER + DIGITS, 5)),
    ),
    LookAlike("trace_id", shaped("traceparent: 00-{a}-{b}-01", a=(HEX, 32), b=(HEX, 16))),
    LookAlike("aws_arn", shaped("arn:aws:iam::{a}:role/deploy", a=(DIGITS, 12))),
    LookAlike(
        "aws_request_id",
        shaped(
            "RequestId: {a}-{b}-{c}-{d}-{e}",
            a=(HEX, 8),
            b=(HEX, 4),
            c=(HEX, 4),
            d=(HEX, 4),
            e=(HEX, 12),
        ),
    ),
    LookAlike("s3_etag_multipart", shaped('"ETag": "\\"{a}-12\\""', a=(HEX, 32))),
    LookAlike(
        "stripe_ids", shaped("charge ch_{a} for customer cus_{b}", a=(ALNUM, 24), b=(ALNUM, 14))
    ),
    LookAlike(
        "stripe_publishable_doc",
        fixed("Publishable keys start with pk_live_ and may be shown in the browser."),
    ),
    LookAlike(
        "slack_channel_id",
        shaped("posted to channel C{a} as U{b}", a=(UPPER + DIGITS, 10), b=(UPPER + DIGITS, 10)),
    ),
    LookAlike(
        "github_run_url",
        shaped(
            "https://github.com/acme/app/actions/runs/{a}/job/{b}", a=(DIGITS, 10), b=(DIGITS, 11)
        ),
    ),
    LookAlike("pr_url", shaped("https://github.com/acme/app/pull/{a}", a=(DIGITS, 4))),
    LookAlike("ssh_git_url", fixed("git clone git@github.com:acme/app.git")),
    LookAlike("url_no_credentials", fixed("https://example.com:8443/path?q=1&page=2#frag")),
    LookAlike("url_user_only", fixed("ssh://deploy@bastion.acme.dev:22/srv")),
    LookAlike("postgres_url_no_password", fixed("postgres://localhost:5432/app_test")),
    LookAlike(
        "postgres_url_placeholder",
        fixed("DATABASE_URL=postgres://${DB_USER}:${DB_PASSWORD}@db:5432/app"),
    ),
    LookAlike("email", fixed("contact: jane.doe+ci@example.com")),
    LookAlike("scp_path", fixed("scp build.tar.gz deploy@10.0.0.7:/srv/releases/")),
    LookAlike("ipv6", fixed("listening on [2001:db8:85a3::8a2e:370:7334]:8080")),
    LookAlike("timestamps", fixed("2026-11-23T09:00:20.123456Z INFO worker started pid=4821")),
    LookAlike("semver_list", fixed("numpy==1.26.4 pandas==2.2.2 torch==2.3.1+cu121")),
    LookAlike("max_tokens", fixed('{"model": "gpt-4o", "max_tokens": 4096, "temperature": 0.2}')),
    LookAlike("token_count", fixed("token_count: 1234\nprompt_tokens=812 completion_tokens=422")),
    LookAlike("password_prompt", fixed("Please enter your password to continue.")),
    LookAlike("password_wrong", fixed("Error: the password is wrong; try resetting it.")),
    LookAlike("password_hint", fixed("password_hint: name of first pet")),
    LookAlike("password_min_length", fixed("PASSWORD_MIN_LENGTH=12\nPASSWORD_HASHER=argon2")),
    LookAlike("bearer_prose", fixed("Bearer authentication is described in RFC 6750.")),
    LookAlike("token_type", fixed("token_type: Bearer\nexpires_in: 3600")),
    LookAlike("tokenizer", fixed("tokenizer: gpt2-tokenizer-fast")),
    LookAlike("sklearn", fixed("use sk-learn-compatible-estimator-api here")),
    LookAlike("env_lookup", fixed("password = os.environ['DB_PASSWORD']")),
    LookAlike("settings_attr", fixed("api_key = settings.api_key")),
    LookAlike("getpass_call", fixed("password = getpass.getpass('DB password: ')")),
    LookAlike(
        "env_from_code",
        fixed('API_KEY=os.getenv("OPENAI_API_KEY")\nSECRET_KEY=settings.secret_key'),
    ),
    LookAlike(
        "token_in_code",
        fixed("token = tokenizer.encode(text)\nauth = requests.auth.HTTPBasicAuth(user, pw)"),
    ),
    LookAlike("header_lookup", fixed('token = request.headers.get("Authorization")')),
    LookAlike(
        "type_annotation", fixed("def connect(user: str, password: str | None = None) -> Conn:")
    ),
    LookAlike("dataclass_field", fixed("    api_key: SecretStr = Field(default=None, repr=False)")),
    LookAlike("function_names", fixed("def get_secret(name): return vault.read_secret(name)")),
    LookAlike("env_placeholder", fixed("DB_PASSWORD=${DB_PASSWORD}\nAPI_KEY=<your-api-key>")),
    LookAlike("env_example_blank", fixed("SECRET_KEY=\nSTRIPE_KEY=changeme")),
    LookAlike("template_var", fixed("password: {{ vault_db_password }}")),
    LookAlike(
        "k8s_secret_ref",
        fixed("valueFrom:\n  secretKeyRef:\n    name: db-credentials\n    key: password"),
    ),
    LookAlike(
        "password_stdin", fixed("echo $CR_PAT | docker login ghcr.io -u USERNAME --password-stdin")
    ),
    LookAlike("mysql_no_password", fixed("mysql -u root -h db -P 3306 app")),
    LookAlike("mysql_prompt_p", fixed("mysql -u root -p app")),
    LookAlike("redis_cli_plain", fixed("redis-cli -h cache -p 6379 -n 2 keys 'session:*'")),
    LookAlike(
        "openssl_env_pass", fixed("openssl rsa -in server.key -passin env:KEY_PASS -out plain.key")
    ),
    LookAlike("curl_user_placeholder", fixed("curl -u $API_USER:$API_PASS https://api.acme.dev")),
    LookAlike(
        "curl_plain",
        fixed("curl -sSL -o install.sh https://get.acme.dev && sh install.sh --prefix=/opt"),
    ),
    LookAlike("null_password", fixed('{"user": "app", "password": null, "token": ""}')),
    LookAlike("masked_password", fixed("password: ********")),
    LookAlike("redacted_marker", fixed("API_KEY=[REDACTED]")),
    LookAlike(
        "python_traceback",
        fixed(
            "Traceback (most recent call last):\n  File \"/app/main.py\", line 42, in <module>\n    main()\nKeyError: 'token'"
        ),
    ),
    LookAlike(
        "pytest_output",
        fixed("FAILED tests/test_auth.py::test_token_refresh - AssertionError: assert 401 == 200"),
    ),
    LookAlike("cache_key", shaped("cache_key=user:{a}:profile", a=(DIGITS, 8))),
    LookAlike("primary_key", fixed("PRIMARY KEY (id), FOREIGN KEY (user_id) REFERENCES users(id)")),
    LookAlike("sort_key", fixed("SORT_KEY=created_at\nPARTITION_KEY=tenant_id")),
    LookAlike("idempotency_key_doc", fixed("Idempotency-Key header: a unique value per request")),
    LookAlike("public_key_assign", shaped("PUBLIC_KEY={a}", a=(HEX, 64))),
    LookAlike("key_id", shaped("key_id: {a}", a=(UPPER + DIGITS, 10))),
    LookAlike("kid_jwks", shaped('{{"kid": "{a}", "kty": "RSA", "use": "sig"}}', a=(B64URL, 43))),
    LookAlike("regex_source", fixed(r"PATTERN = re.compile(r'(?P<key>[A-Z_]+)=(?P<value>\S+)')")),
    LookAlike(
        "sql_query",
        fixed("SELECT id, email FROM users WHERE password_reset_at > now() - interval '1 day';"),
    ),
    LookAlike(
        "json_schema", fixed('{"properties": {"password": {"type": "string", "minLength": 8}}}')
    ),
    LookAlike("ls_output", fixed("-rw-r--r-- 1 dev dev 1204 Nov 23 09:00 secrets.example.yaml")),
    LookAlike(
        "path_with_token_word",
        fixed("src/auth/token_refresh.py:118: def refresh_token_if_needed(self):"),
    ),
    LookAlike("hex_color_list", fixed("palette = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728']")),
    LookAlike(
        "long_identifier", fixed("test_authorization_header_with_expired_refresh_token_returns_401")
    ),
    LookAlike("version_hash", shaped("Python 3.11.7 (main, {a}) [GCC 12.2.0]", a=(HEX, 12))),
    LookAlike("go_sum", shaped("golang.org/x/net v0.24.0 h1:{a}=", a=(B64, 43))),
    LookAlike("cargo_lock", shaped('checksum = "{a}"', a=(HEX, 64))),
    LookAlike("nonce_in_html", shaped('<script nonce="{a}">', a=(B64, 22))),
    LookAlike("csp_hash", shaped("script-src 'sha256-{a}='", a=(B64, 43))),
    LookAlike("random_seed", fixed("seed=1234567890 run_id=20261123-0900 epochs=30")),
    LookAlike("ip_and_port", fixed("Connecting to 10.0.3.17:5432 (attempt 3/5)")),
    LookAlike("aiza_in_word", fixed("The Aizawa attractor is a chaotic system.")),
    LookAlike("akia_in_word", fixed("AKIAbc is not an id; neither is akia12")),
    LookAlike("sg_prose", fixed("SG. Pepper's band; see SG.Intro for details")),
    LookAlike("npm_script", fixed("npm_config_cache=/tmp/.npm npm_package_version=1.4.2")),
    LookAlike("hvs_prose", fixed("the hvs. prefix marks a Vault service token")),
    LookAlike("ya29_prose", fixed("Google access tokens start with ya29. and expire in an hour")),
    LookAlike("whsec_prose", fixed("webhook secrets look like whsec_... in the dashboard")),
    LookAlike("hook_url_docs", fixed("https://api.slack.com/messaging/webhooks")),
    LookAlike("discord_invite", fixed("join us at https://discord.com/invite/acme")),
    LookAlike("auth_scheme_doc", fixed("Authorization: <type> <credentials>")),
    LookAlike("cookie_no_secret", fixed("Set-Cookie: theme=dark; Path=/; Max-Age=31536000")),
    LookAlike("lang_cookie", fixed("Cookie: lang=en-US; tz=Europe/Paris")),
    LookAlike(
        "mixed_code",
        fixed("for i, tok in enumerate(tokens):\n    if tok.kind == 'KEY': keys.append(tok)"),
    ),
    LookAlike(
        "wandb_run",
        shaped("wandb: Syncing run {a}-{b}-{c}", a=(LOWER, 6), b=(LOWER, 5), c=(DIGITS, 2)),
    ),
    LookAlike("hex_address", shaped("segfault at 0x{a} ip 0x{b}", a=(HEX, 12), b=(HEX, 12))),
    LookAlike("mongo_object_id", shaped('{{"_id": ObjectId("{a}")}}', a=(HEX, 24))),
    LookAlike(
        "base58_hash",
        shaped(
            "ipfs://Qm{a}", a=("123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz", 44)
        ),
    ),
]


def build() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rng = random.Random(SEED)
    secrets: list[dict[str, Any]] = []
    for fmt in FORMATS:
        for placement in PLACEMENTS:
            text, values = fmt.make(rng)
            secrets.append(
                {
                    "id": f"{fmt.name}/{placement}",
                    "format": fmt.name,
                    "placement": placement,
                    "text": text,
                    "secrets": values,
                }
            )
    lookalikes: list[dict[str, Any]] = []
    for look in LOOKALIKES:
        for placement in PLACEMENTS:
            text = look.make(rng)
            lookalikes.append(
                {
                    "id": f"{look.name}/{placement}",
                    "kind": look.name,
                    "placement": placement,
                    "text": text,
                }
            )
    return secrets, lookalikes


def main() -> None:
    secrets, lookalikes = build()
    note = (
        f"Generated by tests/data/secrets/generate.py (seed {SEED}); every credential is "
        "random data in a public format's shape, none is real."
    )
    for name, cases in (("secrets.jsonl", secrets), ("lookalikes.jsonl", lookalikes)):
        lines = [json.dumps({"note": note})] + [json.dumps(case) for case in cases]
        (HERE / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{len(FORMATS)} formats x {len(PLACEMENTS)} placements = {len(secrets)} secret cases")
    print(f"{len(LOOKALIKES)} look-alikes x {len(PLACEMENTS)} placements = {len(lookalikes)} cases")


if __name__ == "__main__":
    main()
