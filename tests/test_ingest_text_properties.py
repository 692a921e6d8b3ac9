"""Property-based test of an ingest that never aborts on content: arbitrary Unicode, URLs, bare
schemes, paths and code in every text field of every format the ingest reads (Neo.mjs memory rows,
the plain turn format, Claude Code, Codex, aider, SWE-agent and mini-SWE-agent logs), through the
real `ingest_paths` into a real DuckDB file. No exception may escape, and every line is accounted
for as kept, rejected, superseded, skipped or folded, the store holding exactly the turns counted."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from digest.ingest import ingest_paths
from resources.store import DigestStore
from tests.test_ingest import rows

# What real transcripts hold that fuzzed text rarely does: bare schemes, URLs, paths, code.
PIECES = [
    "http://", "https://", "http://{host}:{port}", 'f"http://{host}:{port}/"', "https://github.com/a/b/issues/",
    "https://github.com/a/b/pull/12#issuecomment-1", "file:///", "mailto:", "://", "#", "#1", "GH-", "GH-7",
    "/", "./", "../x", "C:\\Users\\dev\\app.py", "~/.claude/projects/-home-dev/s.jsonl", "src/", ".py", "a.b.c(",
    "()", "(", ")", "`", "```bash\nls\n```", "def f(x):\n    return x[0]", "npm run", "git", "pytest -q",
    "__init__", "_", "-", "E", "EACCES", "ValueError", "User Prompt: ", "\nAgent Response: ", "#### ",
    "# aider chat started at ", "> ", "{", "}", "[", "]", '"', "\\", "\x00", "\r", "\t", "\u2028", "😀", "\u0301",
    "日本語", "ﬁ", "İ", "ß", "\ufeff", "",
]  # fmt: skip
text = st.one_of(
    st.text(max_size=60),
    st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=8)), max_size=8).map("".join),
)
ids = st.one_of(st.sampled_from(["s1", "s2", "t1", "t2"]), text)


def memory(t) -> list[str]:
    meta = {"sessionId": t["id"], "timestamp": 1_760_000_000_000, "prompt": t["a"], "thought": t["b"],
            "response": t["c"], "agent": t["d"], "model": t["d"], "agentIdentity": t["a"], "userId": t["b"],
            "type": "agent-interaction", "toolsUsed": t["c"]}  # fmt: skip
    return [json.dumps({"id": t["id"] + t["b"][:3], "metadata": meta, "document": t["e"]})]


def plain(t) -> list[str]:
    row = {"id": t["id"], "session_id": t["a"] or "s", "prompt": t["b"], "response": t["c"], "thought": t["d"],
           "document": t["e"] or None, "agent": t["d"], "model": t["a"], "agent_identity": t["b"],
           "user_id": t["c"], "mini_summary": t["e"]}  # fmt: skip
    return [json.dumps(row, ensure_ascii=False)]


def claude(t) -> list[str]:
    base = {"sessionId": t["id"], "timestamp": "2026-11-18T09:00:00Z", "isSidechain": False}
    events = [
        {**base, "type": "user", "uuid": t["a"] + "u", "message": {"role": "user", "content": t["b"]}},
        {**base, "type": "assistant", "uuid": t["a"] + "a", "message": {"model": t["d"], "content": [
            {"type": "thinking", "thinking": t["c"]}, {"type": "text", "text": t["e"]},
            {"type": "tool_use", "id": "x", "name": t["d"], "input": {"command": t["c"]}}]}},
        {**base, "type": "user", "uuid": t["a"] + "r", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "x", "content": t["e"]}]}},
        {"type": "summary", "summary": t["b"], "leafUuid": t["a"]},
        {**base, "type": "system", "uuid": t["a"] + "s", "content": t["c"]},
    ]  # fmt: skip
    return [json.dumps(e, ensure_ascii=False) for e in events]


def codex(t) -> list[str]:
    def line(kind, payload):
        return json.dumps({"timestamp": "2026-11-19T14:02:11Z", "type": kind, "payload": payload}, ensure_ascii=False)

    return [
        line("session_meta", {"id": t["id"], "timestamp": "2026-11-19T14:02:11Z"}),
        line("turn_context", {"model": t["d"]}),
        line("response_item", {"type": "message", "role": "user", "content": [{"type": "input_text", "text": t["a"]}]}),
        line("response_item", {"type": "reasoning", "summary": [{"type": "summary_text", "text": t["b"]}]}),
        line("response_item", {"type": "function_call", "name": t["d"], "arguments": t["c"], "call_id": "c"}),
        line("response_item", {"type": "function_call_output", "call_id": "c", "output": t["e"]}),
        line("response_item", {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": t["b"]}]}),
        line("event_msg", {"type": "agent_message", "message": t["b"]}),
    ]  # fmt: skip


def aider(t) -> list[str]:
    body = f"# aider chat started at {t['id']}\n\n> Main model: {t['d']}\n\n#### {t['a']}\n\n{t['b']}\n\n> {t['c']}\n"
    return ["", *body.split("\n"), f"#### {t['e']}", t["e"]]


def swe_agent(t) -> list[str]:
    doc = {"trajectory": [{"thought": t["a"], "action": t["b"], "observation": t["c"], "response": t["e"]},
                          {"thought": t["d"], "action": t["e"], "observation": t["a"]}],
           "history": [{"role": "user", "content": t["id"]}], "replay_config": t["d"]}  # fmt: skip
    return json.dumps(doc, indent=2, ensure_ascii=False).split("\n")


def mini(t) -> list[str]:
    doc = {"info": {"config": {"model": {"model_name": t["d"]}}},
           "messages": [{"role": "system", "content": t["e"]}, {"role": "user", "content": t["id"]},
                        {"role": "assistant", "content": t["a"]}, {"role": "user", "content": t["b"]},
                        {"role": "assistant", "content": t["c"], "tool_calls": [{"function": {"name": t["d"], "arguments": t["e"]}}]}],
           "trajectory_format": "mini-swe-agent-1"}  # fmt: skip
    return json.dumps(doc, indent=2, ensure_ascii=False).split("\n")


FORMATS = {
    "memory-backup-x.jsonl": memory, "plain.jsonl": plain, "claude.jsonl": claude, "rollout.jsonl": codex,
    "history.md": aider, "run.traj": swe_agent, "run.traj.json": mini,
}  # fmt: skip
fields = st.fixed_dictionaries({"id": ids, "a": text, "b": text, "c": text, "d": text, "e": text})


@settings(max_examples=10, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(st.lists(fields, min_size=1, max_size=3))
def test_no_text_takes_the_ingest_down_and_every_line_is_accounted_for(generated):
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        db = DigestStore(folder / "digest.duckdb")
        db.migrate()
        for name, write in FORMATS.items():
            # Two sessions of the format in one file where the format allows (JSONL, Markdown).
            lines = (
                [line for t in generated for line in write(t)]
                if name.endswith((".jsonl", ".md"))
                else write(generated[0])
            )
            (folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogatepass")
        report = ingest_paths([folder / name for name in FORMATS], db)  # no exception may escape
        for f in report.files:
            assert f.lines == len(Path(f.path).read_bytes().split(b"\n")) - 1
            assert f.lines == f.rows + f.rejects + f.superseded + f.skipped + f.folded, f
        stored = rows(db, "SELECT id, session_id FROM turns")
        assert len(stored) == report.turns
        sessions = {r["session_id"]: r["turn_count"] for r in rows(db, "SELECT session_id, turn_count FROM sessions")}
        assert sessions == {
            sid: sum(1 for r in stored if r["session_id"] == sid) for sid in {r["session_id"] for r in stored}
        }
        assert rows(db, "SELECT count(*) AS n FROM rejects")[0]["n"] == report.rejects + report.superseded
