"""The search index (resources/store/search.py) on a real DuckDB file, and its tokenizer
(digest/search_text.py): refreshes index only what changed, the ranking rules, bad queries."""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from digest.search_text import query_terms, snippet, terms
from resources.store import DigestStore
from resources.store.search import SearchError
from resources.store.search_index import index_folder
from resources.store.search_indexed import LOG_FILE, IndexedSessions
from tests.conftest import held_copy

T0 = 1_760_000_000_000


def turn(session_id: str, n: int, prompt: str, response: str = "", at: int | None = None) -> dict:
    return {
        "id": f"{session_id}-t{n:03d}", "session_id": session_id, "ts_ms": at if at is not None else T0 + n * 60_000,
        "type": "agent-interaction", "prompt": prompt, "response": response,
        "document": f"User Prompt: {prompt}\nAgent Response: {response}", "document_rebuilt": False,
        "source_file": "f.jsonl", "source_line": n + 1,
    }  # fmt: skip


def summary(session_id: str, title: str, text: str, category: str = "bugfix", tier: str = "raw") -> dict:
    return {
        "session_id": session_id, "memory_count": None, "input_revision": None, "title": title, "summary": text,
        "source_tier": tier, "source_file": "s.jsonl", "category": category, "technologies": ["python"],
        "degraded": tier != "raw",
    }  # fmt: skip


def write(store: DigestStore, rows: list[dict]) -> None:
    store.ingest.write_turns(rows)


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory, migrated_store_file) -> Path:
    """The corpus written once for the module; each test gets a copy (`corpus`)."""
    path = tmp_path_factory.mktemp("corpus") / "digest.duckdb"
    with contextlib.ExitStack() as stack:
        write_corpus(held_copy(stack, migrated_store_file, DigestStore(path), source_of_copies=True))
    return path


@pytest.fixture(scope="module")
def indexed_corpus_file(tmp_path_factory, corpus_file) -> Path:
    """The corpus indexed once for the module: a refresh from nothing commits twice to Tantivy, some
    50 ms of CPU a test."""
    path = tmp_path_factory.mktemp("indexed") / "digest.duckdb"
    with contextlib.ExitStack() as stack:
        held_copy(stack, corpus_file, DigestStore(path), source_of_copies=True).search.refresh()
    return path


@pytest.fixture
def corpus(request, corpus_file, store_slot) -> Iterator[DigestStore]:
    """A copy of the corpus; with a copy of its index beside it, as a refresh left them, for a test
    marked `already_indexed`."""
    indexed = getattr(request, "param", None) == "indexed"
    with contextlib.ExitStack() as stack:
        if not indexed:
            yield store_slot.store(stack, corpus_file)
            return
        source = request.getfixturevalue("indexed_corpus_file")
        store = store_slot.store(stack, source)
        shutil.copytree(index_folder(source), index_folder(store.path))
        yield store


# The tests whose first refresh only builds the index they go on to read or change.
already_indexed = pytest.mark.parametrize("corpus", ["indexed"], indirect=True)


def write_corpus(store: DigestStore) -> None:
    write(
        store,
        [
            turn(
                "ws",
                0,
                "The websocket client keeps reconnecting in a loop",
                "I changed ReconnectLoop in src/net/ws_client.py",
            ),
            turn("ws", 1, "run the tests", "12 passed"),
            turn(
                "orm",
                0,
                "We decided to drop the ORM and write plain SQL",
                "removed sqlalchemy from app/models.py",
                at=T0 + 5,
            ),
            turn("cfg", 0, "Fix the settings loader", "edited src/app/settings.py: DEFAULT_TIMEOUT is 30"),
        ],
    )
    # An imported summary of the session's current turns is adopted as its summary.
    rows = [summary("ws", "Fix websocket reconnect loop", "Stopped the reconnect loop of the websocket client.")]
    rows[0]["memory_count"] = 2
    store.ingest.write_imported_summaries(rows)


