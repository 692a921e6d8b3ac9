"""Write the sample Neo.mjs Memory Core export bundle into samples/bundle/.

    python samples/generate.py

Deterministic: everything comes from `random.Random(7)` and the text pools below, so re-running
overwrites the same files byte for byte. Standard library only, no network.

The bundle holds six sessions: four small ones (raw synthesis), one large session whose turns all
carry graph mini summaries (degraded tier `miniSummary`) and one large session without any
(degraded tier `truncatedRaw`). Five malformed rows at the end of the memory file exercise the
ingest's rejects.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import uuid
from datetime import UTC, datetime
from pathlib import Path

SAMPLES = Path(__file__).resolve().parent
BUNDLE = SAMPLES / "bundle"
STAMP = "2026-11-20T09-00-00.000Z"


# ================================ session content ================================

# --- S1: grid selection bug (#13904), claude-code / opus ----------------------------------------

GRID_SELECTION = [
    (
        "Issue #13904: in examples/grid/covid, if I select a row and then sort by the 'Cases' column, "
        "the selection highlight jumps to whatever record is now at the old position. Can you find out why?",
        "A highlight that stays at the old position means the selection model remembers positions, not records. "
        "RowModel lives in src/selection/grid/RowModel.mjs; I'll read it together with src/grid/Body.mjs to see "
        "how selected rows are stored and re-applied after the store sorts.",
        "Found it. `RowModel.onRowClick()` stores the row index in `selectedRows`, and "
        "`Body.createViewData()` asks `selectionModel.isSelectedIndex(rowIndex)` for every rendered row. "
        "After `store.sort()` the body re-renders, the indices now point at different records, and the "
        "stale index is applied to whatever record moved into that slot.\n\n"
        "Proposed fix (nothing changed yet): keep record keys (`store.getKey(record)`) in the model and map "
        "them back to indices only when rendering. Sorting, filtering and inserts then keep the selection on "
        "the right record for free.",
        "Traced the jumping grid selection in #13904 to RowModel storing row indices instead of record keys.",
    ),
    (
        "Makes sense. Go ahead and switch it to record keys, but keep the public `selectRow(index)` signature "
        "working, people call it from app code.",
        "I can keep `selectRow(index)` as a thin wrapper that resolves the record at that index and delegates "
        "to a new `selectRecord(record)`. `isSelectedIndex()` is only used by Body, so it can change freely.",
        "Done in src/selection/grid/RowModel.mjs:\n\n"
        "```js\nselectRow(index, silent=false) {\n    let record = this.view.store.getAt(index);\n"
        "    record && this.selectRecord(record, silent)\n}\n\nselectRecord(record, silent=false) {\n"
        "    let me = this;\n    me.selectedKeys.add(me.view.store.getKey(record));\n"
        "    !silent && me.view.onSelectionChange()\n}\n```\n\n"
        "`Body.createViewData()` now calls `isSelectedRecord(record)`. The old `selectedRows` array is gone; "
        "`getSelection()` still returns records, so the public API is unchanged.",
        None,
    ),
    (
        "Add a regression test.",
        "A unit test is enough: select a record, sort the store descending, assert the same record is still "
        "selected and the index changed. No browser rendering needed.",
        "Added `keeps the selected record after sorting (#13904)` to "
        "test/playwright/unit/grid/RowModel.spec.mjs. It selects the record with `id: 7`, sorts by `cases` "
        "DESC and checks `isSelectedRecord()` plus `getSelection()[0].id === 7`.\n\n"
        "`npx playwright test test/playwright/unit/grid/RowModel.spec.mjs`: 9 passed (2.1s). The new test "
        "fails on the previous commit, as it should.",
        "Added a RowModel regression test that selects record 7, sorts descending and asserts it stays selected.",
    ),
    (
        "Does the same bug exist for CellModel and ColumnModel?",
        "CellModel builds its selection ids from `rowIndex` and dataField, so it should have the same flaw. "
        "ColumnModel keys by dataField only, which survives sorting.",
        "CellModel: yes, same bug. It stored `${rowIndex}__${dataField}`; I switched it to "
        "`${recordKey}__${dataField}` and reused the record lookup from RowModel. ColumnModel: not affected, "
        "it keys by `dataField` and sorting rows does not move columns. Added one more test for CellModel; "
        "both spec files pass (15 tests).",
        None,
    ),
    (
        "Great. Write the commit message and a short comment for the issue.",
        "Keep the commit message conventional and mention both models; the issue comment should tell users "
        "which version gets the fix and that `selectRow(index)` still works.",
        "Commit message:\n\n```\nfix(grid): keep row and cell selection stable across store sorts (#13904)\n\n"
        "RowModel and CellModel stored positions, so sorting moved the highlight\nto another record. Both "
        "now store record keys; selectRow(index) is kept as a\nwrapper for app code.\n```\n\n"
        'Issue comment: "Fixed on dev: selections now follow the record when the store is sorted or '
        'filtered. `selectRow(index)` keeps working; new code can call `selectRecord(record)`."',
        None,
    ),
]

# --- S2: config system guide, session id with a comma and a colon, antigravity / gemini ---------

CONFIG_DOCS = [
    (
        "We need a guide page for the config system; learn/guides/fundamentals/ConfigSystem.md is just a stub. "
        "Start with an outline: reactive configs, hooks, defaults vs instance values.",
        'Readers usually arrive with a concrete problem ("why is my afterSet not called?"), so the outline '
        "should lead with the trailing-underscore rule and the hook order before any theory.",
        "Outline for learn/guides/fundamentals/ConfigSystem.md:\n\n"
        "1. Declaring configs in `static config`: plain vs reactive (`title_`)\n"
        "2. The hook trio: `beforeGetTitle`, `beforeSetTitle`, `afterSetTitle` and their order\n"
        "3. Defaults vs instance values: what `Neo.setupClass()` does once per class\n"
        "4. Batching with `set({...})`: one update instead of many\n"
        "5. Object and array configs: merging and the shared-reference trap\n"
        "6. Checklist of common mistakes\n\n"
        "I'd keep each section short with one runnable snippet.",
        None,
    ),
    (
        "Good outline. Write the hooks section with a real example, use a component with a `title_` config.",
        "The example must show that `afterSet` receives the new and old value, and that returning `undefined` "
        "from `beforeSet` cancels the change. That second part is what people miss.",
        "Wrote section 2 with this example:\n\n"
        "```js\nclass Panel extends Component {\n    static config = {\n        className: 'Demo.Panel',\n"
        "        title_   : null\n    }\n\n    beforeSetTitle(value, oldValue) {\n"
        "        return value?.trim() || undefined // undefined cancels the change\n    }\n\n"
        "    afterSetTitle(value, oldValue) {\n        this.update()\n    }\n}\n```\n\n"
        "The text explains the call order (beforeSet, assignment, afterSet) and that hooks also run for the "
        "initial value during construction.",
        None,
    ),
    (
        "Add a section on config merging, people keep getting bitten by object configs being shared between instances.",
        "The trap: an object literal in `static config` lives on the prototype, so mutating it in one "
        "instance leaks into all others. The fix is to assign a new object or use a deep-merge descriptor.",
        'Added section 5, "Object configs and merging": a broken example that mutates `this.style.color`, '
        "the symptom (every panel turns red), and two fixes: assign a new object "
        "(`this.style = {...this.style, color: 'red'}`) or declare the config with `merge: 'deep'` so each "
        "instance gets its own merged copy. Linked it from the checklist in section 6.",
        None,
    ),
    (
        "Register the page in learn/tree.json under Fundamentals and check the links render in the portal.",
        "tree.json entries need a unique id and the parentId of the Fundamentals node; then I'll load the "
        "portal locally and click through the anchors.",
        'Added `{"id": "fundamentals/ConfigSystem", "parentId": "Fundamentals", "name": '
        '"Config System"}` to learn/tree.json. In the local portal the page renders, the six anchors work '
        "and the code blocks highlight. One link to `Neo.setupClass` pointed at a removed API page; I "
        "switched it to the src/Neo.mjs docs.",
        None,
    ),
]

# --- S3: VDOM test flake, claude-code / sonnet ---------------------------------------------------

VDOM_FLAKE = [
    (
        "test/playwright/unit/VdomHelper.spec.mjs fails about 1 run in 10 on CI with "
        "\"expected 'neo-vnode-3' to equal 'neo-vnode-2'\". Locally it always passes. Can you look?",
        "An off-by-one in a generated id smells like shared counter state between tests. CI runs with more "
        "workers than my laptop, which changes how tests are distributed. First step: reproduce with repeats.",
        "I'll start by reproducing it locally with `--repeat-each` and several workers before reading code.",
        None,
    ),
    (
        "Go ahead.",
        "If it only fails with several workers, test order inside a worker matters, which points at module "
        "state that survives between tests.",
        "```\n$ npx playwright test test/playwright/unit/VdomHelper.spec.mjs --repeat-each 50 --workers 4\n"
        "  6 failed, 794 passed (48.2s)\n$ npx playwright test test/playwright/unit/VdomHelper.spec.mjs "
        "--repeat-each 50 --workers 1\n  800 passed (71.9s)\n```\n\n"
        "Reproduced: 6/800 with 4 workers, 0 with 1 worker. All failures are in "
        "`createDeltas: moved node` and all show an id one higher than expected.",
        None,
    ),
    (
        "Which state is shared?",
        "`Neo.core.IdGenerator` keeps an `idCounter` per prefix for the life of the realm. Tests that build "
        "vnodes without explicit ids consume counter values, so the expected ids depend on what ran before.",
        "`IdGenerator.idCounter['neo-vnode']` is shared across all tests in a worker. `createDeltas: moved "
        "node` builds its vdom without ids and hard-codes `neo-vnode-2` in the expectation, which only holds "
        "when exactly one vnode was generated before it. With 4 workers the distribution changes and "
        "sometimes another test runs first.",
        "Traced the flaky VdomHelper test to a shared IdGenerator counter that other tests advance first.",
    ),
    (
        "Fix it properly, not by bumping the expected id.",
        "Two options: reset the counter in `beforeEach`, or give the vdom explicit ids. Explicit ids make "
        "the test independent of the generator entirely, which is more robust.",
        "Pinned ids in the test data (`{id: 'moved-1', ...}`) and added a `beforeEach` that resets "
        "`IdGenerator.idCounter = {}` for the whole file, so any future test without ids starts from a known "
        "state. The expectation now reads `toEqual('moved-1')`.",
        None,
    ),
    (
        "Run it a few hundred times to be sure.",
        "200 repeats with 4 workers is roughly 25 times the failure sample above; if it's still flaky we'd "
        "see several failures.",
        "```\n$ npx playwright test test/playwright/unit/VdomHelper.spec.mjs --repeat-each 200 --workers 4\n"
        "  3200 passed (3m12s)\n```\n\n"
        "0 failed. The same command on the unfixed file gave 23 failures, so the run is long enough to trust. "
        "I also ran the rest of the unit suite once to make sure the counter reset does not leak into other "
        "files: all green.",
        None,
    ),
    (
        "Are there other spec files with the same pattern?",
        "Search for hard-coded `neo-vnode-` or `neo-component-` expectations in spec files that do not reset "
        "the generator.",
        "`rg \"'neo-(vnode|component)-\\d+'\" test/playwright/unit` finds two more: "
        "VdomLifecycle.spec.mjs and grid/Row.spec.mjs (the GridRow test). Both rely on generated ids without a "
        "reset. I applied the same fix (pinned ids + beforeEach reset) to both; each passes 100 repeats with "
        "4 workers.",
        None,
    ),
    (
        "Summarize what you changed for the PR description.",
        "Short, factual: cause, fix, evidence.",
        "**Flaky VDOM unit tests**\n\nCause: `IdGenerator` counters are shared by all tests in a Playwright "
        "worker, and three spec files hard-coded generated ids.\n\nFix: explicit vnode ids in test data, plus "
        "a `beforeEach` counter reset in VdomHelper.spec.mjs, VdomLifecycle.spec.mjs and grid/Row.spec.mjs.\n\n"
        "Evidence: 3200 repeats with 4 workers, 0 failures (23 before).",
        None,
    ),
]

# --- S4: Python backup rotation (issue-12819), antigravity / gemini -----------------------------

BACKUP_ROTATION = [
    (
        "issue-12819: buildScripts/ai/rotate_backups.py keeps deleting the newest memory backup instead of "
        "the oldest when there are more than 10. Fix it.",
        "The script probably sorts by file name or mtime in the wrong direction. Backup names carry an ISO "
        "timestamp (memory-backup-2026-11-20T09-00-00.000Z.jsonl), which sorts lexically, so name order is "
        "the most reliable key; mtime changes when files are copied.",
        "Cause: `sorted(paths, key=os.path.getmtime, reverse=True)` followed by `paths[:excess]`, so it "
        "deleted from the newest end. Worse, copied backups get a fresh mtime.\n\n"
        "Fix in buildScripts/ai/rotate_backups.py:\n\n"
        "```python\ndef stale_backups(folder: Path, keep: int) -> list[Path]:\n"
        '    backups = sorted(folder.glob("memory-backup-*.jsonl"))  # ISO names sort by time\n'
        "    return backups[:-keep] if keep else backups\n```\n\n"
        "`main()` now deletes exactly `stale_backups(folder, args.keep)`.",
        None,
    ),
    (
        "Add a test for it using pytest and tmp_path.",
        "Create 12 files with increasing timestamps but deliberately scrambled mtimes, so the test would catch "
        "a regression back to mtime ordering.",
        "Added buildScripts/ai/tests/test_rotate_backups.py: it writes 12 backups, sets their mtimes in "
        "reverse order with `os.utime`, calls `stale_backups(tmp_path, keep=10)` and asserts the two oldest "
        "names come back. A second test checks `keep=0` returns everything. `pytest buildScripts/ai/tests`: "
        "2 passed in 0.04s.",
        None,
    ),
    (
        "Also make it dry-run by default when called from the CLI, with --apply to really delete.",
        "Deleting memory backups is irreversible, so defaulting to a dry run is the safe choice; print what "
        "would be removed either way.",
        "The CLI now prints `would delete: <name>` for each stale backup and only unlinks with `--apply`. "
        "Updated the npm script `ai:rotate-backups` to pass `--apply`, since it runs after a successful "
        "export. Added a third test that runs `main([str(tmp_path)])` and asserts nothing was deleted.",
        None,
    ),
]


# Each beat: (phase, prompt, outcome sentence = the turn's mini summary, file, symbol)

WORKER_BEATS = [
    (
        "explore",
        "Let's start the worker messaging refactor (#13870). First map how a remote call travels from the App worker to the main thread and back. Don't change code yet.",
        "Mapped the remote-call round trip from the App worker to the main thread through Base.promiseMessage, Message ids and the reply branch of onMessage.",
        "src/worker/Base.mjs",
        "promiseMessage",
    ),
    (
        "explore",
        "Where are the pending promises stored, and what happens to them if the target worker never replies?",
        "Found pending promises kept in a plain `promises` object on each worker with no timeout, so a lost reply leaks its entry forever.",
        "src/worker/Base.mjs",
        "onMessage",
    ),
    (
        "explore",
        "How does RemoteMethodAccess generate the remote stubs? I want every place that creates a message id.",
        "Listed the three places that mint message ids: the Message constructor, RemoteMethodAccess.generateRemote and a fallback in Manager.sendMessage.",
        "src/worker/mixin/RemoteMethodAccess.mjs",
        "generateRemote",
    ),
    (
        "explore",
        "Check the Manager side too. Does the main thread keep its own promise map?",
        "Confirmed Manager.mjs keeps a second promise map keyed by the same per-realm id sequence, so replies from two workers can collide.",
        "src/worker/Manager.mjs",
        "sendMessage",
    ),
    (
        "design",
        "Propose a design for a single PendingRequests registry. Keep it small, I don't want a framework.",
        "Proposed a PendingRequests class with register/resolve/reject/rejectAll and optional per-request timeouts, owned by each worker and by the Manager.",
        "src/worker/PendingRequests.mjs",
        "PendingRequests",
    ),
    (
        "design",
        "What should the default timeout be? Some remote calls, like loading a big store, legitimately take seconds.",
        "Settled on no default timeout: calls opt in via a `timeout` message option, and only VDom updates get a fixed 30s limit.",
        "src/worker/PendingRequests.mjs",
        "register",
    ),
    (
        "design",
        "How do we keep message ids unique across workers without any coordination?",
        "Chose worker-prefixed message ids (`app-17`, `data-4`) from IdGenerator so ids can no longer collide between realms.",
        "src/worker/Message.mjs",
        "constructor",
    ),
    (
        "registry",
        "OK, implement PendingRequests. Tests come later, start with the class.",
        "Implemented src/worker/PendingRequests.mjs as a Map-backed registry with settle-once semantics and timer cleanup.",
        "src/worker/PendingRequests.mjs",
        "register",
    ),
    (
        "registry",
        "Make resolve/reject idempotent. A late reply after a timeout must not throw.",
        "Made late or duplicate replies a no-op with a debug log instead of an exception.",
        "src/worker/PendingRequests.mjs",
        "resolve",
    ),
    (
        "registry",
        "Add a `size` getter and a way to inspect pending requests from the console for debugging.",
        "Added `size` and a `snapshot()` method that lists pending ids, actions and ages for console debugging.",
        "src/worker/PendingRequests.mjs",
        "snapshot",
    ),
    (
        "registry",
        "Use the IdGenerator for the prefixed ids you proposed.",
        "Wired IdGenerator.getId() with a `<worker>-msg` prefix into Message so every id carries its worker name.",
        "src/worker/Message.mjs",
        "constructor",
    ),
    (
        "registry",
        "Run the existing worker unit tests, nothing should have changed yet.",
        "Ran the existing worker unit suite: all 58 tests pass with the new class present but not yet wired in.",
        "test/playwright/unit/worker/Base.spec.mjs",
        "promiseMessage",
    ),
    (
        "registry",
        "The linter complains about the private field syntax in PendingRequests. Match the codebase conventions.",
        "Replaced the #private fields with underscore-prefixed members to match the codebase's lint rules and bundler targets.",
        "src/worker/PendingRequests.mjs",
        "_map",
    ),
    (
        "migrate",
        "Now migrate Base.promiseMessage to use the registry.",
        "Migrated Base.promiseMessage to register requests in PendingRequests and removed the old `promises` object.",
        "src/worker/Base.mjs",
        "promiseMessage",
    ),
    (
        "migrate",
        "Update the onMessage reply branch so replies resolve through the registry.",
        "Routed reply messages in Base.onMessage through pendingRequests.resolve/reject, keyed by replyId.",
        "src/worker/Base.mjs",
        "onMessage",
    ),
    (
        "migrate",
        "Now RemoteMethodAccess: generateRemote and onRemoteMethod.",
        "Switched RemoteMethodAccess.generateRemote to promiseMessage and made onRemoteMethod reply with a structured error on failure.",
        "src/worker/mixin/RemoteMethodAccess.mjs",
        "onRemoteMethod",
    ),
    (
        "migrate",
        "Migrate Manager.sendMessage and drop its separate map.",
        "Moved Manager.sendMessage onto the shared registry and deleted the duplicate main-thread promise map.",
        "src/worker/Manager.mjs",
        "sendMessage",
    ),
    (
        "migrate",
        "The portal app throws 'No pending request for id data-12' on startup now. Investigate.",
        "Traced the portal startup error to the Data worker replying before registration and moved register() ahead of postMessage.",
        "src/worker/Manager.mjs",
        "onWorkerMessage",
    ),
    (
        "migrate",
        "Grep examples/ and apps/ for direct uses of `promises[` on worker instances.",
        "Found two apps reaching into worker.promises directly and migrated them to the public promiseMessage API.",
        "apps/portal/view/learn/ContentComponent.mjs",
        "promiseMessage",
    ),
    (
        "errors",
        "Errors thrown in a remote method arrive on the main thread as plain strings. Serialize them properly.",
        "Added serializeError/deserializeError helpers so remote exceptions keep name, message, stack and cause across postMessage.",
        "src/worker/ErrorSerializer.mjs",
        "serializeError",
    ),
    (
        "errors",
        "Keep the original worker stack but mark it, so devs can tell where it came from.",
        "Prefixed deserialized stacks with a `[remote: app worker]` marker while keeping the original frames intact.",
        "src/worker/ErrorSerializer.mjs",
        "deserializeError",
    ),
    (
        "errors",
        "What about throwables that aren't Error instances, like `throw 'nope'` or rejecting with a plain object? Handle those too.",
        "Wrapped non-Error throwables in a RemoteError that carries the original value as `cause`.",
        "src/worker/ErrorSerializer.mjs",
        "RemoteError",
    ),
    (
        "errors",
        "We get a DataCloneError when a remote method returns a component instance. Make that fail loudly with a clear message.",
        "Caught DataCloneError in the reply path and rejected with a message naming the remote method and the uncloneable value.",
        "src/worker/mixin/RemoteMethodAccess.mjs",
        "onRemoteMethod",
    ),
    (
        "lifecycle",
        "When a worker is terminated, or a SharedWorker port closes, reject everything pending for it.",
        "Rejected all pending requests of a worker on termination or port close via pendingRequests.rejectAll(reason).",
        "src/worker/Manager.mjs",
        "onWorkerTerminate",
    ),
    (
        "lifecycle",
        "Wire up the per-call timeout option end to end.",
        "Threaded the opt-in `timeout` option from promiseMessage through the registry so timed-out calls reject with a TimeoutError.",
        "src/worker/Base.mjs",
        "promiseMessage",
    ),
    (
        "lifecycle",
        "Set the 30s timeout for VDom updates like we discussed, and log which update timed out.",
        "Gave VDom update calls a 30s timeout that logs the component id and vnode count of the stuck update.",
        "src/mixin/VdomLifecycle.mjs",
        "updateVdom",
    ),
    (
        "lifecycle",
        "Check for timer leaks: run the big grid example for a few minutes and watch the pending count.",
        "Soak-tested the big-data grid example for five minutes: pending requests stayed between 0 and 3 and no timers leaked.",
        "examples/grid/bigData/MainContainer.mjs",
        "snapshot",
    ),
    (
        "tests",
        "Write unit tests for PendingRequests.",
        "Added 14 unit tests for PendingRequests covering settle-once, timeouts, late replies and rejectAll.",
        "test/playwright/unit/worker/PendingRequests.spec.mjs",
        "PendingRequests",
    ),
    (
        "tests",
        "Add tests for error serialization, including the cause chain.",
        "Added serialization round-trip tests for Error subclasses, non-Error throwables and nested causes.",
        "test/playwright/unit/worker/ErrorSerializer.spec.mjs",
        "deserializeError",
    ),
    (
        "tests",
        "The new timeout test is flaky on CI. Look at it.",
        "Fixed the flaky timeout test by switching to Playwright's clock API instead of a real 50ms sleep.",
        "test/playwright/unit/worker/PendingRequests.spec.mjs",
        "register",
    ),
    (
        "tests",
        "Add an integration test that kills a worker mid-request.",
        "Added an integration test that terminates the Data worker mid-request and asserts the call rejects with WorkerTerminatedError.",
        "test/playwright/component/worker/Termination.spec.mjs",
        "rejectAll",
    ),
    (
        "tests",
        "Run the complete unit and component suites.",
        "Ran the full unit and component suites: 1,284 passed, 2 skipped, no failures.",
        "test/playwright/unit",
        "promiseMessage",
    ),
    (
        "tests",
        "One calendar component test is slower than before. Is that us?",
        "Checked the slower calendar test: the extra 300ms comes from a new fixture, not from the registry.",
        "test/playwright/component/calendar/WeekView.spec.mjs",
        "beforeEach",
    ),
    (
        "perf",
        "Measure the overhead of the registry against the old object map on a busy app.",
        "Benchmarked 100k round trips: the registry adds about 0.4µs per message, within noise of the old object map.",
        "buildScripts/bench/workerRoundTrip.mjs",
        "register",
    ),
    (
        "perf",
        "Is snapshot() safe to leave in production builds?",
        "Kept snapshot() in production builds since it only runs on demand and never touches the hot path.",
        "src/worker/PendingRequests.mjs",
        "snapshot",
    ),
    (
        "perf",
        "Check memory: does a long-running session keep growing?",
        "Confirmed with heap snapshots that settled requests are released; retained size stays flat after 20k calls.",
        "src/worker/PendingRequests.mjs",
        "_settle",
    ),
    (
        "docs",
        "Document the new messaging behaviour in learn/guides/fundamentals/WorkerMessaging.md.",
        "Wrote the worker messaging guide covering message ids, timeouts, error propagation and termination semantics.",
        "learn/guides/fundamentals/WorkerMessaging.md",
        "promiseMessage",
    ),
    (
        "docs",
        "Add JSDoc to PendingRequests and the changed methods.",
        "Added JSDoc to PendingRequests, promiseMessage and the error helpers, including the timeout option and thrown error types.",
        "src/worker/PendingRequests.mjs",
        "register",
    ),
    (
        "docs",
        "Add a changelog entry and call out the breaking change for apps that touched worker.promises.",
        "Added a changelog entry flagging the removed worker.promises object as a breaking change, with a migration note.",
        "CHANGELOG.md",
        "promises",
    ),
    (
        "docs",
        "Draft the PR description and link the issues.",
        "Drafted the PR description for #13870 with the design, migration notes and test results, linking follow-up #13872.",
        ".github/PULL_REQUEST_TEMPLATE.md",
        "PendingRequests",
    ),
]

# Per phase: thoughts, details and code are aligned with the phase's beats, in order
# (code may be None: the turn then gets a test log or a diffstat instead).

WORKER_PHASES = {
    "explore": {
        "thoughts": [
            "I'll read src/worker/Base.mjs first since every worker extends it, then follow the message into Manager.mjs on the main thread. I'm only reading, so I can be thorough without risking anything.",
            "The naming is confusing: `promiseMessage`, `sendMessage` and `postMessage` exist at different layers. I want to know which one owns the bookkeeping before forming an opinion about leaks.",
            "If ids are minted in more than one place, a collision is possible whenever two counters start at the same value. That would explain the occasional 'wrong reply' reports in #13870.",
            "Every worker realm loads its own copy of the modules, so any module-level counter restarts at zero in each worker. If the Manager keys replies by those ids, that is a real bug, not a theoretical one.",
        ],
        "details": [
            "The round trip today: `<<sym>>()` in <<file>> builds a `Neo.worker.Message`, stores `{resolve, reject}` under `message.id`, then calls `postMessage`. The receiver handles `action: 'remoteMethod'`, runs the method and answers with `action: 'reply'` and `replyId` set to the original id. The reply branch looks the id up, settles it and deletes the entry.",
            "They live in `me.promises`, a plain object on each worker instance. Nothing deletes an entry unless a reply arrives: there is no timeout, no cleanup in `terminate()` and no cleanup when a SharedWorker port closes. With a crashed Data worker every pending call stays in memory and its caller awaits forever.",
            "In <<file>>, `<<sym>>()` builds each stub's message by hand and stores its own `{resolve, reject}` in `me.promises`, bypassing `promiseMessage()`. So ids are minted by the Message constructor (used by everyone), by the stubs, and by Manager.sendMessage when the main thread starts a call. Any bookkeeping we add has to cover all three paths.",
            "Yes. Ids come from a module-level counter in Message.mjs (`let idCounter = 0`), and every worker has its own copy, so the App worker and the Data worker both produce `neo-worker-1`, `neo-worker-2`, ... `<<sym>>()` in <<file>> keeps a second promise map keyed by those ids, so two workers replying with the same id can settle the wrong promise on the main thread.",
        ],
        "code": [
            """```
App worker                        Main thread (Manager)            Data worker
----------                        ---------------------            -----------
DomAccess.focus() stub ---------> onWorkerMessage(remoteMethod)
  promises['neo-worker-7']          DomAccess.focus()
                        <-------- reply {replyId:'neo-worker-7'}
Store.load() stub -------------------------------------------------> onRemoteMethod
  promises['neo-worker-8']                                            (mints its own
                        <----------- reply {replyId:'neo-worker-8'}    neo-worker-8!)
```""",
            """```js
// <<file>> (current)
promiseMessage(dest, opts, transfer) {
    let me = this;

    return new Promise((resolve, reject) => {
        let message = me.sendMessage(dest, opts, transfer),
            msgId   = message.id;

        me.promises[msgId] = {reject, resolve}
    })
}

onMessage(e) {
    let me                = this,
        data              = e.data,
        {action, replyId} = data,
        promise;

    if (action === 'reply') {
        promise = me.promises[replyId];

        if (promise) {
            promise[data.reject ? 'reject' : 'resolve'](data.data);
            delete me.promises[replyId]
        }
    }
}
```""",
            """```js
// <<file>> (current)
generateRemote(remote, method) {
    let me     = this,
        origin = remote.origin;

    return function(data, buffer) {
        let opts = {action: 'remoteMethod', data, destination: origin, remoteClassName: remote.className, remoteMethod: method};

        return new Promise((resolve, reject) => {
            let message = me.sendMessage(origin, opts, buffer);
            me.promises[message.id] = {reject, resolve}
        })
    }
}
```""",
            """```js
// <<file>> (current)
sendMessage(dest, opts, transfer) {
    let me     = this,
        worker = me.getWorker(dest),
        message;

    if (!worker) {
        throw new Error('Called sendMessage for a worker that does not exist: ' + dest)
    }

    message = new Message(opts); // module-level counter, restarts in every realm
    worker.postMessage(message, transfer);
    return message
}
```""",
        ],
    },
    "design": {
        "thoughts": [
            "A registry object is the smallest thing that fixes all three problems (leaks, collisions, no timeouts) at once. Anything bigger, like a message bus abstraction, would be a rewrite nobody asked for.",
            "Timeouts are a policy decision, not a mechanism. The registry should support them but not impose a global default; otherwise a slow store load turns into a spurious failure.",
            "Prefixing ids with the worker name is cheap and makes logs readable too: `data-msg-12` tells you where the request came from without a debugger.",
        ],
        "details": [
            "Design for `<<sym>>` in <<file>>: one instance per realm (each worker and the Manager). API: `register(id, {action, timeout}) -> Promise`, `resolve(id, value)`, `reject(id, error)`, `rejectAll(error)`, `size`. Settling removes the entry and clears its timer; settling an unknown id is a no-op. It does not know about postMessage at all, which keeps it trivially testable.\n\nRejected alternatives: a WeakMap keyed by message objects (replies carry only the id), a single registry on the main thread (cannot see worker-side requests), an AbortController per request (heavier, and no call site cancels anything today).",
            "Timeout policy: `timeout` is an optional message option in ms. No default, because `Store.load()` on a 100k dataset takes 2-4s on CI. VDom updates get 30s, since a stuck update almost always means a dead worker. A timed-out request rejects with `TimeoutError` carrying the action name and the elapsed time.",
            "Ids become `<worker>-msg-<n>`, built with `IdGenerator.getId()`, which already keeps one counter per prefix. Different workers can never produce the same id, the Manager can key all replies in one registry, and no cross-worker coordination is needed.",
        ],
        "code": [
            """```js
// proposed API (not implemented yet)
const pending = new PendingRequests({owner: 'app'});

// caller side
const promise = pending.register(message.id, {action: 'remoteMethod', timeout: 30_000});
worker.postMessage(message);

// reply side
pending.resolve(data.replyId, data.data);      // no-op if already settled
pending.reject(data.replyId, deserializeError(data.data));

// lifecycle
pending.rejectAll(new WorkerTerminatedError('data'));
```""",
            """```
call                         typical   worst seen (CI)   timeout
VDom update                  2-15ms    1.8s              30s
DomAccess.* (main thread)    <5ms      400ms             none
Store.load (100k records)    1.2s      4.1s              none
registerRemote               <1ms      90ms              none
```""",
            """```js
// src/worker/Message.mjs (proposal)
import IdGenerator from '../core/IdGenerator.mjs';

class Message {
    constructor(config) {
        Object.assign(this, config);
        this.id = IdGenerator.getId(`${Neo.workerId ?? 'main'}-msg`)
    }
}
```""",
        ],
    },
    "registry": {
        "thoughts": [
            "Settle-once is the core invariant: every path that settles must go through one private method that deletes the entry and clears the timer, otherwise a timeout and a reply racing each other could both fire. I'll keep the class free of Neo.mjs base classes so it can be unit-tested without booting a worker.",
            "A debug log for late replies is useful, but it must not be a warning: late replies after a timeout are expected and would flood the console in a slow environment.",
            "A console helper is only useful if it is trivial to call and cannot break anything: read-only, plain data, no formatting.",
            "IdGenerator already keeps one counter per prefix; reusing it beats adding a second counter mechanism that could drift from the first.",
            "Nothing calls the registry yet, so the suite should be unchanged. Running it now gives a clean baseline to compare against after the migration.",
            "The lint config targets the bundler's syntax level, and the rest of the codebase uses underscore members for private state. Consistency beats using the newest syntax here.",
        ],
        "details": [
            "Implemented `<<sym>>` in <<file>>. Entries live in a `Map` keyed by message id; each entry holds `{action, resolve, reject, startedAt, timer}`. `_settle(id)` deletes the entry, clears its timer and returns it, so `resolve()` and `reject()` are two-liners and cannot double-settle.",
            "Late replies: `resolve()`/`reject()` on an unknown id now return `false` and log `Neo.logDebug('PendingRequests: late reply for', id)` only when `Neo.config.environment === 'development'`. Production stays silent.",
            "`snapshot()` returns a plain array, oldest first: `[{id, action, ageMs}]`. From the console: `Neo.worker.App.pendingRequests.snapshot()`. It never mutates state and costs nothing unless called.",
            "Message ids now read `app-msg-1`, `data-msg-4`, `main-msg-9`. Message.mjs lost its module-level `idCounter`; `IdGenerator.getId()` handles the per-prefix counting.",
            "Ran the worker suite before wiring anything in: Base.spec.mjs, RemoteMethodAccess.spec.mjs and Manager.spec.mjs, 58 tests, all green. Any failure from here on is caused by the migration, not by pre-existing flakiness.",
            "The lint rule `no-restricted-syntax` bans `#private` fields because the docs generator cannot parse them yet. `_map` and `_settle()` now follow the underscore convention used elsewhere (e.g. `_vdom` in Component) and are tagged `@private` in JSDoc.",
        ],
        "code": [
            """```js
// <<file>>
class PendingRequests {
    _map = new Map()

    get size() {
        return this._map.size
    }

    register(id, {action=null, timeout=0} = {}) {
        return new Promise((resolve, reject) => {
            const entry = {action, reject, resolve, startedAt: performance.now(), timer: null};

            if (timeout > 0) {
                entry.timer = setTimeout(() => {
                    this.reject(id, new TimeoutError(action, timeout))
                }, timeout)
            }

            this._map.set(id, entry)
        })
    }

    _settle(id) {
        const entry = this._map.get(id);

        if (entry) {
            clearTimeout(entry.timer);
            this._map.delete(id)
        }

        return entry
    }
}
```""",
            """```js
resolve(id, value) {
    const entry = this._settle(id);

    if (!entry) {
        Neo.config.environment === 'development' && Neo.logDebug('PendingRequests: late reply for', id);
        return false
    }

    entry.resolve(value);
    return true
}
```""",
            """```js
snapshot() {
    const now = performance.now();

    return [...this._map].map(([id, entry]) => ({
        id,
        action: entry.action,
        ageMs : Math.round(now - entry.startedAt)
    }))
}
```

