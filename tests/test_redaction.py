"""Secrets redacted at ingest (`digest.redact`, issue 35): each kind, the ordinary-code sample left
alone, the counts in the ingest's report and `status`, the setting that turns it off, and
migration 13 on a store that held them before."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import duckdb
import pytest

from digest.archive_read import validate_bundle
from digest.ingest import ingest_paths
from digest.redact import PATTERNS, redact, redact_fields
from digest.turns import compose_document
from resources.store import DigestStore
from resources.store.migrations import MIGRATIONS, redact_stored

LABELLED = Path(__file__).parent / "fixtures" / "secrets" / "labelled.jsonl"
CASES = [json.loads(line) for line in LABELLED.read_text(encoding="utf-8").splitlines()]

GH = "ghp_" + "a1B2c3D4e5" * 3 + "f6G7h8"
TG = "7049615528:AAowWCLdCobmuMWZPTjRKuoimIOnLeSXm98"  # a Telegram bot's id and its 35-character secret
KINDS = {
    "aws-access-key": ("id AKIAIOSFODNN7EXAMPL3 used", "AKIAIOSFODNN7EXAMPL3"),
    "aws-secret-key": ("aws_secret_access_key=" + "wJalrXUtnFEMI/K7MDENG/bPxRfiCY" + "EXAMPLE123", "wJalrXUtnFEMI"),
    "github-token": (f"token {GH}", GH),
    "gitlab-token": ("glpat-abcdefghij0123456789", "glpat-abcdefghij0123456789"),
    "slack-token": ("xoxb-1234567890-abcdefghijkl", "xoxb-1234567890"),
    "anthropic-key": ("sk-ant-api03-" + "x" * 40, "sk-ant-api03"),
    "openai-key": ("sk-proj-" + "Ab1" * 10, "sk-proj-"),
    "google-api-key": ("AIza" + "B" * 35, "AIza"),
    "stripe-key": ("sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc", "sk_live_"),
    "huggingface-token": ("hf_" + "k" * 34, "hf_k"),
    "npm-token": ("npm_" + "n" * 36, "npm_n"),
    "jwt": ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.abcdefghijklmnop", "eyJhbGci"),
    "private-key": ("-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBkg4LVWM9nuwNSk3yByxZpYRTBnVJk5\n-----END EC PRIVATE KEY-----",
                    "MHcCAQEE"),
    "url-password": ("mysql://root:Tr0ub4dor@db:3306/app", "Tr0ub4dor"),
    "cli-password": ("curl -u admin:Tr0ub4dor3 https://ci", "Tr0ub4dor3"),
    "connection-string": ("Server=db;User Id=sa;Password=Tr0ub4dor5;", "Tr0ub4dor5"),
    "auth-header": ("Authorization: Bearer abcdefghijklmnopqrstuv", "abcdefghijklmnopqrstuv"),
    "secret-header": ("curl -H 'X-Api-Key: Zq8vN3mK1pL7wX' https://api", "Zq8vN3mK1pL7wX"),
    "docker-login-password": ("docker login -u ci -p Tr0ub4dor7 ghcr.io", "Tr0ub4dor7"),
    "netrc-password": ("machine api.acme.io login ada password Tr0ub4dor9", "Tr0ub4dor9"),
    "inline-env-secret": ("PGPASSWORD=Tr0ub4dor8 psql -h db", "Tr0ub4dor8"),
    "env-secret": ("DB_PASSWORD=hunter2hunter2", "hunter2hunter2"),
    "assigned-secret": ('{"client_secret": "Zq8vN3mK1pL7"}', "Zq8vN3mK1pL7"),
    "google-oauth-token": ("ya29.a0AfB_byNHi85OlXL5etijOnVd", "ya29.a0AfB"),
    "sendgrid-key": ("SG." + "E2cwcN87jetSFYWxMsol1m" + "." + "Bh" * 21 + "v", "SG.E2cwcN"),
    "slack-webhook": ("https://hooks.slack.com/services/T04UL3KQ7/B06F1N2RJ4M/X7VGtHFgJLZGYW4G6rTH", "X7VGtHFg"),
    "azure-sas-signature": ("https://a.blob.core.windows.net/c/f?sv=2022-11-02&sig=FaMwHBb37fNgntGrzz8q%3D", "FaMwHBb3"),
    "pgpass-password": ("db.internal:5432:app:app_user:4Ia6EzL2cwkK", "4Ia6EzL2cwkK"),
    "npmrc-token": ("//npm.acme.io/:_authToken=fSC7GMKYPB2552Inpn8iu6X", "fSC7GMKYPB"),
    "telegram-bot-token": (f"curl https://api.telegram.org/bot{TG}/getMe", TG.split(":")[1]),
    "docker-auth": ('{"auths": {"https://index.docker.io/v1/": {"auth": "dXNlcjpwYXNzd29yZA=="}}}', "dXNlcjpwYXNzd29yZA"),
}  # fmt: skip


def test_every_pattern_has_a_case_here_and_its_kind_is_in_the_docs():
    assert {p.kind for p in PATTERNS} == set(KINDS)
    docs = (Path(__file__).parents[1] / "docs" / "ingest.md").read_text(encoding="utf-8")
    assert [kind for kind in KINDS if f"`{kind}`" not in docs] == []


def test_every_pattern_has_a_hint_that_is_not_in_every_text():
    assert [p.kind for p in PATTERNS if not all(p.hints)] == []


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_kind_is_replaced_by_its_mark_and_the_text_around_it_is_kept(kind):
    text, secret = KINDS[kind]
    counts = Counter()
    out = redact(f"before\n{text}\nafter", counts)
    assert secret not in out
    assert f"[REDACTED:{kind}]" in out
    assert out.startswith("before\n") and out.endswith("\nafter")
    assert counts == {kind: 1}
    again = Counter()
    assert redact(out, again) == out and not again  # a redacted text is redacted again unchanged, uncounted


# Held-out set 1 was written after the patterns and never tuned against: the bench reports the
# secrets it misses (BENCHMARKS.md, "Redaction"). Set 2 has been tuned on since (docs/ingest.md).
# The ordinary text of every set must come through.
@pytest.mark.parametrize("case", [c for c in CASES if c["secrets"] and c.get("heldout") != 1], ids=lambda c: c["where"])
def test_the_labelled_secrets_are_all_taken_out(case):
    out = redact(case["text"])
    assert not [s for s in case["secrets"] if s in out]
    assert redact(out) == out


@pytest.mark.parametrize("case", [c for c in CASES if not c["secrets"]], ids=lambda c: c["where"])
def test_ordinary_code_is_left_alone(case):
    assert redact(case["text"]) == case["text"]


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("./deploy --db-password 'Tr0ub4dor3x' --yes", "Tr0ub4dor3x"),
        ('app --passwd="Tr0ub4dor3x"', "Tr0ub4dor3x"),
        ("docker exec db mysqldump -uroot -p'Tr0ub4dor3x' shop", "Tr0ub4dor3x"),
        ("mariadb -h db -u app -pTr0ub4dor3x", "Tr0ub4dor3x"),
        ("mongodump --host db -u admin -p Tr0ub4dor3x", "Tr0ub4dor3x"),
        ("redis-cli -a 'Tr0ub4dor3x' ping", "Tr0ub4dor3x"),
        ("sshpass -pTr0ub4dor3x scp a b:", "Tr0ub4dor3x"),
        ("openssl rsa -in k.pem -passin 'pass:Tr0ub4dor3x'", "Tr0ub4dor3x"),
        ("Endpoint=sb://x.servicebus.windows.net/;SharedAccessKey=Tr0ub4dor3x=;", "Tr0ub4dor3x"),
        ("jdbc:mysql://db/app?user=app&password=Tr0ub4dor3x", "Tr0ub4dor3x"),
        ("    environment:\n      - DB_PASSWORD=Tr0ub4dor3x", "Tr0ub4dor3x"),
        ("*:*:*:postgres:Tr0ub4dor3x", "Tr0ub4dor3x"),
    ],
)
def test_a_password_given_to_a_command_or_a_config_line_is_taken_out(text, secret):
    out = redact(text)
    assert secret not in out and "[REDACTED:" in out
    assert redact(out) == out


@pytest.mark.parametrize(
    "text",
    [
        "myapp --password-file /run/secrets/db --password-stdin",
        "--password TEXT  The database password.",  # a help text's metavariable
        "pass it with the --password option or `--password TEXT`",
        'app --password "$DB_PASS" --token-password $(cat /run/pw)',
        "app --password <password> --password=*** --password ...",
        "mysql -u root -p shop",  # prompts; `shop` is the database
        "mysql -u root -p, then type it",
        "mysql -h db -P3306 -u app --protocol=tcp -p",
        "redis-cli -h cache -p 6379 -n 2 ping",
        "mongosh -u admin -p --authenticationDatabase admin",
        "sshpass -f ~/.pw ssh host; sshpass -e ssh host",
        "openssl pkcs12 -passout env:P12_PASS -passin file:/run/pw",
        "10:30:00:12:frames",  # no host at the line's start
        "hostname:port:database:username:password",
        "//registry.npmjs.org/:_authToken=${NPM_TOKEN}",
        "https://x.blob.core.windows.net/c?comp=list&signature=none",
    ],
)
def test_a_flag_or_line_without_a_literal_secret_is_left_alone(text):
    assert redact(text) == text


@pytest.mark.parametrize(
    "text",
    [
        # Seen taken on real transcripts: a title's words as a Basic header's credentials, a header's
        # name as a key's value, a sentence's period after a placeholder, a sentinel of code.
        "## Basic Python-to-TypeScript type mappings",
        "  apiKeyHeader: 'Authorization',",
        "Set RENDER_AUTH_SECRET_ON_BUILD=false.",
        "    _pydantic_secret_str = PydanticUndefined",
        "API_KEY_HEADER=X-API-Key",
        "Bearer TokenAuthentication-Strategy",
        # Placeholders and the defaults products ship with.
        "SECRET_KEY=change-me-in-production",
        "DB_PASSWORD=replace-me",
        "POSTGRES_PASSWORD=postgres",
        "KEYSTORE_PASSWORD=changeit",
        # A setting about a secret, not the secret: its algorithm, header, scope, store.
        "JWT_SECRET_ALGORITHM=HS256",
        "AUTH_TOKEN_HEADER = 'X-Auth-Token'",
        "GITHUB_TOKEN_SCOPE=repo",
        "TOKEN_STORE=redis",
        "secret_key = settings.SECRET_KEY",
        # A placeholder in a JSON-escaped text: the value stops at the escaped line end.
        "Run it with:\\n```bash\\nexport OPENAI_API_KEY=your-key\\nuv run python main.py\\n```",
        "PASSWORD=example\\tUSER=admin",
    ],
)
def test_words_placeholders_and_settings_that_look_like_secrets_are_kept(text):
    assert redact(text) == text


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("end", ["\\n", "\\r\\n", "\\t"])
def test_a_secret_before_an_escaped_line_end_is_taken_and_the_next_line_kept(kind, end):
    """In a JSON-escaped text a line ends at `\\n` as two characters: no value runs past it."""
    text, secret = KINDS[kind]
    out = redact(f"{text}{end}uv run main.py")
    assert secret not in out and f"[REDACTED:{kind}]" in out
    assert out.endswith(f"{end}uv run main.py")


def test_an_escaped_line_starts_a_key_value_line():
    out = redact('{"stdout": "HOME=/root\\nDB_PASSWORD=Tr0ub4dor3x\\nexport API_TOKEN=your-token\\nuv run"}')
    assert out == '{"stdout": "HOME=/root\\nDB_PASSWORD=[REDACTED:env-secret]\\nexport API_TOKEN=your-token\\nuv run"}'


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        (f"requests.get(f'https://api.telegram.org/bot{TG}/sendMessage', json=body)", "/sendMessage"),
        (f"GET https://api.telegram.org/file/bot{TG}/photos/file_1.jpg", "/photos/file_1.jpg"),
        (f"TELEGRAM token is {TG} (from BotFather)", "(from BotFather)"),
    ],
)
def test_a_telegram_bot_token_is_taken_out(text, kept):
    out = redact(text)
    assert TG.split(":")[1][:8] not in out and "[REDACTED:telegram-bot-token]" in out and kept in out


@pytest.mark.parametrize(
    "text",
    [
        '{\n\t"auths": {\n\t\t"ghcr.io": {\n\t\t\t"auth": "Y2ktYm90OlpxOHZOM21LMXBMN3dYcjI="\n\t\t}\n\t}\n}',
        '{"stdout": "{\\"auths\\": {\\"gcr.io\\": {\\"auth\\": \\"Y2ktYm90OlpxOHZOM21LMXBMN3dYcjI=\\"}}}"}',
    ],
)
def test_a_docker_config_auth_is_taken_out(text):
    out = redact(text)
    assert "Y2ktYm90" not in out and "[REDACTED:docker-auth]" in out


@pytest.mark.parametrize(
    "text",
    [
        '{"auths": {"ghcr.io": {"auth": ""}}}',
        '{"auth": "required", "cache": "none"}',
        '{"auth": "oauth2"}',  # no `user:password` inside
        "Authorization: Basic <base64(username:password)>",
    ],
)
def test_an_auth_value_that_is_not_base64_credentials_is_kept(text):
    assert redact(text) == text


def test_only_the_password_of_a_url_goes_up_to_its_last_at_sign():
    assert redact("postgres://app:p@ss:w0rd@db.internal:5432/app") == (
        "postgres://app:[REDACTED:url-password]@db.internal:5432/app"
    )


FIELDS = ("prompt", "thought", "response", "document")


def test_a_composed_document_is_composed_again_from_its_redacted_fields():
    row = {"prompt": "DB_PASSWORD=hunter2hunter2", "thought": "", "response": "ok"}
    row["document"] = compose_document(row["prompt"], "", "ok")
    out, counts = redact_fields(row, FIELDS)
    assert counts == {"env-secret": 1}
    # In the document the line starts after `User Prompt: `: found in the prompt, it is gone from both.
    assert out["document"] == compose_document("DB_PASSWORD=[REDACTED:env-secret]", "", "ok")
    assert row["prompt"] == "DB_PASSWORD=hunter2hunter2"  # the row given is not changed


def test_a_secret_in_an_exports_own_document_and_its_fields_is_counted_once():
    row = {"prompt": f"use {GH}", "thought": "", "response": "ok", "document": f"Asked to use {GH}, then {GH}"}
    out, counts = redact_fields(row, FIELDS)
    assert counts == {"github-token": 2}
    assert GH not in out["prompt"] and GH not in out["document"]


def _plain_log(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def _turn(i: int, session: str, prompt: str, **extra) -> dict:
    return {"id": f"{session}-{i}", "session_id": session, "timestamp": 1_760_000_000_000 + i * 1000,
            "prompt": prompt, "response": "done", **extra}  # fmt: skip


def test_ingest_stores_the_redacted_text_counts_by_file_and_session_and_leaves_the_file_alone(store, tmp_path):
    log = _plain_log(
        tmp_path / "run.jsonl",
        [
            _turn(1, "s1", f"push with {GH}", mini_summary=f"pushed with {GH}"),
            _turn(2, "s1", "cat .env\nDB_PASSWORD=hunter2hunter2\nAPI_KEY=${API_KEY}"),
            _turn(3, "s2", "sha 3f786850e387550fdab836ed7e6dc881de23001b, nothing secret"),
        ],
    )
    raw = log.read_bytes()

    report = ingest_paths([log], store)

    assert log.read_bytes() == raw
    [file] = report.files
    # The mini summary's token counts too: every text that is stored passes the same redaction.
    assert file.redactions == {"github-token": 2, "env-secret": 1}
    assert file.redacted_sessions == {"s1": 2}
    with store.file.connect() as con:
        turns = dict(con.execute("SELECT id, prompt || document FROM turns").fetchall())
        mini = con.execute("SELECT text FROM mini_summaries").fetchone()[0]
    assert GH not in turns["s1-1"] and "[REDACTED:github-token]" in turns["s1-1"]
    assert "hunter2" not in turns["s1-2"] and "API_KEY=${API_KEY}" in turns["s1-2"]
    assert "3f786850e387550fdab836ed7e6dc881de23001b" in turns["s2-3"]
    assert mini == "pushed with [REDACTED:github-token]"
    assert store.projects.redactions() == {
        "by_kind": {"env-secret": 1, "github-token": 1}, "turns": 2, "sessions": 1,
    }  # fmt: skip
    # Ingested again: the same stored text, the same revision (redaction is stable).
    before = store.sessions.session_rows(["s1"])[0]["input_revision"]
    ingest_paths([log], store)
    assert store.sessions.session_rows(["s1"])[0]["input_revision"] == before


def test_an_archives_turn_keeps_its_counts_adds_those_found_again_and_a_malformed_one_is_its_reject(store, tmp_path):
    """A session-digest archive read as an export: its turns' `redactions` metadata comes with them."""

    def line(turn_id: str, prompt: str, redactions) -> dict:
        meta = {"sessionId": "s1", "timestamp": 1, "prompt": prompt, "response": "ok", "redactions": redactions}
        return {"id": turn_id, "embedding": None, "metadata": meta, "document": compose_document(prompt, "", "ok")}

    bundle = _plain_log(
        tmp_path / "memory-backup-2026-12-01T00-00-00.000Z.jsonl",
        [
            line("t1", "push with [REDACTED:github-token]", '{"github-token": 1}'),
            line("t2", "[REDACTED:github-token] then\nDB_PASSWORD=hunter2hunter2", '{"github-token": 1}'),
            line("t3", "hello", '{"github-token": "one"}'),
        ],
    )
    report = ingest_paths([bundle], store)
    [file] = report.files
    assert file.redactions == {"env-secret": 1}  # what this ingest found
    assert file.rejects == 1
    with store.file.connect() as con:
        counts = dict(con.execute("SELECT id, redactions FROM turns").fetchall())
        [reason] = con.execute("SELECT reason FROM rejects").fetchone()
    assert reason.startswith("wrong-type: metadata.redactions is")
    assert {k: json.loads(v) for k, v in counts.items()} == {
        "t1": {"github-token": 1}, "t2": {"env-secret": 1, "github-token": 1},
    }  # fmt: skip