def test_tokenizer_finds_code_names_by_their_parts_and_whole():
    assert terms("src/app/settings.py") == ["src/app/settings.py", "src", "app", "settings.py", "settings"]
    assert terms("ReconnectLoop") == ["reconnectloop", "reconnect", "loop"]
    assert terms("the ws_client") == ["ws_client", "ws", "client"]
    assert terms("kebab-case-name") == ["kebab-case-name", "kebab", "case", "name"]
    assert terms("HTTPServer") == ["httpserver", "http", "server"]
    # NFKC folding: full-width letters are plain ones.
    assert terms("Ｒｅｄｉｓ") == ["redis"]
    # A commit hash stays whole; a stop word alone is left out.
    assert terms("commit 3f9a2bc of the") == ["commit", "3f9a2bc"]
    assert query_terms("settings.py settings") == ["settings.py", "settings"]


def test_snippet_marks_the_matched_terms_near_the_densest_run():
    text = "filler " * 100 + "we fixed ReconnectLoop in src/app/settings.py today " + "tail " * 100
    out = snippet(text, query_terms("reconnect settings.py"))
    assert "**ReconnectLoop**" in out and "**src/app/settings.py**" in out
    assert len(out) < 260
    # A text that is not ASCII is searched case-blind by a regex, an ASCII one lower-cased: the same marks.
    for text in ("the RECONNECTLOOP fix in Settings.PY", "die Änderung an RECONNECTLOOP in Settings.PY"):
        marked = snippet(text, query_terms("reconnectloop settings.py"))
        assert "**RECONNECTLOOP**" in marked and "**Settings.PY**" in marked, marked


def test_search_ranks_sessions_and_says_which_document_matched(corpus):
    report = corpus.search.refresh()
    assert (report.sessions_indexed, report.behind) == (3, 0)
    hits = corpus.search.sessions("websocket reconnect loop")
    assert hits[0].session_id == "ws"
    assert hits[0].title == "Fix websocket reconnect loop"
    assert hits[0].matches[0].kind == "summary" and "**reconnect**" in hits[0].matches[0].snippet
    assert hits[0].turn_ids == ["ws-t000"]
    # A file by its tail, and a name by its part.
    assert [h.session_id for h in corpus.search.sessions("settings.py")] == ["cfg"]
    assert [h.session_id for h in corpus.search.sessions("default timeout")] == ["cfg"]
    turns = corpus.search.turns("sqlalchemy")
    assert [(t.session_id, t.turn_id, t.kind) for t in turns] == [("orm", "orm-t000", "turn")]
    assert "**sqlalchemy**" in turns[0].snippet
    assert [h.session_id for h in corpus.search.summaries("websocket")] == ["ws"]
    # A session's account is searched by its card too: the card names what its turns did.
    (orm,) = corpus.search.summaries("sqlalchemy")
    assert orm.session_id == "orm" and [m.kind for m in orm.matches] == ["card"]
    assert "**sqlalchemy**" in orm.matches[0].snippet


@already_indexed
def test_refresh_indexes_only_the_sessions_that_changed(corpus):
    corpus.search.refresh()
    log = corpus.search.folder / LOG_FILE
    lines = len(log.read_text().splitlines())
    assert corpus.search.refresh().sessions_indexed == 0
    assert len(log.read_text().splitlines()) == lines  # nothing changed, nothing written
    write(corpus, [turn("orm", 1, "the migration to raw SQL is done", "dropped the ORM layer entirely")])
    report = corpus.search.refresh()
    assert (report.sessions_indexed, report.behind) == (1, 0)
    written = [json.loads(line) for line in log.read_text().splitlines()[lines:]]
    assert [(e["session"], e["at"] is None) for e in written] == [("orm", True), ("orm", False)]
    assert [t.turn_id for t in corpus.search.turns("migration")] == ["orm-t001"]
    # The replaced session's old documents are gone: the index holds each session's documents once.
    assert [h.session_id for h in corpus.search.sessions("drop orm")] == ["orm"]
    assert corpus.search.reader().documents.searcher().num_docs == corpus.search.status()["documents"]
    assert [t.turn_id for t in corpus.search.turns("migration")] == ["orm-t001"]
    # A mini summary made since is a change of its session.
    corpus.query(
        "INSERT INTO mini_summaries VALUES ('cfg-t000', 'cfg', 'Tuned the loader timeout', 'generated', 'm', now())"
    )
    assert corpus.search.refresh().sessions_indexed == 1
    assert [(t.turn_id, t.kind) for t in corpus.search.turns("tuned")] == [("cfg-t000", "mini")]
    # A session removed from the store leaves the index.
    corpus.query("DELETE FROM turns WHERE session_id = 'cfg'")
    corpus.query("DELETE FROM sessions WHERE session_id = 'cfg'")
    assert corpus.search.refresh().sessions_removed == 1
    assert corpus.search.sessions("settings.py") == []
    status = corpus.search.status()
    assert status["sessions"] == 2 and status["behind"] == 0 and status["documents"] > 0