```
> Neo.worker.App.pendingRequests.snapshot()
[ {id: 'app-msg-311', action: 'updateDom',    ageMs: 4},
  {id: 'app-msg-312', action: 'remoteMethod', ageMs: 1} ]
```""",
            """```diff
--- a/<<file>>
+++ b/<<file>>
@@ -1,12 +1,11 @@
-let idCounter = 0;
+import IdGenerator from '../core/IdGenerator.mjs';

 class Message {
     constructor(config) {
         Object.assign(this, config);
-        this.id = 'neo-worker-' + (++idCounter)
+        this.id = IdGenerator.getId(`${Neo.workerId ?? 'main'}-msg`)
     }
 }
```""",
            """```
$ npx playwright test test/playwright/unit/worker
Running 58 tests using 4 workers
  ok  worker/Base.spec.mjs (31)                  4.1s
  ok  worker/RemoteMethodAccess.spec.mjs (17)    2.2s
  ok  worker/Manager.spec.mjs (10)               1.1s
  58 passed (7.4s)
```""",
            """```
$ npm run lint -- src/worker/PendingRequests.mjs
src/worker/PendingRequests.mjs
  12:5  error  Private class fields are not allowed, use an underscore member  no-restricted-syntax
  41:9  error  Private class fields are not allowed, use an underscore member  no-restricted-syntax
x 2 problems (2 errors, 0 warnings)
```""",
        ],
    },
    "migrate": {
        "thoughts": [
            "Registration must happen before the message leaves the realm. Replies can arrive before `postMessage` even returns to our code when the other side is idle, so ordering matters.",
            "The reply branch is the hottest path in the framework (every DOM delta comes back through it), so the change should not add allocations per message.",
            "Generated stubs build messages by hand today; routing them through promiseMessage gives them registration, prefixed ids and timeouts without extra code.",
            "Removing the Manager's map is the point where both sides finally share one implementation; after that the id collision cannot happen any more.",
            "An error saying there is no pending request for an id means either the reply beat its registration or the registration went into a different registry. Both are ordering questions, so I'll log the order of events.",
            "Apps should never have touched `worker.promises`, but a grep over apps/ and examples/ is cheap insurance before deleting the field for good.",
        ],
        "details": [
            "`<<sym>>` in <<file>> now creates the message, registers it with `this.pendingRequests`, and only then posts it. The old `promises` object is gone; a getter with a deprecation warning remains for one release so apps fail loudly instead of silently.",
            "The reply branch in `<<sym>>()` calls `pendingRequests.reject()` when `data.reject` is set and `resolve()` otherwise, then returns early. Unknown reply ids fall through to the debug log added earlier instead of throwing. No new objects are created per reply.",
            "In <<file>>, `generateRemote()` stubs now call `promiseMessage()` instead of building messages by hand, and `<<sym>>()` wraps the call in try/catch and replies with `{reject: true, data: serializeError(err)}`.",
            "`<<sym>>()` in <<file>> used to fall back to its own `promises` map whenever `opts.promise` was set. It now delegates to the Manager's `pendingRequests` instance, and the reply handler in `onWorkerMessage()` uses the same resolve/reject calls as the workers: 46 lines removed, 12 added.",
            "Root cause: the Data worker answered `registerRemote` within the same task, and `<<sym>>` in <<file>> saw the reply for a request the Manager had not registered yet, because registration happened after `worker.postMessage()`. Moving `register()` in front fixed it; I added a comment so nobody swaps them back.",
            "Two hits: apps/portal/view/learn/ContentComponent.mjs awaited `Neo.worker.App.promises[id]` to wait for a highlight call, and examples/worker/remoteMethods/MainContainer.mjs logged `Object.keys(worker.promises)`. The first now awaits the promise returned by `promiseMessage()`, the second uses `pendingRequests.snapshot()`.",
        ],
        "code": [
            """```js
// <<file>>
promiseMessage(dest, opts, transfer) {
    let me      = this,
        message = me.createMessage(dest, opts),
        promise = me.pendingRequests.register(message.id, {
            action : opts.action,
            timeout: opts.timeout
        });

    // register first: the reply may arrive before postMessage returns
    me.postToDestination(dest, message, transfer);
    return promise
}
```""",
            """```js
if (action === 'reply') {
    if (data.reject) {
        me.pendingRequests.reject(replyId, deserializeError(data.data, data.origin))
    } else {
        me.pendingRequests.resolve(replyId, data.data)
    }
    return
}
```""",
            """```js
// <<file>>
generateRemote(remote, method) {
    let me = this;

    return (data, buffer) => me.promiseMessage(remote.origin, {
        action         : 'remoteMethod',
        data,
        remoteClassName: remote.className,
        remoteMethod   : method
    }, buffer)
}

async onRemoteMethod(msg) {
    let me = this;

    try {
        me.reply(msg, await me.resolveRemoteMethod(msg)(msg.data, msg))
    } catch (err) {
        me.reject(msg, serializeError(err))
    }
}
```""",
            None,
            """```
Uncaught (in promise) Error: No pending request for id data-msg-12
    at PendingRequests.resolve (PendingRequests.mjs:58:19)
    at Manager.onWorkerMessage (Manager.mjs:402:38)
    at Worker.onmessage (Manager.mjs:188:22)

[order] post   data-msg-12 registerRemote
[order] reply  data-msg-12            <- before register
[order] register data-msg-12
```""",
            """```
$ git grep -n "promises\\[" apps examples
apps/portal/view/learn/ContentComponent.mjs:212:        await Neo.worker.App.promises[msgId];
examples/worker/remoteMethods/MainContainer.mjs:88:        console.log(Object.keys(worker.promises));
```""",
        ],
    },
    "errors": {
        "thoughts": [
            "Structured clone can copy Error objects in modern browsers, but not their subclass identity and not reliably the stack in Firefox. An explicit plain-object form is the portable choice.",
            "Developers debugging a failed remote call need the worker-side stack; the main-thread stack only shows the message pump, which is useless.",
            "JavaScript lets you throw anything. The reply path must never assume `err.message` exists, or a `throw 'nope'` turns into a second, more confusing error.",
            "A DataCloneError on the reply is always a programming error (returning a live instance), so the message should name the method to make the fix obvious.",
        ],
        "details": [
            "Added `<<sym>>()` and `deserializeError()` in <<file>>. The wire format is `{name, message, stack, cause, remote: true}`; `cause` is serialized recursively up to depth 5. `deserializeError()` recreates known classes (`TypeError`, `RangeError`, `TimeoutError`, `RemoteError`) and falls back to `Error` with the original `name`.",
            "Deserialized stacks now start with `[remote: app worker]` followed by the original frames, so DevTools shows both where it failed and where it was awaited (the local stack is appended under `--- awaited at ---`).",
            "`<<sym>>` wraps non-Error values: strings become the message, objects are kept as `cause` (after a structured-clone check) and the name is `RemoteError`. Callers can always rely on `err.message` and `err.name`.",
            "`<<sym>>()` catches `DataCloneError` when posting the reply and rejects instead, naming the remote method and the class of the value that could not be cloned.",
        ],
        "code": [
            """```js
// <<file>>
export function serializeError(err, depth=0) {
    if (!(err instanceof Error)) {
        err = new RemoteError(typeof err === 'string' ? err : 'Non-error value thrown', {cause: err})
    }

    return {
        name   : err.name,
        message: err.message,
        stack  : err.stack,
        cause  : err.cause instanceof Error && depth < 5 ? serializeError(err.cause, depth + 1) : err.cause,
        remote : true
    }
}
```""",
            """```js
export function deserializeError(data, origin='worker') {
    const Cls   = KNOWN_ERRORS[data.name] || Error,
          cause = data.cause?.remote ? deserializeError(data.cause, origin) : data.cause,
          error = new Cls(data.message, {cause});

    error.name  = data.name;
    error.stack = `[remote: ${origin}] ${data.stack}`;
    return error
}
```""",
            """```js
export class RemoteError extends Error {
    constructor(message, options) {
        super(message, options);
        this.name = 'RemoteError'
    }
}

// worker side                     main thread receives
// throw 'nope'                 -> RemoteError: nope
// Promise.reject({code: 42})   -> RemoteError: Non-error value thrown (cause: {code: 42})
```""",
            """```
Error: remote method 'getComponent' returned a value that cannot be cloned (Neo.component.Base);
       return a config or an id instead
    [remote: app worker] at RemoteMethodAccess.onRemoteMethod (RemoteMethodAccess.mjs:131:17)
    --- awaited at ---
    at MainContainer.onButtonClick (MainContainer.mjs:54:25)
```""",
        ],
    },
    "lifecycle": {
        "thoughts": [
            "Termination is the case that actually leaks in production: a SharedWorker port closing when a tab goes away leaves every pending call of that tab hanging.",
            "The timeout has to be threaded through without changing every call site; an optional field on the existing options object does that.",
            "Logging which VDom update got stuck is only useful if it names the component; the vnode count helps tell a huge update from a dead worker.",
            "A soak test with the heaviest example is the quickest way to catch timers that are never cleared; unit tests would not show that.",
        ],
        "details": [
            "`<<sym>>()` in <<file>> now calls `pendingRequests.rejectAll(new WorkerTerminatedError(name))` when a worker is terminated or a SharedWorker port fires `close`. The registry clears every timer as part of `rejectAll()`.",
            "`<<sym>>(dest, {action, ..., timeout})` passes `timeout` to `register()`. Timed-out calls reject with `TimeoutError` (`name: 'TimeoutError'`, `action`, `elapsedMs`). The reply, if it ever arrives, is dropped by the settle-once rule.",
            "VDom updates use `timeout: 30_000`. On timeout `<<sym>>()` logs once with the component id and vnode count, and resets the component's `isVdomUpdating` flag so the next update is not blocked forever.",
            "Soak test: bigData grid, 100k rows, automated scrolling for five minutes while polling `<<sym>>()` every second. Pending count stayed between 0 and 3, no entry older than 40ms, and the timer count in the performance panel was flat.",
        ],
        "code": [
            """```js
// <<file>>
onWorkerTerminate(name, reason='terminated') {
    let me = this;

    me.pendingRequests.rejectAll(new WorkerTerminatedError(name, reason));
    me.workers[name] = null
}

// src/worker/PendingRequests.mjs
rejectAll(error) {
    for (const id of [...this._map.keys()]) {
        this._settle(id).reject(error)
    }
}
```""",
            """```js
// usage
await Neo.worker.App.promiseMessage('data', {
    action         : 'remoteMethod',
    remoteClassName: 'Neo.data.Store',
    remoteMethod   : 'load',
    timeout        : 10_000
});
// rejects with TimeoutError {action: 'remoteMethod', elapsedMs: 10000} if no reply arrives
```""",
            """```
[VdomLifecycle] VDom update for neo-grid-body-1 (4,112 vnodes) timed out after 30000ms
    pending: app-msg-88412 (updateDom, 30002ms)
    isVdomUpdating reset; next update allowed
```""",
            """```
[soak] t=060s pending=1 oldest=12ms timers=1
[soak] t=120s pending=0 oldest=-    timers=0
[soak] t=180s pending=3 oldest=38ms timers=3
[soak] t=240s pending=2 oldest=21ms timers=2
[soak] t=300s pending=0 oldest=-    timers=0
[soak] done: 91,406 round trips, max pending 3, 0 timeouts
```""",
        ],
    },
    "tests": {
        "thoughts": [
            "Unit tests for the registry need no browser context; they can import the module directly, which keeps them fast.",
            "Round-trip tests are the right shape for serialization: serialize, pass through structuredClone to mimic postMessage, deserialize, compare.",
            "A test that sleeps 50ms to wait for a 20ms timeout is a flake waiting to happen on a loaded CI runner. Fake timers remove the race completely.",
            "The integration test has to terminate a real worker, so it belongs in the component suite where workers actually exist.",
            "Before calling the migration done I want the complete unit and component suites green in both browsers, not just the worker folder.",
            "Before blaming our change for a slower test I'll check the test's own history; fixture changes are a common cause.",
        ],
        "details": [
            "Added <<file>> with 14 tests: settle-once, late replies returning `false`, timeouts rejecting with `TimeoutError`, `rejectAll()` clearing timers, `snapshot()` ages, and `size` after each operation.",
            "<<file>> covers: TypeError keeps its class, a custom `ValidationError` falls back to Error with `name` preserved, `throw 'nope'` becomes `RemoteError('nope')`, a rejected plain object ends up in `cause`, and a three-level cause chain survives `structuredClone` intact.",
            "The flaky test awaited a real 50ms sleep for a 20ms timeout; on a busy runner the assertion sometimes ran first. It now uses `page.clock.install()` and `clock.runFor(20)`, so the timeout fires deterministically.",
            "The integration test starts a remote call that never replies (a test-only `Neo.worker.Data.hang()` method), terminates the Data worker and expects `WorkerTerminatedError` with `worker: 'data'` within 100ms.",
            "Full run, Chromium and Firefox: unit suite 1,284 passed and 2 skipped (both skips are pre-existing Safari-only tests), component suite green. No test touches `worker.promises` any more.",
            "The extra time in <<file>> comes from a fixture added the same week (it loads 2,000 events instead of 200). With the old fixture, main and this branch take the same time within 15ms.",
        ],
        "code": [
            """```js
// <<file>>
test('settles only once', async () => {
    const pending = new PendingRequests(),
          promise = pending.register('app-msg-1');

    expect(pending.resolve('app-msg-1', 42)).toBe(true);
    expect(pending.resolve('app-msg-1', 43)).toBe(false); // late duplicate

    await expect(promise).resolves.toBe(42);
    expect(pending.size).toBe(0)
});
```""",
            """```js
// <<file>>
test('keeps a nested cause chain', () => {
    const inner = new RangeError('index 99 out of range'),
          outer = new Error('load failed', {cause: new TypeError('bad record', {cause: inner})}),
          back  = deserializeError(structuredClone(serializeError(outer)), 'data worker');

    expect(back.message).toBe('load failed');
    expect(back.cause).toBeInstanceOf(TypeError);
    expect(back.cause.cause).toBeInstanceOf(RangeError);
    expect(back.stack.startsWith('[remote: data worker]')).toBe(true)
});
```""",
            """```diff
-    const promise = pending.register('app-msg-2', {timeout: 20});
-    await new Promise(resolve => setTimeout(resolve, 50));
+    await page.clock.install();
+    const promise = pending.register('app-msg-2', {timeout: 20});
+    await page.clock.runFor(20);
     await expect(promise).rejects.toThrow(TimeoutError)
```""",
            """```js
// <<file>>
test('pending call rejects when the data worker dies', async ({page}) => {
    await page.goto('test/playwright/component/apps/empty-viewport/index.html');

    const result = await page.evaluate(async () => {
        const call = Neo.worker.App.promiseMessage('data', {action: 'remoteMethod', remoteMethod: 'hang'});
        Neo.worker.Manager.terminate('data');
        return call.then(() => 'resolved', err => `${err.name}:${err.worker}`)
    });

    expect(result).toBe('WorkerTerminatedError:data')
});
```""",
            """```
$ npm run test-unit
Running 1,286 tests using 4 workers
  ok  worker/PendingRequests.spec.mjs (14)       0.9s
  ok  worker/ErrorSerializer.spec.mjs (9)        0.4s
  ok  worker/Base.spec.mjs (58)                  6.2s
  ok  grid/RowModel.spec.mjs (9)                 2.1s
  ...
  1284 passed, 2 skipped (3m41s)
```""",
            """```
WeekView.spec.mjs 'renders 2,000 events'
  main, before the fixture change   1.21s
  main, after the fixture change    1.52s
  this branch                       1.53s
```""",
        ],
    },
    "perf": {
        "thoughts": [
            "A Map lookup and one closure per request should cost next to nothing, but the reply path runs thousands of times per second during grid scrolling, so I want numbers instead of intuition.",
            "Code that only runs when a developer types it into the console has no production cost worth optimizing away.",
            "The risk with registries is retention: if any code path forgets to delete, memory grows slowly. Heap snapshots at two points in time answer that directly.",
        ],
        "details": [
            "Benchmark (<<file>>): 100k `promiseMessage` round trips from the App worker to the main thread, no-op remote method, Chrome 131, M2. Three runs each, medians below. The difference is within run-to-run noise.",
            "`<<sym>>()` allocates only when called, and nothing in the framework calls it. Bundle size impact: 212 bytes minified. Keeping it means production bugs can be diagnosed from the console without a special build.",
            "Heap snapshots after 1k and after 20k remote calls in the portal app: `PendingRequests._map` holds 0 entries between bursts, and the App worker heap differs by 41 KB (string table growth from the log buffer, unrelated).",
        ],
        "code": [
            """```
round trips: 100,000   payload: {n: <int>}   workers: app <-> main

                      median     p95      per message
old promises object   1,912ms    2,030ms  19.1us
PendingRequests       1,953ms    2,061ms  19.5us
delta                   +41ms      +31ms  +0.4us (2.1%)
```""",
            """```
dist/production/src/worker/PendingRequests.mjs   1,904 B   (snapshot(): 212 B)
dist/production/src/worker/Base.mjs              9,871 B   (-388 B, promises map removed)
```""",
            """```
Snapshot 1 (1k calls)   App worker heap 18.4 MB   PendingRequests entries 0
Snapshot 2 (20k calls)  App worker heap 18.4 MB   PendingRequests entries 0
Comparison: +41 KB (strings), 0 retained Promise, 0 retained Timeout
```""",
        ],
    },
    "docs": {
        "thoughts": [
            "The guide should answer the questions people will ask after this lands: what happens on timeout, what error do I get, and how do I debug a hanging call.",
            "JSDoc is where IDE users will meet the `timeout` option, so it has to list the rejection types explicitly.",
            "Removing `worker.promises` is technically breaking even though it was never documented; the changelog must say so with a one-line migration.",
            "The PR description should let a reviewer understand the change without reading all 40 steps of this session.",
        ],
        "details": [
            "Wrote <<file>>: how message ids are built, the request lifecycle (register, post, settle), timeouts (opt-in, VDom 30s), error propagation (remote stacks, `RemoteError`), termination (`WorkerTerminatedError`), and a debugging section showing `snapshot()`.",
            "JSDoc for `<<sym>>(id, {action, timeout})` documents the return value and both rejection types; `promiseMessage` now documents `opts.timeout`. `npm run generate-docs` builds without warnings.",
            "Changelog entry under v10.9.0 in <<file>>, with the breaking change in bold and the one-line migration right below it.",
            "PR description sections: Problem (leaks, id collisions, string errors), Design, Migration (two apps updated), Tests (14 + 9 unit, 1 integration, full suites green), Performance (+0.4us per message), Follow-ups (#13872: transferables for large payloads).",
        ],
        "code": [
            """```md
## Debugging a hanging remote call

Every realm owns a `PendingRequests` registry. In the console of the App worker:

    Neo.worker.App.pendingRequests.snapshot()

Each entry shows the message id (prefixed with the worker name), the action and its age.
An entry that keeps growing older points at the worker named in its id.
```""",
            """```js
/**
 * Registers a request and returns a promise that settles with the reply.
 * @param {String} id The message id, e.g. 'app-msg-17'
 * @param {Object} [options]
 * @param {String} [options.action] Used in error messages and snapshot()
 * @param {Number} [options.timeout=0] In ms, 0 disables the timeout
 * @returns {Promise<*>} Rejects with TimeoutError or WorkerTerminatedError
 */
register(id, {action=null, timeout=0} = {}) {
```""",
            """```md
### Worker messaging (#13870)
- One `PendingRequests` registry per realm; message ids are prefixed with the worker name.
- Opt-in `timeout` for remote calls; VDom updates time out after 30s.
- Remote errors keep name, message, stack and cause.
- **BREAKING:** `worker.promises` was removed. Use `promiseMessage()` instead.
```""",
            """```md
## Worker messaging: one PendingRequests registry per realm (#13870)

- fixes leaked promises when a worker dies or never replies
- fixes reply id collisions between workers (ids are now `app-msg-17`, `data-msg-4`)
- remote errors keep name, stack and cause
- opt-in timeouts; VDom updates time out after 30s

Follow-up: #13872 (transferables for large payloads)
```""",
        ],
    },
}

WORKER_NOTES = {
    "explore": [
        "For reference, the layers: `postMessage` is the browser API; `sendMessage()` wraps it and builds the Message; `promiseMessage()` wraps `sendMessage()` and adds the bookkeeping. Only the last layer knows about replies, which is why code that calls `sendMessage()` directly has to copy the bookkeeping.",
        "SharedWorker mode matters here: with several tabs connected, the App worker talks to one Manager per tab through separate ports, and a port can disappear without any message when a tab is closed.",
        "Relevant history: #12504 added the Data worker's remote methods and copied the promise handling from Base instead of reusing it. The copies have drifted since (the Data worker variant does not delete entries on reject).",
    ],
    "design": [
        "Scope check against #13870: the issue asks for no leaks and correct replies. Timeouts and structured errors are not strictly required, but they touch the same code and are cheap now; adding them later would mean migrating every call site twice.",
        "One registry per realm also keeps ownership obvious: whoever registered a request is the only one who can settle it, because replies are always routed back to the realm that sent the message.",
        "I checked that nothing posts the same Message object twice; ids stay one-to-one with requests, which the registry relies on.",
    ],
    "registry": [
        "`PendingRequests` has no dependencies besides `performance.now()` and timers, so it runs the same in a dedicated worker, a SharedWorker and the main thread.",
        "The registry is exported as a class, not a singleton: the Manager and each worker create their own instance in `construct()`, which also keeps tests isolated.",
        "The error classes (`TimeoutError`, `WorkerTerminatedError`) live next to the registry in src/worker/errors.mjs, so callers can `instanceof`-check them without importing the registry.",
    ],
    "migrate": [
        "Migration order: Base first (all workers inherit it), then RemoteMethodAccess (generated stubs), then the Manager. Each step keeps the app working, so any breakage can be pinned to a single step.",
        "I loaded the portal and the covid example after each migration step; both start and navigate normally, and the console shows no unhandled rejections.",
        "The deprecation getter for `worker.promises` logs once per worker with a pointer to the changelog, then returns an empty frozen object, so old code fails visibly instead of hanging.",
    ],
    "errors": [
        "The wire format is unversioned on purpose: both sides of a postMessage always run the same build, so there is no compatibility window to handle.",
        "Remote stacks used to be lost entirely; now the DevTools console shows the worker frames with working source links, since file URLs are identical in every realm.",
        "Serialization only runs on the reject path, so successful replies are untouched and pay nothing for this.",
    ],
    "lifecycle": [
        "Termination and timeouts go through the same `_settle()` path as normal replies, so a request can never be rejected twice even if a reply, a timeout and a termination race each other.",
        "SharedWorker ports do not fire a reliable `close` event in every browser, so the Manager also treats three missed heartbeats as a closed port.",
        "Every rejection reason carries the message id, so `snapshot()` output, console errors and CI logs can be correlated without guesswork.",
    ],
    "tests": [
        "The new unit tests import the modules directly and skip the full app boot, which keeps the worker unit folder under ten seconds.",
        "The test helpers gained a `createPending()` factory that returns a registry plus a fake clock, so future tests do not repeat the setup.",
        "CI runs the unit suite in Chromium and Firefox; WebKit only runs nightly, so I triggered the nightly job by hand for this branch.",
    ],
    "perf": [
        "Method: every benchmark runs a 10k warm-up first, then three measured runs with the browser otherwise idle; results vary by about 3% between runs.",
        "The hot path per reply is now one `Map.get`, one `Map.delete` and one `clearTimeout` (skipped when no timer was set), comparable to the old object-based code.",
        "For scale: the VDom diff of a typical grid update takes 2-10ms, so the registry's overhead is four orders of magnitude below the work it coordinates.",
    ],
    "docs": [
        "The guide links to the JSDoc of `PendingRequests` and to both error classes, so readers can go from concept to API in one click.",
        "I checked the rendered pages in the local portal (`npm run server-start`) to make sure the code blocks and the tree entry show up as expected.",
        "Terminology is now consistent across code and docs: 'request' for a registered message, 'reply' for the answer, 'settle' for resolve or reject.",
    ],
}


# Test names for the run logs: (the turn from which the test exists, 0-based, name).
WORKER_TESTS = [
    (0, "Base promiseMessage resolves a reply"),
    (0, "Base onMessage ignores unknown actions"),
    (0, "RemoteMethodAccess registerRemote builds stubs"),
    (0, "Manager sendMessage to a missing worker throws"),
    (10, "Message ids carry the worker prefix"),
    (13, "promiseMessage registers before posting"),
    (15, "generated stubs use promiseMessage"),
    (15, "onRemoteMethod replies with a structured error"),
    (19, "serializeError keeps the cause chain"),
    (20, "remote stacks are prefixed"),
    (24, "timeout option rejects with TimeoutError"),
    (27, "PendingRequests settles only once"),
    (27, "late reply returns false"),
    (27, "rejectAll clears timers"),
]


# --- L2: big-data grid blank rows and jank (#13911), 35 turns, no mini summaries ----------------
# Each beat: (phase, prompt, outcome sentence, file, symbol)

GRID_BEATS = [
    (
        "repro",
        "The big data grid example (examples/grid/bigData) shows blank rows when I scroll fast with 100k rows and 50 columns (#13911). Reproduce it.",
        "Reproduced blank rows at 100k x 50 after flinging the scrollbar; they only fill in on the next scroll event.",
        "examples/grid/bigData/MainContainer.mjs",
        "amountRows",
    ),
    (
        "repro",
        "Is it tied to the number of columns? Try 10 and 200.",
        "Blank rows appear at 50 and 200 columns but never at 10, so per-row render cost is part of the trigger.",
        "examples/grid/bigData/ControlsContainer.mjs",
        "amountColumns",
    ),
    (
        "repro",
        "Does it happen in Chrome and Firefox both?",
        "Both browsers show it; Firefox hits it on almost every fling, Chrome on roughly one in three.",
        "examples/grid/bigData/MainContainer.mjs",
        "onScroll",
    ),
    (
        "profile",
        "Profile a fast scroll, App worker and main thread.",
        "The profile shows createViewData taking around 38ms per update in the App worker, longer than the scroll event interval.",
        "src/grid/Body.mjs",
        "createViewData",
    ),
    (
        "profile",
        "What's inside those 38ms?",
        "Most of the time goes into column renderers and VDOM diffing of rows whose ids change on every recycle.",
        "src/grid/Body.mjs",
        "createRow",
    ),
    (
        "profile",
        "Count how many VDOM deltas each scroll step produces.",
        "Counted about 4,100 deltas per scroll step, mostly attribute and text updates on recycled rows.",
        "src/util/VdomHelper.mjs",
        "createDeltas",
    ),
    (
        "rootcause",
        "Why do recycled rows change their ids?",
        "Body.createRow derives row ids from the record index instead of the row slot, so every shifted row gets a new id and is fully re-rendered.",
        "src/grid/Body.mjs",
        "getRowId",
    ),
    (
        "rootcause",
        "And the blank rows themselves?",
        "The blank rows come from a dropped update: a guard skips rendering while a previous update is in flight and nothing re-queues it.",
        "src/grid/Body.mjs",
        "updateScrollPosition",
    ),
    (
        "rootcause",
        "Show me the exact code path where the update gets dropped.",
        "Walked through afterSetStartIndex -> createViewData -> update(), where the isVdomUpdating early return discards the newer start index.",
        "src/grid/Body.mjs",
        "afterSetStartIndex",
    ),
    (
        "rootcause",
        "Check the history of that guard. Why was it added?",
        "The guard came in with #12210 to stop recursive updates triggered from afterSetScrollTop, so it has to stay in some form.",
        "src/grid/Body.mjs",
        "afterSetScrollTop",
    ),
    (
        "fix",
        "Fix the dropped update first: queue it instead of skipping it.",
        "Replaced the early return with a needsUpdate flag that triggers one more render after the in-flight update resolves.",
        "src/grid/Body.mjs",
        "createViewData",
    ),
    (
        "fix",
        "Rapid scrolls must coalesce into one follow-up update, not a queue of twenty.",
        "Verified coalescing: twenty scroll events during one update now produce exactly one follow-up render with the latest start index.",
        "src/grid/Body.mjs",
        "onUpdateDone",
    ),
    (
        "fix",
        "Now stabilize the row ids: derive them from the row slot.",
        "Switched row ids to slot-based ids (`neo-grid-body-1__row-7`) so recycled rows keep their DOM nodes and only cell content changes.",
        "src/grid/Body.mjs",
        "getRowId",
    ),
    (
        "fix",
        "The selection highlight is wrong after your id change. Fix it.",
        "Moved the selection lookup to record keys stored in `data-record-id`, so the highlight follows the record instead of the slot.",
        "src/selection/grid/RowModel.mjs",
        "onRowClick",
    ),
    (
        "fix",
        "Test it in the bigData example again.",
        "Re-ran the bigData example: no blank rows in 50 flings, and createViewData dropped from about 38ms to 14ms.",
        "examples/grid/bigData/MainContainer.mjs",
        "createViewData",
    ),
    (
        "fix",
        "Row striping breaks when scrolling by an odd number of rows.",
        "Fixed striping by computing the even/odd class from the record index instead of the slot index.",
        "src/grid/Body.mjs",
        "createRow",
    ),
    (
        "colvirt",
        "Columns: can we render only the visible columns plus a buffer?",
        "Outlined column virtualization: a bufferColumnRange config mirroring bufferRowRange, driven by scrollLeft and column widths.",
        "src/grid/Body.mjs",
        "bufferColumnRange",
    ),
    (
        "colvirt",
        "Implement bufferColumnRange on the Body.",
        "Implemented bufferColumnRange with a mountedColumns range computed from cumulative column widths.",
        "src/grid/Body.mjs",
        "updateMountedColumns",
    ),
    (
        "colvirt",
        "Horizontal scrolling now shows empty cells for a moment. Why?",
        "The empty cells appear because ScrollManager never forwards scrollLeft to the body, so mountedColumns lags behind.",
        "src/grid/ScrollManager.mjs",
        "onContainerScroll",
    ),
    (
        "colvirt",
        "Wire ScrollManager's scrollLeft into the body.",
        "ScrollManager now sets body.scrollLeft on every horizontal scroll, throttled to one animation frame.",
        "src/grid/ScrollManager.mjs",
        "onContainerScroll",
    ),
    (
        "colvirt",
        "Locked (pinned) columns must always render.",
        "Locked columns are now excluded from virtualization and always part of the mounted range.",
        "src/grid/Body.mjs",
        "updateMountedColumns",
    ),
    (
        "colvirt",
        "Header and body column alignment drifts after resizing a column.",
        "Fixed the drift by recomputing the cumulative width cache in afterSetColumnPositions after a resize.",
        "src/grid/header/Toolbar.mjs",
        "afterSetColumnPositions",
    ),
    (
        "tests",
        "Add component tests for the scrolling behaviour.",
        "Added component tests that fling-scroll a 100k row grid and assert every mounted row has content.",
        "test/playwright/component/grid/BigData.spec.mjs",
        "scrollTo",
    ),
    (
        "tests",
        "Add a unit test for the needsUpdate coalescing.",
        "Added a unit test that fires twenty start index changes during a pending update and expects one follow-up render.",
        "test/playwright/unit/grid/Body.spec.mjs",
        "needsUpdate",
    ),
    (
        "tests",
        "The new component test times out in headless Firefox.",
        "Fixed the Firefox timeout by waiting for the grid's `scrollDone` event instead of a fixed number of animation frames.",
        "test/playwright/component/grid/BigData.spec.mjs",
        "waitForScroll",
    ),
    (
        "tests",
        "Run the whole grid test folder.",
        "Ran all grid unit and component tests in Chrome and Firefox: 212 passed, 0 failed.",
        "test/playwright/component/grid",
        "createViewData",
    ),
    (
        "perf",
        "Give me before/after numbers for the bigData example.",
        "Measured before/after: update time 38ms -> 11ms, deltas per step 4,100 -> 620, dropped frames during a fling 41% -> 3%.",
        "examples/grid/bigData/MainContainer.mjs",
        "createViewData",
    ),
    (
        "perf",
        "Check memory after ten minutes of scrolling.",
        "Ten minutes of automated scrolling kept the App worker heap flat at about 61 MB and the DOM node count constant.",
        "examples/grid/bigData/MainContainer.mjs",
        "amountRows",
    ),
    (
        "perf",
        "What does the main thread look like now? Any long tasks left?",
        "The main thread has no long tasks left during scrolling; the largest applyDeltas call takes 6ms.",
        "src/main/DeltaUpdates.mjs",
        "update",
    ),
    (
        "perf",
        "Try one million rows.",
        "One million rows by 50 columns scroll without blank rows; store creation (2.9s) is now the slowest part, not rendering.",
        "src/data/Store.mjs",
        "add",
    ),
    (
        "cleanup",
        "Remove the debug logging and the temporary counters.",
        "Removed the temporary delta counters and console timing calls from Body and VdomHelper.",
        "src/grid/Body.mjs",
        "createViewData",
    ),
    (
        "cleanup",
        "Should bufferColumnRange be called columnBufferSize? Check consistency with bufferRowRange.",
        "Kept the name bufferColumnRange for symmetry with the existing bufferRowRange config.",
        "src/grid/Body.mjs",
        "bufferColumnRange",
    ),
    (
        "cleanup",
        "Expose both buffer configs in the bigData example's controls panel.",
        "Added number fields for bufferRowRange and bufferColumnRange to the bigData controls, bound to the body configs.",
        "examples/grid/bigData/ControlsContainer.mjs",
        "onBufferFieldChange",
    ),
    (
        "cleanup",
        "Update the grid docs for the new config.",
        "Documented bufferColumnRange and the slot-based row ids in the grid guide and the Body JSDoc.",
        "learn/guides/components/Grid.md",
        "bufferColumnRange",
    ),
    (
        "cleanup",
        "Write the commit messages, split into logical commits.",
        "Split the work into four commits: the dropped-update fix, stable row ids, column virtualization, and tests plus docs.",
        "src/grid/Body.mjs",
        "createViewData",
    ),
]

# Per phase: thoughts, details and code aligned with the phase's beats, in order.

GRID_PHASES = {
    "repro": {
        "thoughts": [
            "Before reading any code I want a reliable reproduction; a rendering bug that only shows on fast scrolls can easily be a timing artefact of DevTools being open.",
            "Varying one parameter at a time (rows, columns, browser) tells me whether this is about data size or render cost.",
            "If both engines show it, the cause is in our worker-side rendering, not in a browser's scroll handling.",
        ],
        "details": [
            "Steps: open examples/grid/bigData, set rows to 100,000 and columns to 50, drag the vertical scrollbar from the top to about 60% in under half a second and release. Result: 3 to 9 rows in the visible area stay empty (the row elements exist, the cells have no text) until the next wheel event.",
            "Matrix using the `<<sym>>` control in <<file>>: 10 columns, 0 of 20 flings blank; 50 columns, 7 of 20; 200 columns, 18 of 20. With 1,000 rows and 50 columns it never happens, because the whole store fits into the buffer. Row height makes no difference either (24px and 40px rows behave the same), so the trigger is the amount of work per rendered row, not the number of rows on screen. That points at the render path in the App worker; I'll profile it next.",
            "Firefox 133: blank rows on 19 of 20 flings. Chrome 131: 7 of 20. Both show the same pattern: the rows that should have scrolled into view last are the ones left empty.",
        ],
        "code": [
            """```js
// quick repro helper pasted into the App worker console
const body = Neo.getComponent('neo-grid-body-1');
for (let i = 0; i < 20; i++) {
    body.scrollTop = Math.round(Math.random() * body.store.getCount()) * body.rowHeight;
    await Neo.timeout(16)
}
console.log(body.vdom.cn.filter(row => !row.cn?.[0]?.text).length, 'blank rows')
```""",
            """```
rows      cols   flings   blank   max blank rows
1,000     50     20        0       0
100,000   10     20        0       0
100,000   50     20        7       6
100,000   200    20        18      9
```""",
            """```
browser        flings   blank   max blank rows
Chrome 131     20       7       6
Firefox 133    20       19      9
```""",
        ],
    },
    "profile": {
        "thoughts": [
            "Neo renders in the App worker, so the interesting part of the profile is the worker thread, not the main thread; the main thread only applies deltas.",
            "If the update takes longer than the interval between scroll events, updates overlap, and overlapping updates are where state gets lost.",
            "Counting deltas per step is a good proxy for wasted work: scrolling by one row should touch roughly one row's worth of cells, not the whole viewport.",
        ],
        "details": [
            "Recorded a 5s fling in the App worker. `<<sym>>` in <<file>> runs once per scroll event and takes 31-44ms (median 38ms). Scroll events arrive every 16ms, so two or three start index changes land while one update is still running.",
            "Breakdown of one 38ms update: column renderers 17.9ms (the bigData example formats every cell), VDOM diff 14.2ms, Store.getAt 1.3ms, the rest in row object creation. The diff is expensive because it compares rows whose ids changed.",
            "Added a temporary counter to `<<sym>>`: about 4,100 deltas per scroll step at 50 columns and 28 visible rows plus buffer. Nearly all are `updateNode` deltas for text and attributes on rows that only moved.",
        ],
        "code": [
            """```
createViewData            38.4ms (self 2.1ms)
  column.renderer          17.9ms
  VdomHelper.update        14.2ms
    createDeltas           11.8ms
  Store.getAt               1.3ms
  createRow (x46)           2.9ms
```""",
            """```
self time by function (App worker, 5s fling)
  Intl.NumberFormat.format     21.4%
  VdomHelper.createDeltas      19.7%
  Body.createCells             11.2%
  VdomHelper.compareAttributes  9.8%
  Store.getAt                   3.5%
```""",
            """```
[delta-counter] step=181 start=40211 deltas=4093 (updateNode 3987, moveNode 0, insertNode 106)
[delta-counter] step=182 start=40236 deltas=4120 (updateNode 4014, moveNode 0, insertNode 106)
[delta-counter] step=183 start=40249 deltas=4101 (updateNode 3995, moveNode 0, insertNode 106)
```""",
        ],
    },
    "rootcause": {
        "thoughts": [
            "Row ids should identify DOM slots, not records, if we want the diff to reuse nodes. If they follow records, every scroll turns into a remove-and-create in disguise.",
            "A guard that returns early without remembering the request is a classic lost update; the question is whether anything else re-triggers the render.",
            "Reading the call chain end to end shows exactly where the newer start index is lost; I'll annotate it instead of paraphrasing.",
            "Before changing a guard I need to know why it exists, otherwise I might bring back the bug it was meant to fix.",
        ],
        "details": [
            "`<<sym>>` in <<file>> returns `${me.id}__row-${rowIndex}` where `rowIndex` is the store index. When the viewport moves by 3 rows, all 46 rendered rows get new ids, so VdomHelper sees 46 changed rows and rewrites every cell, even if 43 of them only shifted.",
            "While an update is in flight, `isVdomUpdating` is true and `createViewData()` returns early. The newer `startIndex` is stored on the instance, but no second render is scheduled, so the view keeps the rows of the previous start index at the new scroll position: those are the blank rows.",
            "The chain: the ScrollManager sets `scrollTop`, `afterSetScrollTop()` computes `startIndex`, `<<sym>>()` calls `createViewData()`. If the previous `update()` has not resolved, the early return fires. The new `startIndex` is already stored, so the next render would be correct, but the next render only happens on the next scroll event.",
            'The guard came with #12210 ("grid: prevent recursive updates from afterSetScrollTop"). Its purpose was to stop a render from triggering itself through `<<sym>>`; it was never meant to drop updates coming from outside.',
        ],
        "code": [
            """```js
// <<file>> (current)
getRowId(rowIndex) {
    return `${this.id}__row-${rowIndex}` // rowIndex = store index
}

createViewData() {
    let me = this;

    if (me.isVdomUpdating) {
        return // <- newer startIndex is silently dropped
    }

    me.vdom.cn = me.createRows(me.startIndex, me.availableRows + 2 * me.bufferRowRange);
    me.update()
}
```""",
            None,
            """```
afterSetScrollTop(value)
  -> set startIndex = floor(value / rowHeight)
    -> afterSetStartIndex()
      -> createViewData()
         isVdomUpdating === true  -> return  (update lost)
  ... previous update resolves, nothing re-renders
```""",
            """```
$ git log -S "if (me.isVdomUpdating)" --oneline -- src/grid/Body.mjs
3f2a9c1e grid: prevent recursive updates from afterSetScrollTop (#12210)
$ git show --stat 3f2a9c1e
 src/grid/Body.mjs | 6 ++++++
 1 file changed, 6 insertions(+)
```""",
        ],
    },
    "fix": {
        "thoughts": [
            "The fix for the lost update should keep the recursion protection from #12210 but remember that a render was requested; a boolean flag is enough.",
            "Coalescing falls out naturally if the follow-up render reads `startIndex` when it runs, not when it was requested.",
            "Slot-based ids change what other code can rely on: anything that decoded the record index from a row id will break, so I'll grep for `__row-` first.",
            "The selection model is the obvious consumer of row ids; the fix should make it independent of ids altogether.",
            "A manual check in the real example is still worth doing; the component tests come later, and the bug was first reported from this exact page.",
            "Striping is purely visual, but users notice it instantly, and it is the one place where slot parity and record parity differ.",
        ],
        "details": [
            "`<<sym>>` in <<file>> now sets `me.needsUpdate = true` instead of returning silently when an update is in flight. `onUpdateDone()` checks the flag, clears it and calls `createViewData()` once more. Recursion from afterSetScrollTop is still blocked, since the follow-up runs after the promise settles.",
            "Twenty start index changes during one pending update set the flag twenty times and cause exactly one follow-up render, which reads the latest `startIndex`. Logging during a fling showed 61 scroll events and 19 renders, and the last render always matched the final position.",
            "`<<sym>>` now returns `${me.id}__row-${slotIndex}` with `slotIndex = rowIndex % mountedRowCount`. A row element keeps its id while it stays mounted, and VdomHelper only emits text and attribute updates for cells whose content changed. The record key goes into `data-record-id`.",
            "In <<file>>, `<<sym>>` read the record index out of the row id. It now reads `data-record-id` and looks the record up with `store.get(key)`. Keyboard navigation used the same parsing and was updated too.",
            "Same matrix as at the start: 100k rows, 50 and 200 columns, 20 flings each in Firefox and Chrome. Blank rows: none. The profile shows createViewData at 12-16ms (median 14ms), so updates rarely overlap any more; when they do, the follow-up render catches up within a frame.",
            "`<<sym>>()` used `slotIndex % 2` for the `neo-even`/`neo-odd` class after the id change, so scrolling by an odd number of rows flipped the stripes of every row. It now uses the record index, which is what the visual order is based on.",
        ],
        "code": [
            """```js
// <<file>>
createViewData() {
    let me = this;

    if (me.isVdomUpdating) {
        me.needsUpdate = true; // coalesced: the follow-up reads the latest startIndex
        return
    }

    me.vdom.cn = me.createRows(me.startIndex, me.mountedRowCount);
    me.promiseUpdate().then(() => me.onUpdateDone())
}

onUpdateDone() {
    if (this.needsUpdate) {
        this.needsUpdate = false;
        this.createViewData()
    }
}
```""",
            """```
[coalesce] fling start startIndex=0
[coalesce] render#1  start=0      needsUpdate set 4x while pending
[coalesce] render#2  start=2311   needsUpdate set 3x while pending
[coalesce] render#3  start=4980   needsUpdate set 3x while pending
...
[coalesce] fling end: 61 scroll events, 19 renders, final start=60422, rendered=60422
```""",
            """```js
createRow({record, rowIndex}) {
    let me        = this,
        slotIndex = rowIndex % me.mountedRowCount;

    return {
        id              : me.getRowId(slotIndex),
        'aria-rowindex' : rowIndex + 2, // header row is 1
        'data-record-id': me.store.getKey(record),
        cls             : ['neo-grid-row', slotIndex % 2 ? 'neo-odd' : 'neo-even'],
        cn              : me.createCells(record, rowIndex)
    }
}
```""",
            """```js
// <<file>>
onRowClick({data}) {
    let me       = this,
        rowNode  = data.path.find(node => node.cls.includes('neo-grid-row')),
        recordId = rowNode?.data?.recordId,
        record   = recordId && me.view.store.get(recordId);

    record && me.toggleRecordSelection(record)
}
```""",
            """```
rows      cols   browser    flings   blank   createViewData median
100,000   50     chrome     20       0       13.8ms
100,000   50     firefox    20       0       15.1ms
100,000   200    chrome     20       0       24.6ms
100,000   200    firefox    20       0       27.9ms
```""",
            """```diff
-        cls             : ['neo-grid-row', slotIndex % 2 ? 'neo-odd' : 'neo-even'],
+        cls             : ['neo-grid-row', rowIndex  % 2 ? 'neo-odd' : 'neo-even'],
```""",
        ],
    },
    "colvirt": {
        "thoughts": [
            "With 200 columns most cells are off screen horizontally, and rendering them costs the same as visible ones. Column virtualization is the same idea as bufferRowRange, turned 90 degrees.",
            "Column widths vary, so the visible range cannot be computed with a division like rows; a cumulative width array plus binary search is cheap and exact.",
            "Empty cells during horizontal scrolling mean the body renders an outdated column range; I'll check who tells the body about scrollLeft.",
            "Scroll events can fire faster than frames; forwarding once per animation frame is enough and avoids piling up updates.",
            "Locked columns stay visible regardless of scrollLeft, so they have to be outside the virtualized range, otherwise they flicker on horizontal scroll.",
            "If header and body compute column positions separately they will drift; there should be one source of truth.",
        ],
        "details": [
            "Plan for `<<sym>>` in <<file>>: a new config `bufferColumnRange_` (default 3). The body keeps `mountedColumns = [start, end]` derived from `scrollLeft`, the container width and a cumulative width cache. Cells outside the range are not rendered; a spacer keeps the row width so the scrollbar stays correct.",
            "`<<sym>>()` computes the range with a binary search over the cumulative widths and only re-renders when the range actually changes, so horizontal scrolling inside the buffer costs nothing.",
            "`<<sym>>()` in <<file>> handled vertical scrolling only; `scrollLeft` reached the header toolbar but not the body, so the body's mounted range stayed at the old position until a vertical scroll triggered a render.",
            "`<<sym>>()` in <<file>> now forwards `scrollLeft` to the body, throttled with `requestFrame()` so at most one update per frame is sent. The body's `afterSetScrollLeft()` calls `updateMountedColumns()` and only re-renders when the mounted range changes.",
            "Locked columns (`locked: 'start'` or `'end'`) are always added to the mounted set and rendered in their sticky positions; only unlocked columns are virtualized.",
            "Header and body each cached column positions, and only the header updated its cache on resize. `<<sym>>()` in <<file>> now pushes the new positions to the body, which drops its own cache. After dragging a column from 120px to 260px, header and body edges line up to the pixel.",
        ],
        "code": [
            """```
viewport : scrollLeft=1840, width=1200
columns  : 0 .. 9 | 10 11 12 | 13 ....... 26 | 27 28 29 | 30 .. 49
                    buffer       visible        buffer
mounted  : 10..29 (20 of 50 columns, plus locked columns)
```""",
            """```js
// <<file>>
updateMountedColumns() {
    let me        = this,
        {scrollLeft, containerWidth, bufferColumnRange} = me,
        positions = me.columnPositions, // cumulative widths, ascending
        first     = me.findColumnIndex(positions, scrollLeft),
        last      = me.findColumnIndex(positions, scrollLeft + containerWidth);

    me.mountedColumns = [
        Math.max(0, first - bufferColumnRange),
        Math.min(positions.length - 1, last + bufferColumnRange)
    ]
}
```""",
            """```
[scroll] scrollLeft=2210 header.scrollLeft=2210 body.mountedColumns=[0, 17]
[scroll] scrollLeft=2640 header.scrollLeft=2640 body.mountedColumns=[0, 17]   <- stale
[scroll] scrollTop=880 -> render, body.mountedColumns=[19, 38]
```""",
            """```js
// <<file>>
onContainerScroll({scrollLeft, scrollTop}) {
    let me = this;

    if (scrollLeft !== me.scrollLeft) {
        me.scrollLeft = scrollLeft;
        me.requestFrame(() => {me.gridBody.scrollLeft = me.scrollLeft})
    }

    if (scrollTop !== me.scrollTop) {
        me.scrollTop = scrollTop;
        me.gridBody.scrollTop = scrollTop
    }
}
```""",
            """```js
getMountedColumnIndexes() {
    let me           = this,
        [start, end] = me.mountedColumns,
        indexes      = [];

    me.columns.items.forEach((column, index) => {
        if (column.locked || (index >= start && index <= end)) {
            indexes.push(index)
        }
    });

    return indexes
}
```""",
            """```js
// <<file>>
afterSetColumnPositions(value, oldValue) {
    let grid = this.parent;

    if (value && grid?.body) {
        grid.body.columnPositions = value; // single source of truth
        grid.body.updateMountedColumns()
    }
}
```""",
        ],
    },
    "tests": {
        "thoughts": [
            "The component test has to reproduce the original bug, so it must scroll faster than one update takes; scrolling through the public API in a tight loop does that.",
            "The coalescing logic is pure state and can be tested without a browser page by stubbing promiseUpdate.",
            "Waiting for a fixed number of animation frames is inherently racy in headless Firefox, where rAF is throttled differently.",
            "Running the whole grid folder in both browsers checks that editing, selection and locking still work with the new row ids.",
        ],
        "details": [
            "<<file>>: creates a 100k x 50 grid, performs 30 random `<<sym>>` calls 10ms apart, waits for the grid to settle and asserts every mounted row has non-empty cells and the first row's `aria-rowindex` matches `startIndex + 2`.",
            "The unit test in <<file>> replaces `promiseUpdate` with a deferred promise, sets `startIndex` twenty times while it is pending, resolves it and expects exactly two renders, the second one with the final start index.",
            "The test waited for 5 animation frames after the last scroll, but headless Firefox throttles rAF, so the grid had not rendered yet. The grid now fires `scrollDone` after the follow-up render; the test waits for it via `<<sym>>()`.",
            "All grid tests in Chromium and Firefox: 212 passed, 0 failed. Three older tests that parsed `__row-<index>` ids had already been updated with the selection fix; nothing else needed changes.",
        ],
        "code": [
            """```js
// <<file>>
test('no blank rows after a fling', async ({page}) => {
    await page.goto('examples/grid/bigData/index.html?rows=100000&cols=50');

    for (let i = 0; i < 30; i++) {
        await page.evaluate(() => GridTest.scrollTo(Math.floor(Math.random() * 99_000)));
        await page.waitForTimeout(10)
    }

    await waitForScroll(page);
    const empty = await page.locator('.neo-grid-row:not(:has(.neo-grid-cell:not(:empty)))').count();
    expect(empty).toBe(0)
});
```""",
            """```js
// <<file>>
test('coalesces updates requested mid-flight', async () => {
    let renders  = [],
        deferred = Promise.withResolvers(),
        body     = Neo.create(GridBody, {store, columns});

    body.promiseUpdate = () => deferred.promise;
    body.createRows    = start => {renders.push(start); return []};

    for (let i = 1; i <= 21; i++) body.startIndex = i;

    deferred.resolve();
    await Neo.timeout(0);
    expect(renders).toEqual([1, 21])
});
```""",
            """```js
export async function waitForScroll(page, id='neo-grid-body-1') {
    await page.evaluate(id => new Promise(resolve => {
        Neo.getComponent(id).on({scrollDone: resolve, once: true})
    }), id)
}
```""",
            """```
$ npx playwright test test/playwright/unit/grid test/playwright/component/grid --project chromium --project firefox
Running 212 tests using 4 workers
  212 passed (2m07s)
```""",
        ],
    },
    "perf": {
        "thoughts": [
            "Numbers should come from the same machine and the same scripted fling as the original profile, otherwise the comparison means nothing.",
            "Stable row ids mean the DOM node count should be constant during scrolling; a growing count would point at leaked rows.",
            "Long tasks on the main thread would mean the delta batches are still too big; with slot-based ids they should be small.",
            "At a million rows the store itself becomes a suspect; I want to separate data creation from rendering in the numbers.",
        ],
        "details": [
            "Same scripted fling as the first profile (100k x 50, Chrome 131, no CPU throttling). Medians of five runs below. The remaining time in `<<sym>>` is mostly the example's own cell renderers.",
            "Ten minutes of scripted scrolling with a heap snapshot every two minutes: App worker heap between 60.8 and 61.3 MB, main thread DOM nodes constant at 2,396 (46 rows x 52 cells including spacers).",
            "Main thread: no task over 50ms during a 30s fling. The largest `<<sym>>` batch was 6ms for 1,140 deltas; typical batches are 600-700 deltas at 2-3ms.",
            "1,000,000 x 50: store creation takes 2.9s in the Data worker (record objects for 50M fields); after that scrolling behaves like the 100k case. `<<sym>>` in <<file>> is now the slowest step, which is out of scope for #13911.",
        ],
        "code": [
            """```
                          before    after
update time (median)      38.4ms    11.2ms
deltas per scroll step    4,100     620
dropped frames (fling)    41%       3%
blank rows (20 flings)    7         0
```""",
            """```
[heap] t=0m  app-worker 60.8 MB  dom-nodes 2396
[heap] t=2m  app-worker 61.1 MB  dom-nodes 2396
[heap] t=4m  app-worker 61.0 MB  dom-nodes 2396
[heap] t=6m  app-worker 61.3 MB  dom-nodes 2396
[heap] t=8m  app-worker 61.0 MB  dom-nodes 2396
[heap] t=10m app-worker 61.2 MB  dom-nodes 2396
```""",
            """```
Performance panel, 30s fling, main thread
  tasks > 50ms   0
  applyDeltas    p50 2.4ms   p95 4.1ms   max 6.0ms (1,140 deltas)
  layout/paint   p50 1.1ms   p95 2.7ms
```""",
            """```
rows=1,000,000 cols=50
  store.add (data worker)   2,912ms
  first render                 48ms
  update time (median)       11.9ms
  blank rows (20 flings)         0
```""",
        ],
    },
    "cleanup": {
        "thoughts": [
            "Temporary instrumentation tends to survive into commits; I'll grep for the markers I used (`[delta-counter]`, `console.time`) rather than rely on memory.",
            "Config names are API. `bufferRowRange` already exists, and a second naming scheme for the same concept would confuse users.",
            "Exposing the buffers in the example lets users see the trade-off themselves, which is easier than explaining it.",
            "The docs must mention the row id change explicitly; apps that parsed ids should find out from the guide, not from a bug report.",
            "Logical commits make the review easier and make a later bisect meaningful: the dropped-update fix should be revertable on its own.",
        ],
        "details": [
            "Removed the `[delta-counter]` logging from VdomHelper, the `console.time('createViewData')` pair from <<file>>, and the repro helper from the example. The grep for both markers over src and examples is clean.",
            "`<<sym>>` stays. It mirrors `bufferRowRange` (rows beyond the viewport on each side), and both are documented together in the Body JSDoc.",
            "In <<file>>, `<<sym>>()` sets the matching body config; both fields are bounded to 0..20 and show a hint about the trade-off (more buffer: fewer blank frames, more DOM).",
            'The grid guide got a section "Rendering large data sets" explaining both buffer configs, slot-based row ids and `data-record-id`, with a note for apps that parsed row ids.',
            "Four commits, each building and passing tests on its own: the needsUpdate fix, slot-based row ids with the selection and striping follow-ups, bufferColumnRange with the ScrollManager and header changes, then tests, example controls and docs. All reference #13911.",
        ],
        "code": [
            """```
$ git grep -n "delta-counter\\|console.time" src examples
$ git diff --stat
 examples/grid/bigData/MainContainer.mjs |  9 ---------
 src/grid/Body.mjs                       |  4 ----
 src/util/VdomHelper.mjs                 |  6 ------
 3 files changed, 19 deletions(-)
```""",
            """```js
/**
 * Number of columns to render beyond the visible area on each side.
 * Mirrors bufferRowRange. Locked columns are always rendered.
 * @member {Number} bufferColumnRange_=3
 * @reactive
 */
bufferColumnRange_: 3,
```""",
            """```js
{
    module    : NumberField,
    labelText : 'bufferColumnRange',
    maxValue  : 20,
    minValue  : 0,
    reference : 'bufferColumnRangeField',
    value     : 3,
    listeners : {change: 'onBufferFieldChange'}
}
```""",
            """```md
### Rendering large data sets

Only the visible rows plus `bufferRowRange` rows on each side are rendered,
and only the visible columns plus `bufferColumnRange` columns (locked columns always).
Row elements are recycled: their ids follow the row slot, not the record.
Use `data-record-id` to find the record of a row element.
```""",
            """```
fix(grid): re-render after an update that arrived mid-flight (#13911)
perf(grid): slot-based row ids so recycled rows keep their DOM nodes (#13911)
feat(grid): bufferColumnRange for column virtualization (#13911)
test(grid): fling-scroll component test, coalescing unit test, docs (#13911)
```""",
        ],
    },
}

GRID_NOTES = {
    "repro": [
        "Environment: macOS 15, M2, dev mode served by `npm run server-start`, DevTools closed. The example creates its data in the Data worker, so store creation does not affect scrolling.",
        "Wheel scrolling and keyboard paging never trigger it, only scrollbar drags and trackpad flings, which produce the fastest sequence of scroll events.",
        "The blank rows are not a paint problem: the body's VDOM already contains the empty cells, which points at the App worker, not the main thread.",
    ],
    "profile": [
        "Method: Performance panel on the App worker target, 5s recording, one scripted fling; the main thread was recorded separately to avoid cross-thread skew.",
        "The bigData example formats numbers with `Intl.NumberFormat` in every cell renderer. That is example code and stays, but it makes the cost of unnecessary cell updates very visible.",
        "Main thread time is small in comparison: applying 4,100 deltas takes 9-14ms, but that is a consequence of the delta count, not a separate problem.",
    ],
    "rootcause": [
        "The two findings compound: unstable ids make every update slow, and slow updates make overlapping updates likely, which is exactly when the guard drops one.",
        "I checked the other list-like components: `Neo.list.Base` already uses stable ids for its recycled items, so the grid is the odd one out.",
        "`isVdomUpdating` is set in VdomLifecycle around every `update()` call, so any component can hit this pattern; the grid is just the one that updates fast enough to show it.",
    ],
    "fix": [
        "Stable ids alone would make blank rows rarer but not impossible, and the flag alone would keep updates slow; the two fixes are independent and land as separate commits.",
        "I re-ran the repro helper after each change; its blank-row count is the quickest signal until the real tests exist.",
        "Keyboard navigation, cell editing and row dragging read row ids too; I tried each of them in the bigData example after the change and they work.",
    ],
    "colvirt": [
        "Column virtualization only kicks in when there are more columns than fit the viewport plus the buffer; narrow grids render exactly as before.",
        "The cumulative width cache is recomputed only when a column is added, removed, hidden or resized, never on scroll.",
        "Spacer cells at both ends of a row keep the total width stable, so the horizontal scrollbar does not jump while columns mount and unmount.",
    ],
    "tests": [
        "Component tests load the real example with URL parameters for its size, so they exercise the same code path users see.",
        "Random scroll positions come from a seeded generator in the test, so a failure reproduces with the same positions.",
        "The tests run in both the chromium and firefox projects; the grid folder takes a little over two minutes locally.",
    ],
    "perf": [
        "All numbers: Chrome 131 and Firefox 133 on the same M2, dev mode, DevTools closed during runs, medians of five runs.",
        "Dropped frames are counted with a `requestAnimationFrame` probe on the main thread that logs frame gaps over 20ms during the fling.",
        "The remaining cost is dominated by the example's own renderers; a grid with plain text cells updates in about 6ms per step.",
    ],
    "cleanup": [
        "Everything in the branch now either ships or is gone; no feature flags, since the behaviour change is a pure fix.",
        "I rebased onto current dev before splitting the commits; there were no conflicts.",
        "The example, the guide and the JSDoc now use the same wording for both buffer configs.",
    ],
}


GRID_TESTS = [
    (0, "Body renders the visible rows"),
    (0, "RowModel selects on click"),
    (0, "ScrollManager syncs the header"),
    (0, "column resize updates the width"),
    (10, "needsUpdate triggers a follow-up render"),
    (12, "row ids are slot based"),
    (13, "selection follows the record"),
    (15, "striping uses the record index"),
    (17, "mountedColumns follows scrollLeft"),
    (17, "bufferColumnRange change re-renders"),
    (20, "locked columns always render"),
    (21, "header and body stay aligned"),
    (22, "no blank rows after a fling"),
    (22, "aria-rowindex matches startIndex"),
]


# --- shared filler pools ---------------------------------------------------------------------------

# Filler for turns that change code ...
CHANGE_THOUGHTS = [
    "The tests for this area run in under a minute, so I can afford to run them after every step instead of batching changes.",
    "I'll keep the diff minimal; anything unrelated I notice goes into a note instead of into this change.",
    "Backwards compatibility matters: apps built on v10 use this code and should keep working without changes.",
    "The request is for one specific step; I'll do that and mention anything else I find instead of silently widening the scope.",
    "The file has its own conventions (`let me = this`, config hooks, aligned assignments) and the change should follow them.",
    "If this turns out larger than expected I'll stop and report back instead of pushing through.",
    "Worker code is hard to debug after the fact, so where the reasoning isn't obvious I'll leave a short code comment.",
    "There may be callers outside src/: apps/ and examples/ import these modules directly, so I'll grep there as well.",
    "Small, reviewable steps: each change should leave the app in a working state.",
    "I'll also run the example in the browser once after the change; the tests do not catch everything visual.",
]

CHANGE_CAVEATS = [
    "Nothing is committed yet; the changes are in the working tree for review.",
    "I left the surrounding style inconsistencies alone on purpose, fixing them here would blur the diff.",
    "I only checked Chromium and Firefox; Safari has its own worker quirks and deserves a manual check before the release.",
    "Public signatures are unchanged, so no app code needs to change for this step.",
    "There is a TODO from 2023 in the same file that looks related; I left it in place and mentioned it in the issue.",
    "The TypeScript declaration files are generated at release time, so I did not touch them.",
    "The dev server needed a restart to pick up the worker changes; hot reload does not cover worker modules.",
    "One open point: names are cheap to change now and expensive after the release, so say so if you prefer something else.",
]

# ... and for turns that only read, measure or plan.
READ_THOUGHTS = [
    "I want evidence before changing behaviour: a number or a failing test, not a hunch.",
    "The issue thread has two user reports with different setups; whatever I conclude has to explain both of them.",
    "Reading the JSDoc of the involved methods first saves time: several of them document assumptions the code no longer enforces.",
    "Chromium and Firefox schedule worker messages and animation frames slightly differently, so anything timing-related gets checked in both.",
    "I'll write down what I find as I go, so the conclusions can go straight into the PR description later.",
    "There may be callers outside src/: apps/ and examples/ import these modules directly, so I'll look there as well.",
    "Measuring twice with the same script is cheaper than arguing about a single noisy number.",
    "It's easy to over-read a profile; I'll only draw conclusions the numbers clearly support.",
    "Odd code usually has a history; git log tends to explain it faster than guessing.",
    "The answer should be short and concrete; the details can go into the PR description later.",
]

READ_CAVEATS = [
    "No files changed in this step.",
    "No code changed in this step; this is analysis only.",
    "These numbers come from my machine (M2, 16 GB); CI runners are roughly twice as slow, so absolute values will differ there.",
    "I kept DevTools closed while measuring, since an open profiler skews timings in the worker.",
    "I only followed the code paths of the default setup; SharedWorker mode has a few extra branches I still need to check.",
]

FOLLOWUPS = [
    "Shall I continue with the next step, or do you want to review this part first?",
    "Next I'd continue in the same direction and report back after the next change.",
    "I'm keeping a list of open points for the PR description as we go.",
    "Let me know if you want to adjust the direction before I go on.",
    "If this looks right, the next step builds directly on it.",
]

OPENERS = ["", "", "Done. ", "Short version: ", "Result: ", "Summary: "]

AGENTS = {
    "@neo-opus-ada": {"agent": "claude-code", "model": "claude-opus-4"},
    "@neo-sonnet-linus": {"agent": "claude-code", "model": "claude-sonnet-4-5"},
    "@neo-gemini-grace": {"agent": "antigravity", "model": "gemini-3-pro"},
}

TOOLS = {
    "read": [
        "read_file",
        "read_file",
        "read_file",
        "search_file_content",
        "list_directory",
        "glob",
        "query_raw_memories",
    ],
    "write": ["read_file", "read_file", "replace", "replace", "write_file", "run_shell_command", "search_file_content"],
    "test": ["run_shell_command", "run_shell_command", "read_file", "replace", "search_file_content"],
}

# Phases whose turns change code (they get test evidence and diffstats); the others read and measure.
CHANGE_PHASES = {"registry", "migrate", "errors", "lifecycle", "tests", "docs", "fix", "colvirt", "cleanup"}
TEST_PHASES = {"tests", "registry", "migrate", "errors", "lifecycle", "fix", "colvirt"}

LARGE_MIN, LARGE_MAX = 1500, 2500
SMALL_MIN, SMALL_MAX = 400, 1500


# --- helpers ---------------------------------------------------------------------------------------


def compose_document(prompt: str, thought: str, response: str) -> str:
    return "User Prompt: " + prompt + "\nAgent Thought: " + thought + "\nAgent Response: " + response


def nbytes(text: str) -> int:
    return len(text.encode("utf-8"))


def fill(text: str, values: dict) -> str:
    for key, value in values.items():
        text = text.replace(f"<<{key}>>", value)
    return text


def iso(ms: int) -> str:
    stamp = datetime.fromtimestamp(ms // 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{stamp}.{ms % 1000:03d}Z"


def epoch_ms(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def seeded_uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def embedding(rng: random.Random) -> list[float]:
    return [round(rng.uniform(-1.0, 1.0), 6) for _ in range(8)]


class Deck:
    """Draws without replacement, reshuffling when empty, so fillers rarely repeat back to back."""

    def __init__(self, rng: random.Random, items: list[str]):
        self.rng, self.items, self.pool = rng, list(items), []

    def draw(self) -> str:
        if not self.pool:
            self.pool = self.items[:]
            self.rng.shuffle(self.pool)
        return self.pool.pop()


def tool_calls(rng: random.Random, kind: str, low: int, high: int) -> tuple[int, str]:
    names = [rng.choice(TOOLS[kind]) for _ in range(rng.randint(low, high))]
    return len(names), json.dumps([{"name": n} for n in names], separators=(",", ":"))


def evidence(rng: random.Random, ctx: dict, turn_index: int) -> str:
    """A test run, naming only tests that exist by this turn of the session."""
    available = [name for first, name in ctx["tests"] if first <= turn_index]
    total = ctx["base_tests"] + 3 * (len(available) - 4)
    if rng.random() < 0.5:
        return f"Checked with `npx playwright test {ctx['test_dir']}`: {total} passed, 0 failed ({rng.randint(4, 40)}.{rng.randint(0, 9)}s)."
    lines = [f"$ npx playwright test {ctx['test_dir']} --project chromium", f"Running {total} tests using 4 workers"]
    lines += [f"  ok  {name} ({rng.randint(4, 900)}ms)" for name in rng.sample(available, 3)]
    lines += ["  ...", f"  {total} passed ({rng.randint(4, 40)}.{rng.randint(0, 9)}s)"]
    return "```\n" + "\n".join(lines) + "\n```"


def diffstat(rng: random.Random, ctx: dict, file: str) -> str:
    """`git diff --stat` for the turn's file, sometimes with one related file of the session."""
    files = [file] if "." in file.rsplit("/", 1)[-1] and not file.endswith(".md") else []
    extra = rng.choice(ctx["files"])
    if extra not in files and (not files or rng.random() < 0.4):
        files.append(extra)
    width = max(len(f) for f in files)
    rows, ins, dels = [], 0, 0
    for f in files:
        plus, minus = rng.randint(2, 28), rng.randint(0, 16)
        ins, dels = ins + plus, dels + minus
        rows.append(f" {f.ljust(width)} | {plus + minus:>3} {'+' * plus}{'-' * minus}")
    rows.append(f" {len(files)} file{'s' if len(files) > 1 else ''} changed, {ins} insertions(+), {dels} deletions(-)")
    return "```\n$ git diff --stat\n" + "\n".join(rows) + "\n```"


