"""The search index's folder over many one-session refreshes (`IndexWriting`, each a commit and a
writer let go): its small segments merged, its folder near a fresh build's size, no file of a
cancelled merge left behind; and a reader's searcher, taken before, searched throughout."""

from __future__ import annotations

import json
import random

import tantivy

from resources.store.search_index import IndexWriting, folder_bytes, sweep_orphans

WORDS = [f"word{i}" for i in range(3000)]
BASE_SESSIONS = 30
REFRESHES = 12  # more than the 8 small segments Tantivy's merge policy merges at


def _rows(rng: random.Random, session: str, turns: int = 10) -> list[tuple]:
    return [("turn", f"{session}-{t}", " ".join(rng.choices(WORDS, k=60)), 1_000 + t, None) for t in range(turns)]


def _build(folder, rng: random.Random, sessions: dict[str, list]) -> None:
    with IndexWriting(folder) as index:
        for session, rows in sessions.items():
            index.replace(session, {}, [], rows)
        index.commit()


def _segments(part) -> list[dict]:
    return json.loads((part / "meta.json").read_text())["segments"]


def _files_of_no_segment(part) -> list[str]:
    live = {s["segment_id"].replace("-", "") for s in _segments(part)}
    return [p.name for p in part.iterdir() if p.name[:32] not in live and not p.name.startswith((".", "meta"))]


def test_one_session_refreshes_merge_their_segments_and_leave_no_file_behind(tmp_path):
    rng = random.Random(41)
    sessions = {f"s{i}": _rows(rng, f"s{i}") for i in range(BASE_SESSIONS)}
    folder = tmp_path / "store.duckdb.search"
    _build(folder, rng, sessions)
    reader = tantivy.Index.open(str(folder / "documents"))
    kept = reader.searcher()  # a reader's searcher from before the refreshes
    kept_docs, query = kept.num_docs, reader.parse_query("terms:word7")
    kept_hits = [kept.doc(a)["turn"] for _, a in kept.search(query, 20).hits]

    for n in range(REFRESHES):  # a new session, or one re-indexed (its documents deleted, written again)
        session = f"new{n}" if n % 2 else f"s{rng.randrange(BASE_SESSIONS)}"
        sessions[session] = _rows(rng, session)
        with IndexWriting(folder) as index:
            index.replace(session, {}, [], sessions[session])
            index.commit()

    for part in ("documents", "sessions"):
        segments = _segments(folder / part)
        assert len(segments) < 8, f"{part}: {len(segments)} segments after {REFRESHES} one-session refreshes"
        assert _files_of_no_segment(folder / part) == [], f"{part}: files of merges that never ended"
    # No more than a fresh build of the same sessions holds, but for the first build's deleted documents.
    fresh = tmp_path / "fresh.duckdb.search"
    _build(fresh, rng, sessions)
    assert folder_bytes(folder) <= 1.5 * folder_bytes(fresh)

    # The kept searcher still reads its documents (the merged segments' files deleted under it);
    # the reader reloaded sees every session once.
    assert kept.num_docs == kept_docs
    assert [kept.doc(a)["turn"] for _, a in kept.search(query, 20).hits] == kept_hits
    reader.reload()
    assert reader.searcher().num_docs == 10 * len(sessions)


def test_the_files_of_a_cancelled_merge_are_swept_when_a_writer_opens(tmp_path):
    rng = random.Random(7)
    folder = tmp_path / "store.duckdb.search"
    _build(folder, rng, {"a": _rows(rng, "a"), "b": _rows(rng, "b")})
    part = folder / "documents"
    orphan = part / f"{'ab' * 16}.store"  # a merge's segment no commit named and Tantivy lost track of
    orphan.write_bytes(b"x" * 1000)
    managed_path = part / ".managed.json"
    managed = json.loads(managed_path.read_text())
    tracked = part / f"{'cd' * 16}.idx"  # one Tantivy tracks: its own garbage collection's to delete
    tracked.write_bytes(b"y")
    managed_path.write_text(json.dumps([*managed, tracked.name]))
    live = sorted(
        p.name for p in part.iterdir() if p.name.startswith(_segments(part)[0]["segment_id"].replace("-", ""))
    )

    assert sweep_orphans(part) == [orphan.name]
    assert not orphan.exists() and tracked.exists()
    assert all((part / name).exists() for name in live)
    with IndexWriting(folder):  # a writer's opening sweeps too
        pass
    assert tantivy.Index.open(str(part)).searcher().num_docs == 20


def test_a_refresh_that_fails_publishes_none_of_its_writes_and_leaves_no_file(tmp_path):
    rng = random.Random(3)
    folder = tmp_path / "store.duckdb.search"
    _build(folder, rng, {"a": _rows(rng, "a")})
    try:
        with IndexWriting(folder) as index:  # the writer let go without a commit
            index.replace("b", {}, [], _rows(rng, "b"))
            index.remove(["a"])
            raise RuntimeError("the store went away")
    except RuntimeError:
        pass
    documents = tantivy.Index.open(str(folder / "documents"))
    assert {
        documents.searcher().doc(a)["session"][0]
        for _, a in documents.searcher().search(documents.parse_query("*"), 50).hits
    } == {"a"}
    _build(folder, rng, {"c": _rows(rng, "c")})  # the next commit collects the files it wrote
    documents.reload()
    assert documents.searcher().num_docs == 20
    assert len(_segments(folder / "documents")) == 2 and _files_of_no_segment(folder / "documents") == []