def crash_after_the_commit(monkeypatch) -> None:
    """The refresh's process dies once its batch is committed to the index, before it records what
    the batch's sessions were indexed at."""

    def die(*args, **kwargs):
        raise KeyboardInterrupt("killed after the commit")

    monkeypatch.setattr(IndexedSessions, "indexed", die)


@already_indexed
def test_a_crash_after_the_commit_leaves_the_batch_to_index_again_never_current(corpus, monkeypatch):
    corpus.search.refresh()
    with monkeypatch.context() as patch:
        crash_after_the_commit(patch)
        write(
            corpus,
            [
                turn("orm", 1, "the migration to raw SQL is done", "dropped the ORM layer entirely"),
                turn("new", 0, "a quetzalcoatl session that the store loses again"),
            ],
        )
        with pytest.raises(KeyboardInterrupt):
            corpus.search.refresh()
    # Committed: a reader sees the batch; but neither session is taken as current.
    assert [h.session_id for h in corpus.search.sessions("quetzalcoatl")] == ["new"]
    assert corpus.search.status()["behind"] == 2
    # The new session leaves the store before the next refresh: that refresh drops it from the index.
    corpus.query("DELETE FROM turns WHERE session_id = 'new'")
    corpus.query("DELETE FROM sessions WHERE session_id = 'new'")
    report = corpus.search.refresh()
    assert (report.sessions_indexed, report.sessions_removed, report.behind) == (1, 1, 0)
    assert corpus.search.sessions("quetzalcoatl") == []
    assert [t.turn_id for t in corpus.search.turns("migration")] == ["orm-t001"]
    assert corpus.search.reader().documents.searcher().num_docs == corpus.search.status()["documents"]


@already_indexed
def test_a_record_line_cut_short_is_dropped_and_its_session_indexed_again(corpus):
    corpus.search.refresh()
    write(corpus, [turn("orm", 1, "the migration to raw SQL is done")])
    assert corpus.search.refresh().sessions_indexed == 1
    log = corpus.search.folder / LOG_FILE
    log.write_bytes(log.read_bytes()[:-20])  # a crash in the middle of the line of orm's new figures
    assert corpus.search.status()["behind"] == 1  # orm is pending again
    assert corpus.search.refresh().sessions_indexed == 1
    entries = [json.loads(line) for line in log.read_text().splitlines()]  # written again whole: every line reads
    assert {e["session"] for e in entries} == {"cfg", "orm", "ws"} and entries[-1]["at"][0] is not None
    assert corpus.search.refresh().sessions_indexed == 0


@already_indexed
def test_an_index_whose_record_is_lost_is_cleared_and_indexed_again(corpus):
    # As an index built before the record moved beside it (migration 22), or one whose record was deleted.
    corpus.search.refresh()
    corpus.query("DELETE FROM turns WHERE session_id = 'cfg'")
    corpus.query("DELETE FROM sessions WHERE session_id = 'cfg'")
    (corpus.search.folder / LOG_FILE).unlink()
    assert corpus.search.status()["behind"] == 2
    report = corpus.search.refresh()
    assert (report.sessions_indexed, report.behind) == (2, 0)
    assert corpus.search.sessions("settings.py") == []  # the session the record no longer named is gone
    assert corpus.search.reader().session_count() == 2