def test_redaction_off_stores_the_text_as_read(store, tmp_path):
    log = _plain_log(tmp_path / "run.jsonl", [_turn(1, "s1", f"push with {GH}")])
    report = ingest_paths([log], store, redact_secrets=False)
    assert report.redactions == {}
    with store.file.connect() as con:
        assert GH in con.execute("SELECT prompt FROM turns").fetchone()[0]


def _version_12_store(path: Path, tmp_path: Path) -> DigestStore:
    """A store as version 12 left it: secrets in the turns, a mini summary and a current summary,
    no project columns."""
    store = DigestStore(path)
    store.migrate()
    log = _plain_log(
        tmp_path / "old.jsonl",
        [_turn(1, "s1", f"push with {GH}", mini_summary=f"pushed with {GH}"), _turn(2, "s1", "then the tests"),
         _turn(1, "s2", "no secret here")],
    )  # fmt: skip
    ingest_paths([log], store, redact_secrets=False)
    with duckdb.connect(str(path)) as con:
        for table, column in [("turns", "project"), ("turns", "git_branch"), ("turns", "redactions"),
                              ("sessions", "project"), ("sessions", "git_branch"), ("sessions", "source_path")]:  # fmt: skip
            con.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
        con.execute("UPDATE schema_meta SET version = 12")
        _current_summaries(con, f"Pushed with {GH}.")
    return store


