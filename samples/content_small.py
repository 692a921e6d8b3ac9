"""Hand-written turns of the four small sample sessions (used by samples/generate.py).

Each turn is (prompt, thought, response, mini_summary_or_None).
"""

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
        "Issue comment: \"Fixed on dev: selections now follow the record when the store is sorted or "
        "filtered. `selectRow(index)` keeps working; new code can call `selectRecord(record)`.\"",
        None,
    ),
]

# --- S2: config system guide, session id with a comma and a colon, antigravity / gemini ---------

CONFIG_DOCS = [
    (
        "We need a guide page for the config system; learn/guides/fundamentals/ConfigSystem.md is just a stub. "
        "Start with an outline: reactive configs, hooks, defaults vs instance values.",
        "Readers usually arrive with a concrete problem (\"why is my afterSet not called?\"), so the outline "
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
        "Add a section on config merging, people keep getting bitten by object configs being shared "
        "between instances.",
        "The trap: an object literal in `static config` lives on the prototype, so mutating it in one "
        "instance leaks into all others. The fix is to assign a new object or use a deep-merge descriptor.",
        "Added section 5, \"Object configs and merging\": a broken example that mutates `this.style.color`, "
        "the symptom (every panel turns red), and two fixes: assign a new object "
        "(`this.style = {...this.style, color: 'red'}`) or declare the config with `merge: 'deep'` so each "
        "instance gets its own merged copy. Linked it from the checklist in section 6.",
        None,
    ),
    (
        "Register the page in learn/tree.json under Fundamentals and check the links render in the portal.",
        "tree.json entries need a unique id and the parentId of the Fundamentals node; then I'll load the "
        "portal locally and click through the anchors.",
        "Added `{\"id\": \"fundamentals/ConfigSystem\", \"parentId\": \"Fundamentals\", \"name\": "
        "\"Config System\"}` to learn/tree.json. In the local portal the page renders, the six anchors work "
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
        "`--repeat-each 200 --workers 4`: 3200 passed (3m12s), 0 failed. Same command on the unfixed file "
        "gave 23 failures, so the run is long enough to trust.",
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
        "    backups = sorted(folder.glob(\"memory-backup-*.jsonl\"))  # ISO names sort by time\n"
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