def test_a_refresh_limit_leaves_the_rest_behind(corpus):
    report = corpus.search.refresh(limit=1)
    assert (report.sessions_indexed, report.behind) == (1, 2)
    assert corpus.search.status()["behind"] == 2


def test_a_junk_summary_never_ranks_its_session_but_its_turns_do(corpus):
    corpus.query("UPDATE session_summaries SET verdict = 'fabricated' WHERE session_id = 'ws'")
    corpus.cards.refresh(["ws"])  # as a write of the junk summary does
    corpus.search.refresh()
    # Its account is its card now: found by the card, titled by it, never by the junk summary.
    (by_card,) = corpus.search.summaries("websocket")
    assert [m.kind for m in by_card.matches] == ["card"] and by_card.tier == "facts"
    assert by_card.title.startswith("The websocket client keeps reconnecting")
    # "stopped" is in the summary alone: the junk summary does not find its session.
    assert corpus.search.sessions("stopped") == []
    hits = corpus.search.sessions("websocket")
    assert [h.session_id for h in hits] == ["ws"] and hits[0].matches[0].kind in ("turn", "card")
    assert hits[0].verdict is None and hits[0].tier == "facts"


def test_a_degraded_summary_is_labelled_a_navigation_index(corpus):
    corpus.query("UPDATE session_summaries SET degraded = true, source_tier = 'miniSummary' WHERE session_id = 'ws'")
    corpus.search.refresh()
    hit = corpus.search.sessions("websocket")[0]
    assert hit.navigation_index and hit.tier == "miniSummary"


def test_ties_go_to_the_most_recent_session_then_its_id(store):
    write(
        store,
        [
            turn("b", 0, "flaky cache", at=T0),
            turn("a", 0, "flaky cache", at=T0),
            turn("c", 0, "flaky cache", at=T0 + 1),
        ],
    )
    store.search.refresh()
    assert [h.session_id for h in store.search.sessions("flaky cache")] == ["c", "a", "b"]


def test_filters_by_file_category_and_date(corpus):
    corpus.query(
        "INSERT INTO turn_facts VALUES ('cfg-t000', 'cfg', 'file-edit', 'src/app/settings.py', 'edit'), "
        "('ws-t000', 'ws', 'file-read', 'src/net/ws_client.py', 'read')"
    )
    corpus.search.refresh()  # the index takes the facts in with the sessions' documents
    assert [h.session_id for h in corpus.search.sessions("fix", file="settings.py")] == ["cfg"]
    assert [h.session_id for h in corpus.search.sessions("fix", file="src/app/settings.py")] == ["cfg"]
    assert corpus.search.sessions("fix", file="app/other.py") == []
    assert [h.session_id for h in corpus.search.sessions("fix", category="bugfix")] == ["ws"]
    assert [h.session_id for h in corpus.search.sessions("fix", since_ms=T0 + 60_000)] == ["ws"]


@pytest.mark.parametrize(
    ("query", "kwargs", "message"),
    [
        ("", {}, "the query is empty"),
        ("   ", {}, "the query is empty"),
        ("the of and", {}, "only common words"),
        ("x" * 1001, {}, "at most 1,000"),
        ("cache", {"category": "nonsense"}, "unknown category"),
        ("cache", {"limit": 0}, "positive whole number"),
        ("cache", {"file": " "}, "file to search by is empty"),
    ],
)
def test_bad_queries_get_a_one_line_answer(store, query, kwargs, message):
    with pytest.raises(SearchError, match=message) as caught:
        store.search.sessions(query, **kwargs)
    assert "\n" not in str(caught.value)


def test_turns_of_an_unknown_session_say_so(store):
    with pytest.raises(SearchError, match="no session 'nope'"):
        store.search.turns("cache", session_id="nope")


