"""A summary's claims checked against its session (`digest.claims`, through `digest.verdict.judge`):
the technologies it lists or names, the code and messages it quotes."""

from __future__ import annotations

import pytest

from digest.claims import check
from digest.turns import compose_document
from digest.verdict import judge
from resources.store.migrations import MIGRATIONS, judge_summaries_again

NAVBAR = [
    compose_document(
        "Oprav padding navbaru v resources/css/app.css, je moc velký na mobilu",
        "",
        "[tool Edit] resources/css/app.css\n.navbar { padding: 0.5rem 1rem; }\nHotovo, padding je menší.",
    )
]
SUMMARY = "The .navbar padding in resources/css/app.css is now 0.5rem 1rem: smaller, as asked (Hotovo)."


def test_a_summary_whose_listed_technologies_the_session_never_names_is_fabricated():
    verdict = judge(NAVBAR, "Smaller navbar padding", SUMMARY, technologies=["Laravel", "MongoDB"])
    assert verdict.label == "fabricated"
    assert verdict.evidence["unfounded_claims"] == ["technology: Laravel", "technology: MongoDB"]
    # The same summary with what the session shows is ok: CSS by its file, the name as the model wrote it.
    assert judge(NAVBAR, "Smaller navbar padding", SUMMARY, technologies=["CSS"]).label == "ok"
    assert judge(NAVBAR, "Smaller navbar padding", SUMMARY).label == "ok"


def test_invented_technology_names_are_not_founded_by_the_words_inside_them():
    verdict = judge(NAVBAR, "Smaller navbar padding", SUMMARY, technologies=["newexchicken_1987", "john-doe-1786"])
    assert verdict.label == "fabricated"
    # One unfounded beside what the summary names that the session has is tolerated.
    assert judge(NAVBAR, "Smaller navbar padding", SUMMARY, technologies=["CSS", "Sass"]).label == "ok"


@pytest.mark.parametrize(
    ("listed", "session", "founded"),
    [
        ("Python", "ran pytest -q in tests/", True),  # implied by its tool
        ("Node.js", "npm run build → exit 0", True),
        ("TypeScript", "edited src/app.tsx", True),
        ("tailwind-css-2.0.2.0-0.0.0.0", "added tailwindcss to the config", True),  # the version dropped
        ("Tailwind CSS", "npm i -D tailwindcss", True),  # spaces dropped
        ("tailwind-css-2.0.2.0-0.0.0.0", "fixed the navbar padding", False),
        ("Django", "edited app.py with flask routes", False),
        ("GitHub", "fixed the navbar padding", True),  # any session may be said to involve it
        ("Rust", "edited main.py", False),
    ],
)
def test_a_listed_technology_is_founded_by_its_name_or_what_implies_it(listed, session, founded):
    claims = check(session, "t", "s", [listed])
    assert (claims.founded if founded else claims.unfounded) == [f"technology: {listed}"]


def test_quoted_commands_and_messages_must_be_in_the_turns():
    session = (
        '$ npm run build\nnpm error Missing script: "lint"\n' + "built the site bundle for the landing page\n" * 20
    )
    claims = check(
        session, "Build", 'Ran `npm run build`, then `npm run deploy`; it said "the deploy finished without errors".'
    )
    assert claims.founded == ["quoted code: npm run build"]
    assert claims.unfounded == ["quoted code: npm run deploy", "quoted: the deploy finished without errors"]
    assert judge([session], "Build", 'Ran `npm run deploy`; it said "the deploy finished without errors".').label == (
        "fabricated"
    )


def test_product_names_in_prose_are_claims_but_plain_words_are_not():
    claims = check("fixed the navbar padding", "t", "Used MongoDB and Laravel; the layout will react to the screen.")
    assert claims.unfounded == ["technology: MongoDB", "technology: Laravel"]
    assert claims.founded == []


# The migration that judged every summary again once the claims were checked: the last to do so.
CLAIMS_MIGRATION = max(v for v, steps in MIGRATIONS.items() if judge_summaries_again in steps)


@pytest.mark.integration  # an older store migrated in place
def test_the_migration_after_the_claims_check_judges_every_summary_again(store, tmp_path):
    import dataclasses

    from digest.ingest import ingest_paths
    from tests.test_card import TURNS, accounts, plain_session, summary

    ingest_paths([plain_session(tmp_path / "s.jsonl", "s1", TURNS)], store)
    (revision,) = [s["input_revision"] for s in store.sessions.session_rows(["s1"])]
    made = summary(
        "s1", revision, "Fix parse_week", "parse_week in dates/parser.py returns ISO week 53 now.", "qwen3:4b"
    )
    invented = dataclasses.replace(made, output=made.output.model_copy(update={"technologies": ["Laravel", "MongoDB"]}))
    assert store.summaries.write_summary(invented).verdict.label == "fabricated"  # judged so when written
    with store.file.transaction() as con:  # as judged before the claims were checked
        con.execute("UPDATE session_summaries SET verdict = 'ok'")
        con.execute("UPDATE schema_meta SET version = ?", [CLAIMS_MIGRATION - 1])
    store.migrate()
    assert accounts(store)[0][:2] == ("s1", "card")
    with store.file.connect() as con:
        verdict, evidence = con.execute("SELECT verdict, verdict_evidence FROM session_summaries").fetchone()
    assert verdict == "fabricated" and "technology: Laravel" in evidence