def reading_note(rng: random.Random, ctx: dict, file: str) -> str:
    others = [f for f in rng.sample(ctx["files"], 3) if f != file][:2]
    return "Files read for this step: " + ", ".join(f"`{f}`" for f in [file, *others]) + "."


def recap(history: list[str], rng: random.Random) -> str | None:
    """A short 'where we stand' list from the outcomes of the previous turns."""
    if len(history) < 2:
        return None
    recent = history[-rng.randint(2, 3) :]
    return "Where we stand:\n" + "\n".join(f"- {o}" for o in recent)


# --- turn composition ------------------------------------------------------------------------------


def large_turn(
    rng: random.Random, ctx: dict, beat: tuple, index_in_phase: int, turn_index: int, history: list[str], decks: dict
) -> dict:
    phase, prompt, outcome, file, sym = beat
    pool = ctx["phases"][phase]
    values = {"file": file, "sym": sym}
    changes = phase in CHANGE_PHASES and not prompt.endswith("?")  # a question gets an answer, not a diff
    kind = "change" if changes else "read"
    thoughts = [fill(pool["thoughts"][index_in_phase], values)]
    head = rng.choice(OPENERS) + outcome
    body = [fill(pool["details"][index_in_phase], values)]
    code = pool["code"][index_in_phase]
    if code:
        body.append(fill(code, values))

    candidates = [
        ("thought", decks[kind + "_thought"].draw()),
        ("caveat", decks[kind + "_caveat"].draw()),
        ("followup", decks["followup"].draw()),
        ("thought", decks[kind + "_thought"].draw()),
        ("note", decks["notes"][phase].draw()),
    ]
    if phase in TEST_PHASES:
        candidates.append(("evidence", evidence(rng, ctx, turn_index)))
    if changes:
        candidates.append(("diffstat", diffstat(rng, ctx, file)))
    else:
        candidates.append(("reading", reading_note(rng, ctx, file)))
    summary = recap(history, rng)
    if summary:
        candidates.append(("recap", summary))
    rng.shuffle(candidates)

    chosen: list[tuple[str, str]] = []

    def render(extra: list[tuple[str, str]]) -> tuple[str, str]:
        picked = chosen + extra
        thought = " ".join(thoughts + [t for k, t in picked if k == "thought"])
        order = ["note", "reading", "evidence", "diffstat", "recap", "caveat", "followup"]
        tail = [t for key in order for k, t in picked if k == key]
        return thought, "\n\n".join([head, *body, *tail])

    def size(extra):
        return nbytes(compose_document(prompt, *render(extra)))

    target = rng.randint(1550, 1950)
    for cand in candidates:
        if size([]) >= target:
            break
        if size([cand]) <= LARGE_MAX - 40:
            chosen.append(cand)
    note = next(t for k, t in candidates if k == "note")
    extra_note = decks["notes"][phase].draw()
    while extra_note == note:
        extra_note = decks["notes"][phase].draw()
    candidates += [("note", extra_note), ("thought", decks[kind + "_thought"].draw())]
    for cand in candidates:  # still short of the floor: take anything that fits
        if size([]) >= LARGE_MIN + 60:
            break
        if cand not in chosen and size([cand]) <= LARGE_MAX - 40:
            chosen.append(cand)
    assert size([]) >= LARGE_MIN, f"turn too short even with every filler: {prompt}"
    thought, response = render([])
    return {"prompt": prompt, "thought": thought, "response": response, "mini": outcome, "phase": phase}