@already_indexed
def test_a_project_filter_needs_the_column(corpus):
    corpus.search.refresh()
    has = corpus.query(
        "SELECT count(*) AS n FROM information_schema.columns WHERE table_name = 'sessions' AND column_name = 'project'"
    ).n[0]
    if has:
        assert corpus.search.sessions("websocket", project="nowhere") == []
    else:
        with pytest.raises(SearchError, match="no project"):
            corpus.search.sessions("websocket", project="x")


def test_the_project_filter_names_a_project_as_status_does(store):
    from tests.conftest import make_turns

    turns = make_turns("in-app", 2) + make_turns("elsewhere", 2)
    rows = [
        {
            "id": t.id, "session_id": t.session_id, "ts_ms": t.ts_ms, "type": "agent-interaction",
            "document": "fixed the websocket reconnect loop", "document_rebuilt": False,
            "source_file": "f.jsonl", "source_line": n + 1,
            "project": "/home/dev/webapp" if t.session_id == "in-app" else "/home/dev/other",
        }
        for n, t in enumerate(turns)
    ]  # fmt: skip
    store.ingest.write_turns(rows)
    store.search.refresh()
    for named in ("webapp", "dev/webapp", "/home/dev/webapp"):
        assert [h.session_id for h in store.search.sessions("websocket", project=named)] == ["in-app"]
    assert store.search.sessions("websocket", project="app") == []  # a component whole, not its tail


def test_the_index_is_built_again_when_its_folder_is_deleted_or_of_another_version(corpus):
    import json
    import shutil

    from resources.store.search_index import INDEX_FORMAT, STATE_FILE

    assert corpus.search.refresh().sessions_indexed == 3
    folder = corpus.search.folder
    shutil.rmtree(folder)
    assert corpus.search.sessions("websocket") == []  # no index: nothing found, nothing raised
    report = corpus.search.refresh()
    assert report.rebuilt and report.sessions_indexed == 3  # the store's state alone would say none changed
    assert not corpus.search.refresh().rebuilt
    assert [h.session_id for h in corpus.search.sessions("websocket")] == ["ws"]
    for key, other in (("tokenizer_version", -1), ("format", INDEX_FORMAT + 1)):
        state = json.loads((folder / STATE_FILE).read_text())
        (folder / STATE_FILE).write_text(json.dumps({**state, key: other}))
        assert corpus.search.sessions("websocket") == []  # a reader opens no index of another version
        assert corpus.search.refresh().sessions_indexed == 3
        assert [h.session_id for h in corpus.search.sessions("websocket")] == ["ws"]
    shutil.rmtree(folder / "documents")  # a folder half gone is built again too
    assert corpus.search.refresh().sessions_indexed == 3
    assert corpus.search.reader().documents.searcher().num_docs == corpus.search.status()["documents"]


def test_a_refresh_that_finds_the_writer_held_leaves_the_work_to_the_next(corpus):
    from resources.store.search_index import IndexWriting

    corpus.search.refresh(limit=1)
    with IndexWriting(corpus.search.folder):  # another refresh, under way
        report = corpus.search.refresh()
        assert report.busy and (report.sessions_indexed, report.behind) == (0, 2)
        assert corpus.search.reader().session_count() == 1  # the first refresh's one session alone
    # Tantivy's own writer lock, held by a writer that took no lock file, is found the same way.
    import tantivy

    writer = tantivy.Index.open(str(corpus.search.folder / "documents")).writer(heap_size=15_000_000, num_threads=1)
    report = corpus.search.refresh()
    assert report.busy and (report.sessions_indexed, report.behind) == (0, 2)
    writer.wait_merging_threads()  # let go
    report = corpus.search.refresh()
    assert not report.busy and (report.sessions_indexed, report.behind) == (2, 0)