def _current_summaries(con: duckdb.DuckDBPyConnection, summary: str) -> None:
    """Each session summarized and digested at its current revision."""
    con.execute(
        """INSERT INTO session_summaries (session_id, summary, title, category, quality, productivity, impact,
           complexity, technologies, source_tier, degraded, raw_canonical, memory_count, mini_summary_count,
           input_revision, model, raw_tokens_estimate, prompt_tokens_estimate, route_reason,
           participating_agents, models, total_tool_calls, tools_used, source_agent_identities, created_at,
           verdict)
           SELECT session_id, ?, 't', 'c', 1, 1, 1, 1, [], 'raw', false, true, turn_count, 0,
                  input_revision, 'm', 1, 1, 'within-cap', [], [], 0, [], [], now(), 'ok'
           FROM sessions""",
        [summary],
    )
    con.execute("INSERT INTO digest_state SELECT session_id, 'digested', 0, NULL, input_revision, now() FROM sessions")


@pytest.mark.integration  # an older store migrated in place
def test_migration_13_redacts_a_stored_store_and_owes_no_summary_for_it(tmp_path, monkeypatch):
    monkeypatch.delenv("DIGEST_REDACT", raising=False)
    path = tmp_path / "old.duckdb"
    store = _version_12_store(path, tmp_path)
    with duckdb.connect(str(path), read_only=True) as con:
        old = dict(con.execute("SELECT session_id, input_revision FROM sessions").fetchall())
    assert store.summaries.pending_summary_keys() == []

    DigestStore(path).migrate()

    with duckdb.connect(str(path), read_only=True) as con:
        prompts = dict(con.execute("SELECT id, prompt || document FROM turns").fetchall())
        counts = con.execute("SELECT redactions FROM turns WHERE id = 's1-1'").fetchone()[0]
        new = dict(con.execute("SELECT session_id, input_revision FROM sessions").fetchall())
        places = con.execute("SELECT session_id, source_path, project FROM sessions ORDER BY 1").fetchall()
        summary = dict(con.execute("SELECT session_id, summary FROM session_summaries").fetchall())
        digested = dict(con.execute("SELECT session_id, revision FROM digest_state").fetchall())
        mini = con.execute("SELECT text FROM mini_summaries").fetchone()[0]
        # The secret was an identifier of its turn: the turn's terms and its session's lose it too.
        terms = con.execute(
            "SELECT unnest(map_keys(terms)) FROM turns UNION ALL SELECT term FROM fidelity_terms"
        ).fetchall()
    assert terms and not [t for (t,) in terms if t.startswith("ghp_")]
    assert GH not in prompts["s1-1"] and "[REDACTED:github-token]" in prompts["s1-1"]
    assert json.loads(counts) == {"github-token": 1}
    # The redacted session's revision moved, with its summary and digest state; the other kept its own.
    assert new["s1"] != old["s1"] and new["s2"] == old["s2"]
    assert digested == new
    assert store.summaries.pending_summary_keys() == []
    assert summary["s1"] == summary["s2"] == "Pushed with [REDACTED:github-token]."
    assert mini == "pushed with [REDACTED:github-token]"
    assert places == [("s1", str(tmp_path / "old.jsonl"), None), ("s2", str(tmp_path / "old.jsonl"), None)]