def large_session(rng: random.Random, ctx: dict) -> list[dict]:
    decks = {
        "change_thought": Deck(rng, CHANGE_THOUGHTS),
        "change_caveat": Deck(rng, CHANGE_CAVEATS),
        "read_thought": Deck(rng, READ_THOUGHTS),
        "read_caveat": Deck(rng, READ_CAVEATS),
        "followup": Deck(rng, FOLLOWUPS),
        "notes": {phase: Deck(rng, notes) for phase, notes in ctx["notes"].items()},
    }
    seen: dict[str, int] = {}
    turns, history = [], []
    for turn_index, beat in enumerate(ctx["beats"]):
        k = seen.get(beat[0], 0)
        seen[beat[0]] = k + 1
        turns.append(large_turn(rng, ctx, beat, k, turn_index, history, decks))
        history.append(beat[2])
    return turns


def small_session(script: list[tuple]) -> list[dict]:
    return [{"prompt": p, "thought": t, "response": r, "mini": m, "phase": "small"} for p, t, r, m in script]


# --- sessions --------------------------------------------------------------------------------------


def build_sessions(rng: random.Random) -> list[dict]:
    """The six sessions in file order, with ids, agents, start times and composed turns."""
    sessions = [
        {
            "key": "worker-messaging",
            "size": "large",
            "minis": "all",
            "identity": "@neo-opus-ada",
            "start": "2026-11-17T08:12:05.000Z",
            "tools": "write",
            "ctx": {
                "beats": WORKER_BEATS,
                "phases": WORKER_PHASES,
                "notes": WORKER_NOTES,
                "tests": WORKER_TESTS,
                "test_dir": "test/playwright/unit/worker",
                "base_tests": 58,
                "files": [
                    "src/worker/Base.mjs",
                    "src/worker/Manager.mjs",
                    "src/worker/Message.mjs",
                    "src/worker/PendingRequests.mjs",
                    "src/worker/mixin/RemoteMethodAccess.mjs",
                    "src/worker/App.mjs",
                    "src/worker/Data.mjs",
                    "src/worker/ErrorSerializer.mjs",
                ],
            },
        },
        {
            "key": "grid-selection",
            "size": "small",
            "minis": "two",
            "identity": "@neo-opus-ada",
            "start": "2026-11-18T09:30:41.000Z",
            "tools": "write",
            "script": GRID_SELECTION,
        },
        {
            "key": "grid-big-data",
            "size": "large",
            "minis": "none",
            "identity": "@neo-gemini-grace",
            "start": "2026-11-18T13:05:12.000Z",
            "tools": "write",
            "ctx": {
                "beats": GRID_BEATS,
                "phases": GRID_PHASES,
                "notes": GRID_NOTES,
                "tests": GRID_TESTS,
                "test_dir": "test/playwright/component/grid",
                "base_tests": 182,
                "files": [
                    "src/grid/Body.mjs",
                    "src/grid/ScrollManager.mjs",
                    "src/grid/header/Toolbar.mjs",
                    "src/selection/grid/RowModel.mjs",
                    "src/util/VdomHelper.mjs",
                    "src/data/Store.mjs",
                    "examples/grid/bigData/MainContainer.mjs",
                    "examples/grid/bigData/ControlsContainer.mjs",
                ],
            },
        },
        {
            "key": "vdom-test-flake",
            "size": "small",
            "minis": "none",
            "identity": "@neo-sonnet-linus",
            "start": "2026-11-19T07:45:03.000Z",
            "tools": "test",
            "script": VDOM_FLAKE,
        },
        {
            "key": "config-guide",
            "size": "small",
            "minis": "none",
            "identity": "@neo-gemini-grace",
            "start": "2026-11-19T10:20:27.000Z",
            "tools": "write",
            "script": CONFIG_DOCS,
            "session_id": "chat:2026-11-19,ws-7",
        },
        {
            "key": "backup-rotation",
            "size": "small",
            "minis": "none",
            "identity": "@neo-gemini-grace",
            "start": "2026-11-19T16:02:58.000Z",
            "tools": "write",
            "script": BACKUP_ROTATION,
        },
    ]
    for s in sessions:
        s["session_id"] = s.get("session_id") or seeded_uuid(rng)
    for s in sessions:
        turns = large_session(rng, s["ctx"]) if s["size"] == "large" else small_session(s["script"])
        ts = epoch_ms(s["start"])
        for turn in turns:
            turn["id"] = seeded_uuid(rng)
            turn["ts"] = ts
            ts += rng.randint(60_000, 300_000)
            turn["document"] = compose_document(turn["prompt"], turn["thought"], turn["response"])
            low, high = (1, 6) if s["size"] == "large" else (1, 4)
            kind = (
                "read"
                if turn["phase"] in ("explore", "design", "perf", "repro", "profile", "rootcause")
                else s["tools"]
            )
            turn["amount"], turn["tools_used"] = tool_calls(rng, kind, low, high)
            turn["embedding"] = embedding(rng)
            if s["minis"] != "all" and not (s["minis"] == "two" and turn["mini"]):
                turn["mini"] = None
        s["turns"] = turns
    # About one turn in eight carries no `document`: the ingest rebuilds it from the three fields.
    every = [t for s in sessions for t in s["turns"]]
    omitted = {t["id"] for t in rng.sample(every, round(len(every) / 8))}
    for t in every:
        t["omit_document"] = t["id"] in omitted
    return sessions