@already_indexed
def test_a_hit_is_shown_from_the_index_alone(corpus):
    corpus.search.refresh()
    index = corpus.search.reader()
    (hit,) = index.sessions("websocket reconnect")
    assert (hit.title, hit.category, hit.tier) == ("Fix websocket reconnect loop", "bugfix", "raw")
    assert index.accounts(["ws"])["ws"]["line"] and index.accounts(["nope"]) == {}
    row = index.turn_rows(["ws-t000"])["ws-t000"]
    assert row["session_id"] == "ws" and row["prompt"].startswith("The websocket client")
    assert row["prompt_chars"] == len("The websocket client keeps reconnecting in a loop")
    assert index.state()["sessions"] == 3 and index.state()["behind"] == 0


def test_a_turn_is_indexed_by_its_whole_document_and_shown_by_its_row(store):
    # The document's response (tool output and all) is what is searched, not the row's short one.
    row = turn("doc", 0, "look at the importer", "short reply")
    row["document"] = "User Prompt: look at the importer\nAgent Response: quetzalcoatl appears in the tool output"
    write(store, [row])
    store.search.refresh()
    (hit,) = store.search.turns("quetzalcoatl")
    assert hit.turn_id == "doc-t000" and "**quetzalcoatl**" in hit.snippet
    shown = store.search.reader().turn_rows(["doc-t000"])["doc-t000"]
    assert (shown["prompt"], shown["response"], shown["ts_ms"]) == ("look at the importer", "short reply", T0)


def many_matches(store: DigestStore) -> None:
    """Twelve sessions of three turns, each turn naming `retry` a different number of times (and
    some the same: ties), with a mini summary beside some turns."""
    rows = [
        turn(f"s{s:02d}", n, f"retry the upload {'retry ' * ((s * 3 + n) % 5)}", "the retry budget ran out", at=T0 + s)
        for s in range(12)
        for n in range(3)
    ]
    write(store, rows)
    store.ingest.write_imported_mini_summaries(
        [{"turn_id": f"s{s:02d}-t001", "session_id": f"s{s:02d}", "text": "Asked to retry"} for s in range(0, 12, 3)]
    )
    store.search.refresh()


@pytest.fixture(scope="module")
def many_matched(tmp_path_factory, migrated_store_file) -> Iterator[DigestStore]:
    """`many_matches` written and indexed once for the tests that only read its index."""
    with contextlib.ExitStack() as stack:
        path = tmp_path_factory.mktemp("many-matches") / "digest.duckdb"
        store = held_copy(stack, migrated_store_file, DigestStore(path))
        many_matches(store)
        yield store


def test_fewer_turns_asked_are_the_first_of_more(many_matched):
    # The turn ranking stops reading documents once no later one can enter the list: the same list.
    index = many_matched.search.reader()
    whole = [(h.turn_id, h.score, h.kind, h.snippet) for h in index.turns("retry upload", limit=100)]
    assert len(whole) == 36
    for limit in (1, 2, 5, 13, 36):
        assert [(h.turn_id, h.score, h.kind, h.snippet) for h in index.turns("retry upload", limit=limit)] == whole[
            :limit
        ]


def test_a_keyword_answer_cuts_snippets_for_the_hits_it_shows_alone(many_matched, monkeypatch):
    # Cutting a snippet from a long tool output is most of a query's time: the ranking reads many
    # more hits than an answer shows, and only the shown ones are cut.
    from resources import hybrid_search
    from resources.store import search_reads

    cut = []
    monkeypatch.setattr(search_reads, "snippet", lambda text, terms: cut.append(text) or "cut")
    index = many_matched.search.reader()
    turns = hybrid_search.search_turns(index, None, "retry", limit=3).hits
    assert len(turns) == 3 and not cut
    assert [h.snippet for h in turns] == ["cut"] * 3 and len(cut) == 3
    cut.clear()
    sessions = hybrid_search.search_sessions(index, None, "retry", limit=2).hits
    assert len(sessions) == 2 and not cut
    assert [m.snippet for h in sessions for m in h.matches[:2]] == ["cut"] * 4 and len(cut) == 4
