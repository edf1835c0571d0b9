"""Redact secrets from every text that leaves the tracker.

An agent's history routinely holds credentials: a ``cat .env``, a ``curl -u``, a stack
trace printing a connection URL, a tool call whose JSON arguments carry a token. The judge
needs to see that the agent is stuck, never the secret, and neither do logs, telemetry or a
verdict's texts; so every secret-looking span is replaced by a placeholder that still tells
a reader what was there: ``[REDACTED:<kind>]``, or, from a keyed redactor
(`Redactor.keyed`, one per tracker), ``[REDACTED:<kind>:<hash>]`` with a short keyed hash
of the secret, so equal secrets read as equal and different ones as different.

The rules read the text as its reader would see it. A tool call's arguments and many tool
results are JSON, where a line break is the two characters ``\n``, so a token at the start
of a line follows an ``n`` and no boundary; a terminal colours a token with escape codes
that stand between it and its boundary too, and folds a token wider than itself onto the
next line. So the rules run on the text as written and on views of it with one, two and
three levels of JSON string escapes decoded and colour codes (raw or escaped as
``\u001b``) dropped (`_View`), and on the last of them with folded lines joined again
(`_folds`); every span found in a view is mapped back to the original, widened to whole
escapes, so a JSON text stays valid JSON with its formatting untouched. Each view is one
linear pass.

Two families of rules find the spans; all run on the original text and its views, their
spans are merged (overlaps become one marker, named by the rule listed first), and only
then replaced, so no rule ever reads another's marker:

**Formats with a shape of their own** (``secret_rules.json``, beside this module): provider
tokens recognised by prefix, alphabet and length: ``anthropic_key``, ``openai_key``,
``google_api_key``, ``google_oauth_token``, ``aws_access_key_id``, ``aws_session_token``,
``github_token``, ``gitlab_token``, ``slack_token``, ``slack_webhook``, ``discord_webhook``,
``teams_webhook``, ``sendgrid_key``, ``npm_token``, ``pypi_token``, ``rubygems_token``,
``stripe_key``, ``stripe_webhook_secret``, ``vault_token``, ``jwt``, ``grafana_token``,
``azure_storage_key``, ``azure_client_secret``, ``huggingface_token``, ``groq_key``,
``xai_key``, ``perplexity_key``, ``twilio_key``, ``mailchimp_key``, ``mailgun_key``,
``sendinblue_key``, ``shopify_token``, ``telegram_bot_token``, ``digitalocean_token``,
``databricks_token``, ``linear_key``, ``doppler_token``, ``age_secret_key``,
``square_token``, ``facebook_token``, ``atlassian_token``, ``supabase_token``,
``newrelic_key``, ``postman_key``, ``pulumi_token``, ``sentry_token``, ``heroku_key``,
``onepassword_token``, ``artifactory_key``, ``dynatrace_token``, ``easypost_key``,
``flutterwave_key``, ``frameio_token``, ``notion_token``, ``planetscale_token``,
``prefect_token``, ``readme_token``, ``scalingo_token``, ``shippo_token``,
``duffel_token``, ``infracost_token``, ``cloudflare_origin_ca_key``, ``clojars_token``,
``openshift_token``, ``replicate_token``, ``figma_token``, ``flyio_token``,
``terraform_token``, ``docker_hub_token``, ``tailscale_key``, ``langsmith_key``,
``pinecone_key``, ``airtable_token``, ``contentful_token``, ``mapbox_token``,
``dropbox_token``, ``braintree_token``, ``resend_key``, ``netlify_token``. Most follow
gitleaks' rule set (MIT; provenance in the data file), re-expressed for Python; the rest
are ours, each from the prefix and shape its provider documents. A token must stand
alone, not inside a longer token such as base64 image data.

**Secrets known by their context** (here, because each needs a few lines of judgement):

``private_key``
    A PEM block from ``-----BEGIN ... PRIVATE KEY-----`` to its END line, across real or
    JSON-escaped newlines; a block cut off before its END line is hidden up to the last
    base64 character.
``url_password``
    The password in ``scheme://user:password@host``; user and host are kept.
``authorization``
    The credential after ``Authorization:``, header or JSON style, behind any scheme word
    (Bearer, Basic, SSWS, OAuth, Negotiate, a vendor's own) or none.
``bearer_token``
    ``Bearer <token>`` anywhere else, when the token looks machine-made.
``aws_secret_key``
    The 40-character value of ``aws_secret_access_key``.
``cookie``
    In a ``Cookie:`` or ``Set-Cookie:`` header, the value of a cookie named for a session,
    token or login (``sessionid``, ``sid``, ``auth``...), or any random-looking value of 16
    characters or more; ``theme=dark`` and the attributes (``Path``, ``Expires``) stay.
``command_password``
    Credentials on a command line: ``curl -u user:pass`` (and ``--user``), ``mysql -pPASS``,
    ``docker login -p PASS``, ``sshpass -p PASS``, ``twine -p PASS``, ``htpasswd -b``,
    ``skopeo --creds user:pass``, a ``.netrc`` line, and ``--password PASS`` /
    ``--token TOKEN`` (any flag that names a secret) separated by a space.
``password`` / ``secret``
    ``KEY=value``, ``KEY: value``, ``"key": "value"`` (env files, YAML, JSON, query strings,
    headers such as ``X-API-Key:``, also with JSON-escaped quotes) where the key names a
    secret. A pair whose key names nothing secret is looked into, so the secret in
    ``{"cmd": "DB_PASSWORD=hunter2hunter2"}`` is still found. Keys are split into words
    (``DB_PASSWORD``, ``dbPassword``, ``db.password`` -> db, password) and:

    * a key with a password word (any word containing password, passwd or passphrase,
      ``PGPASSWORD`` included; pwd; pass as the last word) takes a value of 4 or more
      characters -> ``password``;
    * a key with a secret word (secret, token, apikey, credential(s), authorization,
      privatekey, accesskey, secretkey, signature; auth or pat as the last word), or ending
      in ``key`` after api/access/private/secret/signing/encryption/master/client/service/
      auth/session/app/license/webhook, takes a value of 8 or more characters that is not
      purely numeric -> ``secret``;
    * any other key ending in ``key`` (``SENTRY_KEY``) needs a value that looks random: 8 or
      more characters with a letter and a digit;
    * never a key ending in a word that describes the secret instead of holding it
      (``password_hint``, ``token_count``, ``max_tokens``, ``PASSWORD_HASHER``,
      ``api_key_id``, ``key_path``...), nor a key whose word before ``key`` says it is not
      secret (``public_key``, ``primary_key``, ``sort_key``, ``cache_key``...);
    * never a placeholder value: ``$VAR``, ``${VAR}``, ``{{ var }}``, ``<your-key>``, ``%s``,
      ``null``/``none``/``true``/``false``, ``changeme``, only ``*``, ``x`` or ``.``; nor,
      outside env files, code: ``os.environ[...]``, ``get_password()``, ``settings.api_key``,
      a type annotation (``api_key: SecretStr = ...``).

    In an env-style line (``UPPER_KEY=value``, no spaces) the value runs to whitespace or a
    quote, so a Django key full of punctuation is hidden whole; elsewhere an unquoted value
    also ends at one of ``, ; & ( ) [ ] { }``.

``private_key`` (JWK)
    A JSON Web Key's private members (``d``, ``p``, ``q``, ``dp``, ``dq``, ``qi``, a
    symmetric key's ``k``) in a text that holds ``"kty"``; ``n``, ``e``, ``x``, ``y`` stay.
``aws_secret_key`` (prompt)
    The answer to ``aws configure``'s ``AWS Secret Access Key [None]:``.

``clipped_secret``
    What a clip left of a credential: a known prefix (``ghp_``, ``sk-ant-``, ``AKIA``...)
    or a URL's password, cut by an ellipsis (the detectors' summaries quote a call that
    way), too short for its full rule and too long to show; or any run of 12 or more token
    characters cut by the ellipsis that looks machine-made (`_secret_like`).

``private_key`` (other envelopes)
    An SSH2 key (``---- BEGIN SSH2 ENCRYPTED PRIVATE KEY ----`` to its END line), a PuTTY
    key's private lines and MAC (``Private-Lines: N``, the lines, ``Private-MAC:``; the
    public lines stay; where a clip took the header, the lines left between the clip and
    the MAC), and a PEM private key that is itself base64 (kubeconfig's
    ``client-key-data: LS0tLS1CRUdJTi...``, decoded far enough to see ``PRIVATE KEY``; a
    certificate's ``client-certificate-data`` stays), also wrapped over lines.

``opaque_token``
    A token of no known format where its place says credential, hidden when it also looks
    machine-made: at least 20 characters (12 where the context names a secret), letters
    and digits, character classes alternating as random ones do, and Shannon entropy near
    the most its length and alphabet allow (`_secret_like`; the way gitleaks and
    detect-secrets pair a keyword with an entropy threshold, with the context first). The
    places: a URL's user part with no password (``https://<token>@github.com``); a URL's
    path segment (``/hooks/catch/<token>``; any token after a segment naming a secret,
    ``/with/key/<token>``); a name that says secret whose value is not beside it but on
    the next lines or inside a nested structure (``client_secret:`` then an indented block,
    ``{"api_key": {"value": ...}}``). Never where no context names or allows one, and never
    a hex digest, a UUID or base64 file data (PNG, JPEG, PDF...) outside a named context.

**A name and its value apart** (reported as ``password`` or ``secret`` by the same word
test as an assignment's key):

* a name field and the value field after it, within a short window and before the next
  name field: a Kubernetes env list (``- name: DB_PASSWORD`` / ``value: ...``, also as
  JSON), AWS SSM (``"Name": "/prod/db/password"``, ``"Value": ...``), CloudFormation's
  ``ParameterKey``/``ParameterValue``, ``<add key="..." value="..."/>``;
* an XML element named for a secret: ``<password>``, ``<secret>``, ``<apiKey>``,
  ``<token>``; ``<maxTokens>`` and ``<traceId>`` stay;
* a Java system property: ``-Dspring.datasource.password=...``;
* SQL: ``PASSWORD '...'`` (quoted only: the bare word is prose), ``IDENTIFIED [WITH
  plugin] BY ...``; psql's ``:'variable'`` stays;
* Oracle's ``user/password@connect`` after ``sqlplus`` (and its kin) or ``connect``; never
  elsewhere, where ``actions/checkout@v4`` has the same shape;
* a ``.pgpass`` line ``host:port:database:user:password`` whose host reads as one and
  whose password has a digit or a sign, so log fields and MAC addresses stay;
* a CSV whose header names a secret column (AWS's ``credentials.csv``): that column of
  the rows below it, up to 50 rows of the same width; flattened onto one line (a verdict's
  summary joins lines with blanks), every credential-looking field after the header.

Placeholders are never secrets: ``$VAR``, ``<YOUR_TOKEN>``, ``your-api-key-here``, and
AWS's documented example keys (``AKIAIOSFODNN7EXAMPLE``, ``...EXAMPLEKEY``); nor are masks
(``********``) or empty values. ``changeme`` counts as a placeholder: it is a template's
default, known to everyone, so hiding it protects nothing and would hide from the judge
that the template was never filled in.

Left alone on purpose: hex digests (git SHAs, sha256), UUIDs (unless a key names them a
secret), base64 data, public keys and certificates, numbers, and words that merely mention
"password" or "token".

Every pattern is linear in the length of its input: bounded repeats, no quantified group
that holds another quantifier, and no rule rescans more than a bounded window (the tests
time each on megabyte inputs built to make backtracking engines stall).
"""

from __future__ import annotations

from judge.llm.redaction._engine import Redactor, default_redactor, redact, redactor_for
from judge.llm.redaction._names import CUSTOM_KIND, KEYED_MARKER, MARKER, PLACEHOLDER_HEX
from judge.llm.redaction._rules import BUILTIN_KINDS

__all__ = [
    "BUILTIN_KINDS",
    "CUSTOM_KIND",
    "KEYED_MARKER",
    "MARKER",
    "PLACEHOLDER_HEX",
    "Redactor",
    "default_redactor",
    "redact",
    "redactor_for",
]