# --- files -----------------------------------------------------------------------------------------


def memory_row(s: dict, turn: dict) -> dict:
    identity = s["identity"]
    row = {
        "id": turn["id"],
        "embedding": turn["embedding"],
        "metadata": {
            "prompt": turn["prompt"],
            "thought": turn["thought"],
            "response": turn["response"],
            "sessionId": s["session_id"],
            "timestamp": turn["ts"],
            "type": "agent-interaction",
            "agentIdentity": identity,
            "agent": AGENTS[identity]["agent"],
            "model": AGENTS[identity]["model"],
            "userId": "tobiu",
            "amountToolCalls": turn["amount"],
            "toolsUsed": turn["tools_used"],
        },
        "document": turn["document"],
    }
    if turn["omit_document"]:
        del row["document"]
    return row


def bad_lines(rng: random.Random, sessions: list[dict]) -> list[str]:
    """Five malformed rows the ingest must reject, each for a different reason."""
    flake, rotation = sessions[3], sessions[5]
    base_ts = flake["turns"][-1]["ts"] + 600_000

    def meta(session_id, prompt, thought, response, ts):
        m = {"prompt": prompt, "thought": thought, "response": response}
        if session_id is not None:
            m["sessionId"] = session_id
        m.update(
            {
                "timestamp": ts,
                "type": "agent-interaction",
                "agentIdentity": "@neo-sonnet-linus",
                "agent": "claude-code",
                "model": "claude-sonnet-4-5",
                "userId": "tobiu",
                "amountToolCalls": 1,
                "toolsUsed": json.dumps([{"name": "run_shell_command"}], separators=(",", ":")),
            }
        )
        return m

    p1, t1, r1 = (
        "Re-run the VDOM specs once more on CI.",
        "CI is the environment that flaked, so that's the real check.",
        "Triggered the unit workflow on the branch; all 3 spec files green on the first run.",
    )
    p2, t2, r2 = (
        "Can you also check the Safari run?",
        "WebKit is only run nightly; I'll start it manually.",
        "Started the nightly WebKit job by hand; VdomHelper.spec.mjs passed 50 of 50 repeats.",
    )
    p3, t3, r3 = (
        "",
        "The previous answer covered everything; nothing new to do.",
        "Nothing to change; waiting for input.",
    )
    p4, t4, r4 = (
        "Add the dry-run flag to the README of buildScripts/ai.",
        "One line in the usage section is enough.",
        "Documented `--apply` in buildScripts/ai/README.md under Usage.",
    )
    rows = [
        {
            "embedding": embedding(rng),
            "metadata": meta(flake["session_id"], p1, t1, r1, base_ts),
            "document": compose_document(p1, t1, r1),
        },
        {
            "id": seeded_uuid(rng),
            "embedding": embedding(rng),
            "metadata": meta(None, p2, t2, r2, base_ts + 120_000),
            "document": compose_document(p2, t2, r2),
        },
        {
            "id": seeded_uuid(rng),
            "embedding": embedding(rng),
            "metadata": meta(flake["session_id"], p3, t3, r3, base_ts + 240_000),
        },
        {
            "id": seeded_uuid(rng),
            "embedding": embedding(rng),
            "metadata": meta(rotation["session_id"], p4, t4, r4, [1, 2]),
            "document": compose_document(p4, t4, r4),
        },
    ]
    return ['{"id": "broken'] + [json.dumps(r, ensure_ascii=False) for r in rows]