@pytest.mark.integration  # an older store migrated in place
def test_migration_13_with_redaction_off_leaves_the_text(tmp_path, monkeypatch):
    monkeypatch.setenv("DIGEST_REDACT", "off")
    path = tmp_path / "old.duckdb"
    _version_12_store(path, tmp_path)
    DigestStore(path).migrate()
    with duckdb.connect(str(path), read_only=True) as con:
        assert GH in con.execute("SELECT prompt FROM turns WHERE id = 's1-1'").fetchone()[0]
        assert con.execute("SELECT count(*) FROM sessions WHERE source_path IS NULL").fetchone()[0] == 0


@pytest.mark.integration  # a store migrated in place
def test_the_migration_after_new_kinds_redacts_them_adds_to_the_counts_and_owes_no_summary(tmp_path, monkeypatch):
    """A store redacted by the patterns before the Telegram and Docker kinds: its turns and summaries
    hold them. The migration that runs the redaction again takes them out; a turn's counts keep what
    was found before."""
    monkeypatch.delenv("DIGEST_REDACT", raising=False)
    redacting = max(v for v, steps in MIGRATIONS.items() if redact_stored in steps)
    assert redacting > 13
    path = tmp_path / "store.duckdb"
    store = DigestStore(path)
    store.migrate()
    docker = '{"auths": {"ghcr.io": {"auth": "Y2ktYm90OlpxOHZOM21LMXBMN3dYcjI="}}}'
    log = _plain_log(
        tmp_path / "old.jsonl",
        [_turn(1, "s1", f"[REDACTED:github-token] then curl https://api.telegram.org/bot{TG}/getMe"),
         _turn(2, "s1", f"cat ~/.docker/config.json\n{docker}"), _turn(1, "s2", "no secret here"),
         _turn(3, "s1", "check the bot", response=f"$ curl -s https://api.telegram.org/bot{TG}/getMe\nexit 0")],
    )  # fmt: skip
    ingest_paths([log], store, redact_secrets=False)
    with duckdb.connect(str(path)) as con:
        # The command read from the turn's text is a fact of the turn, and the card lists it.
        assert con.execute("SELECT count(*) FROM turn_facts WHERE value LIKE ?", [f"%{TG}%"]).fetchone()[0] == 1
        con.execute("""UPDATE turns SET redactions = '{"github-token": 1}' WHERE id = 's1-1'""")
        con.execute("UPDATE schema_meta SET version = ?", [redacting - 1])
        _current_summaries(con, f"Called bot{TG}.")
        old = dict(con.execute("SELECT session_id, input_revision FROM sessions").fetchall())

    DigestStore(path).migrate()

    with duckdb.connect(str(path), read_only=True) as con:
        texts = dict(con.execute("SELECT id, prompt || document FROM turns").fetchall())
        counts = dict(con.execute("SELECT id, redactions FROM turns").fetchall())
        new = dict(con.execute("SELECT session_id, input_revision FROM sessions").fetchall())
        summaries = dict(con.execute("SELECT session_id, summary FROM session_summaries").fetchall())
        facts = con.execute("SELECT value, detail FROM turn_facts WHERE turn_id = 's1-3'").fetchall()
        card = con.execute("SELECT text FROM session_cards WHERE session_id = 's1'").fetchone()[0]
    assert facts and TG not in str(facts) and TG not in card
    assert TG not in texts["s1-1"] and "bot[REDACTED:telegram-bot-token]/getMe" in texts["s1-1"]
    assert "Y2ktYm90" not in texts["s1-2"] and '"auth": "[REDACTED:docker-auth]"' in texts["s1-2"]
    assert json.loads(counts["s1-1"]) == {"github-token": 1, "telegram-bot-token": 1}
    assert json.loads(counts["s1-2"]) == {"docker-auth": 1} and counts["s2-1"] is None
    assert new["s1"] != old["s1"] and new["s2"] == old["s2"]
    assert store.summaries.pending_summary_keys() == []
    assert summaries["s1"] == summaries["s2"] == "Called bot[REDACTED:telegram-bot-token]."


@pytest.mark.integration  # a bundle restored into a store
def test_a_restore_of_a_bundle_written_without_redaction_takes_its_secrets_out(tmp_path, monkeypatch):
    """A bundle from a store that did not redact holds the secrets; the store it is restored into
    redacts them, and owes no summary for it."""
    monkeypatch.delenv("DIGEST_REDACT", raising=False)
    plain = DigestStore(tmp_path / "plain.duckdb")
    plain.migrate()
    log = _plain_log(tmp_path / "old.jsonl", [_turn(1, "s1", f"push with {GH}"), _turn(1, "s2", "no secret here")])
    ingest_paths([log], plain, redact_secrets=False)
    with duckdb.connect(str(plain.path)) as con:
        _current_summaries(con, f"Pushed with {GH}.")
    bundle = plain.archive.write_archive(tmp_path / "archives")["path"]

    restored = DigestStore(tmp_path / "restored.duckdb")
    restored.migrate()
    restored.archive.restore_archive(validate_bundle(bundle), "replace")

    with duckdb.connect(str(restored.path), read_only=True) as con:
        text = con.execute("SELECT prompt || document FROM turns WHERE id = 's1-1'").fetchone()[0]
        summaries = dict(con.execute("SELECT session_id, summary FROM session_summaries").fetchall())
        card = con.execute("SELECT text FROM session_cards WHERE session_id = 's1'").fetchone()[0]
    assert GH not in text and "[REDACTED:github-token]" in text
    assert summaries == {"s1": "Pushed with [REDACTED:github-token].", "s2": "Pushed with [REDACTED:github-token]."}
    assert GH not in card
    assert restored.summaries.pending_summary_keys() == []