SUMMARY_TEXT = {
    "grid-selection": (
        "Fix grid selection jumping after sort (#13904)",
        {
            "category": "bugfix",
            "quality": 82,
            "productivity": 78,
            "impact": 45,
            "complexity": 30,
            "technologies": "javascript,neo.mjs,playwright",
        },
        "The goal was to fix issue #13904, where a selected grid row lost its highlight to another record after "
        "sorting. The agent traced it to RowModel storing row indices, switched RowModel and CellModel to record "
        "keys while keeping selectRow(index) as a wrapper, added regression tests in RowModel.spec.mjs, and wrote "
        "the commit message and issue comment. ColumnModel was checked and is not affected.",
    ),
    "vdom-test-flake": (
        "Fix flaky VDOM unit tests caused by shared id counters",
        {
            "category": "bugfix",
            "quality": 80,
            "productivity": 70,
            "impact": 40,
            "complexity": 30,
            "technologies": "javascript,neo.mjs,playwright",
        },
        "The goal was to stop VdomHelper.spec.mjs from failing about one CI run in ten. The agent reproduced the "
        "flake with --repeat-each and several workers, traced it to IdGenerator counters shared between tests in a "
        "Playwright worker, pinned explicit vnode ids and reset the counters in beforeEach, and verified the fix "
        "with 3200 repeats. The same pattern was fixed in two more spec files.",
    ),
}


def input_revision(s: dict, turns: list[dict]) -> str:
    """The original's `computeSessionTurnInputRevision` of these turns. A session's timestamps are
    distinct (`check`), so its canonical order is by timestamp alone, with no id tie to collate."""
    rows = [
        {
            "id": t["id"],
            "document": t["document"],
            "agentIdentity": s["identity"],
            "sessionId": s["session_id"],
            "userId": "tobiu",
        }
        for t in sorted(turns, key=lambda t: t["ts"])
    ]
    payload = json.dumps({"version": 1, "turns": rows}, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(payload.encode("utf-8")).hexdigest()


def summary_rows(rng: random.Random, sessions: list[dict]) -> list[dict]:
    rows = []
    for s in sessions:
        if s["key"] not in SUMMARY_TEXT:
            continue
        title, scores, text = SUMMARY_TEXT[s["key"]]
        drift = s["key"] == "vdom-test-flake"  # summarized before its last turn arrived
        count = len(s["turns"]) - 1 if drift else len(s["turns"])
        ts = s["turns"][count - 1]["ts"] + rng.randint(20_000, 50_000)
        rows.append(
            {
                "id": f"summary_{s['session_id']}",
                "embedding": embedding(rng),
                "metadata": {
                    "sessionId": s["session_id"],
                    "memoryCount": count,
                    "dreamInputRevision": input_revision(s, s["turns"][:count]),
                    "title": title,
                    **scores,
                    "sourceTier": "raw",
                    "degraded": False,
                    "rawCanonical": True,
                    "timestamp": ts,
                },
                "document": text,
            }
        )
    return rows


def graph_lines(sessions: list[dict]) -> list[str]:
    nodes, edges, identities = [], [], []
    for s in sessions:
        for turn in s["turns"]:
            props = {
                "name": f"Memory: {iso(turn['ts'])}",
                "sessionId": s["session_id"],
                "timestamp": iso(turn["ts"]),
                "agentIdentity": s["identity"],
            }
            if turn["mini"]:
                props["miniSummary"] = turn["mini"]
            nodes.append({"type": "node", "data": {"id": turn["id"], "label": "AGENT_MEMORY", "properties": props}})
            edges.append(
                {
                    "type": "edge",
                    "data": {
                        "id": f"{turn['id']}->{s['identity']}:AUTHORED_BY",
                        "source": turn["id"],
                        "target": s["identity"],
                        "type": "AUTHORED_BY",
                        "properties": {"weight": 1.0},
                    },
                }
            )
        if s["identity"] not in identities:
            identities.append(s["identity"])
    for identity in identities:
        nodes.append(
            {"type": "node", "data": {"id": identity, "label": "AGENT_IDENTITY", "properties": {"name": identity}}}
        )
    return [json.dumps(x, ensure_ascii=False) for x in nodes + edges]


def write_lines(path: Path, lines: list[str]) -> None:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8", newline="\n")


# --- checks and report -----------------------------------------------------------------------------


def check(sessions: list[dict]) -> None:
    for s in sessions:
        sizes = [nbytes(t["document"]) for t in s["turns"]]
        low, high = (LARGE_MIN, LARGE_MAX) if s["size"] == "large" else (SMALL_MIN, SMALL_MAX)
        bad = [(i, n) for i, n in enumerate(sizes, 1) if not low <= n <= high]
        assert not bad, f"{s['key']}: turns outside {low}-{high} bytes: {bad}"
        for t in s["turns"]:
            assert t["prompt"].strip() and t["thought"].strip() and t["response"].strip()
            assert "<<" not in t["document"], f"{s['key']}: unfilled placeholder in {t['document'][:80]}"
            if t["mini"]:
                assert len(t["mini"]) <= 280 and "\n" not in t["mini"]
        stamps = [t["ts"] for t in s["turns"]]
        assert all(60_000 <= b - a <= 300_000 for a, b in zip(stamps, stamps[1:]))
    counts = {s["key"]: len(s["turns"]) for s in sessions}
    assert counts["worker-messaging"] == 40 and counts["grid-big-data"] == 35
    assert sum(bool(t["mini"]) for t in sessions[0]["turns"]) == 40
    assert sum(bool(t["mini"]) for s in sessions[1:] for t in s["turns"]) == 2
    assert sum(nbytes(t["document"]) for t in sessions[0]["turns"]) > 60_000
    assert sum(nbytes(t["document"]) for t in sessions[2]["turns"]) > 55_000
    for s in sessions:
        if s["size"] == "small":
            assert 3 <= len(s["turns"]) <= 8 and sum(nbytes(t["document"]) for t in s["turns"]) < 20_000


def report(sessions: list[dict], paths: list[Path]) -> None:
    """Per session: turns, document bytes (total and per turn), the raw content's token estimate at
    3 bytes a token (without the instruction header), turns without `document`, mini summaries."""
    print(
        f"{'session id':38} {'kind':42} {'turns':>5} {'doc bytes':>9} {'per turn':>11} {'~tokens':>8} {'no doc':>6} {'minis':>5}"
    )
    for s in sessions:
        sizes = [nbytes(t["document"]) for t in s["turns"]]
        raw = nbytes("\n\n---\n\n".join(t["document"] for t in s["turns"]))
        kind = (
            {"all": "large, mini summaries", "none": "large, no mini summaries"}[s["minis"]]
            if s["size"] == "large"
            else "small"
        )
        print(
            f"{s['session_id']:38} {s['key'] + ' (' + kind + ')':42} {len(sizes):>5} {sum(sizes):>9} "
            f"{min(sizes):>5}-{max(sizes):<5} {math.ceil(raw / 3):>8} {sum(t['omit_document'] for t in s['turns']):>6} "
            f"{sum(bool(t['mini']) for t in s['turns']):>5}"
        )
    for path in paths:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        print(f"{path.relative_to(SAMPLES.parent)}  {path.stat().st_size:>7} bytes  sha256 {digest[:16]}")


def main() -> None:
    rng = random.Random(7)
    sessions = build_sessions(rng)
    check(sessions)
    BUNDLE.mkdir(parents=True, exist_ok=True)
    memory = BUNDLE / f"memory-backup-{STAMP}.jsonl"
    graph = BUNDLE / f"graph-backup-{STAMP}.jsonl"
    summaries = BUNDLE / f"summaries-backup-{STAMP}.jsonl"
    rows = [json.dumps(memory_row(s, t), ensure_ascii=False) for s in sessions for t in s["turns"]]
    write_lines(memory, rows + bad_lines(rng, sessions))
    write_lines(graph, graph_lines(sessions))
    write_lines(summaries, [json.dumps(r, ensure_ascii=False) for r in summary_rows(rng, sessions)])
    report(sessions, [memory, graph, summaries])


if __name__ == "__main__":
    main()
