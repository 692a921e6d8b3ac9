"""A verdict on a summary, with no model call: `ok`, or the kind of junk it is (docs/verdicts.md).

Judged against the session's raw turns (never the degraded input alone), in this order, the first
that holds wins:

- **empty**: the summary says fewer than `MIN_WORDS` words;
- **too-long**: the title and summary are longer than the input they summarize;
- **template**: placeholders (`[file_name]`, `<name>`, `{value}`) the session never writes, or
  the scaffolding the project writes into its prompts (a repeat marker, a metadata label), or
  the prompt's field names given as values ("The goal: 1.0, the key decisions: 2.0"), or the
  schema's own field list echoed;
- **echo**: at least `ECHO_SHARE` of its tokens in long fragments copied from the session's text,
  or `PROMPT_ECHO_SHARE` from the prompt's instructions (Grusky et al. 2018), or `REPEAT_SHARE` of
  its words in a phrase it says `REPEATS` times or more (a model caught in a loop echoes itself);
- **fabricated**: it names an issue, path, file, URL or commit hash no turn has, or
  `FABRICATED_SYMBOLS` other identifiers no turn has (anchor precision, Nan et al. 2021);
- **content-free**: it names no identifier of the session and fewer than `MIN_SPECIFIC` of the
  session's own words beyond a summary's boilerplate ("The user asked for a summary of the changes"),
  or one identifier and fewer than `MIN_SPECIFIC` words besides it;
- a title copied word for word from one line of the agent's side of a turn: **echo**.

The prompt's words it looks for (its labels, the summary's parts, the field names) are read from
`digest.prompts`, so a reworded prompt moves the rules with it.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from digest.claims import check as check_claims
from digest.claims import unfounded
from digest.fidelity import COMMON_NAMES, STRONG, anchors, copy_source, precision, session_terms, session_text
from digest.overlap import fragments
from digest.prompts import SUMMARY_FIELDS, SUMMARY_LABELS, SUMMARY_PARTS
from digest.repeats import MARKER_PATTERN
from digest.turns import compose_document

VERDICTS = ("ok", "echo", "fabricated", "template", "content-free", "empty", "too-long")
JUNK = frozenset(VERDICTS) - {"ok"}

MIN_WORDS = 2  # fewer words than this in the summary: empty
ECHO_SHARE = 0.5  # this share of the summary's tokens in long fragments of the session: echo
PROMPT_ECHO_SHARE = 0.2  # the same, from the prompt's own instructions
FABRICATED_SYMBOLS = 2  # this many unknown symbols (or one unknown issue, path, URL, hash): fabricated
MIN_SPECIFIC = 3  # fewer of the session's own words than this, and no identifier: content-free
REPEAT_WORDS = 6  # a phrase this many words long ...
REPEATS = 3  # ... said this many times or more ...
REPEAT_SHARE = 0.3  # ... over this share of the summary's words: echo (of itself)

_LETTER_WORD = re.compile(r"[^\W\d_]{2,}")
_CONTENT_WORD = re.compile(r"[^\W\d_][^\W\d_'-]{3,}")
_WORD_RUN = re.compile(r"\w+")
_PLACEHOLDER = re.compile(
    r"\[[A-Za-z][\w ]{1,30}\](?!\()|<[a-z][a-z_ ]{1,30}>|\{[a-z][a-z_]{1,30}\}|\b(?:lorem ipsum|TODO|XXX)\b"
)


# What the project writes into its own prompts beside or in place of the session's text: a mini
# summary prompt's repeat marker (a degraded prompt carries the mini summaries that copied it), the
# summary prompt's metadata labels. An ellipsis marks a cut too, but a summary may fairly write one.
def _label(label: str) -> str:
    """A label with or without its colon: a model writes "Aider running on models;" as readily."""
    return re.escape(label.rstrip(":")) + ":?"


_SCAFFOLDING = re.compile("|".join([MARKER_PATTERN.pattern, *map(_label, SUMMARY_LABELS)]), re.IGNORECASE)
# The labels a turn's text is written with ("User Prompt:", "Agent Thought:", "Agent Response:"),
# from the function that writes them: every session has them, so they are not scaffolding the
# session never writes; but a summary that is nothing else ("Sıpır 12: User Prompt:") is the
# prompt's form returned as content.
TURN_LABELS = tuple(line.strip() for line in compose_document("", "", "").splitlines())
_LABELS = re.compile("|".join(map(_label, TURN_LABELS + SUMMARY_LABELS)), re.IGNORECASE)
_TURN_LABEL = re.compile("|".join(re.escape(label.rstrip(":")) for label in TURN_LABELS), re.IGNORECASE)
_AGENT_PART = re.compile(rf"^{re.escape(TURN_LABELS[1])}", re.MULTILINE)  # where a turn's user prompt ends
# What opens a line before its text: a turn's label, a quoted line's `>`, a `[tool result]` tag.
_LINE_TAG = re.compile(r"^(?:" + "|".join(map(re.escape, TURN_LABELS)) + r"|>|\[[\w .-]{1,40}\])\s*")
TITLE_LINE_WORDS = 3  # a title of this many words equal to one line of the agent's side: copied
# The prompt's field names: the summary's four parts and the schema's fields.
_FIELDS = (*SUMMARY_PARTS, *SUMMARY_FIELDS)
_FIELD_VALUE = re.compile(
    r"""\b(?:the\s+)?("?)("""
    + "|".join(re.escape(f) for f in _FIELDS)
    + r""")\1\s*[:=]\s*(?=[\d\[<{,;]|$|"?\s*[,}])""",
    re.IGNORECASE | re.MULTILINE,
)
_FIELD = "(?:the |a )?(?:" + "|".join(re.escape(f) for f in _FIELDS) + ")"
# The prompt's own list of the summary's parts, given back as a list ("the goal, the key decisions,
# the code that was modified, and the outcome"): three field names with nothing but commas between.
_FIELD_LIST = re.compile(rf"{_FIELD}(?:\s*,\s*(?:and\s+)?{_FIELD}){{2,}}", re.IGNORECASE)
# A field given a bare number for its value ("The goal: 12.0,"): one is enough, where a number
# followed by words ("outcome: 41 tests pass") is prose.
_FIELD_NUMBER = re.compile(rf"\b{_FIELD}\s*[:=]\s*\d+(?:\.\d+)?\s*(?:[,;]|$)", re.IGNORECASE | re.MULTILINE)
# The schema's fields but the two any summary may name ("the summary", "the title").
_SCHEMA_FIELDS = tuple(f for f in SUMMARY_FIELDS if f not in ("summary", "title"))
SCHEMA_LIST = 4  # this many of the schema's fields named in one summary: its field list echoed
# A summary's boilerplate: words any summary of any session may say.
GENERIC = frozenset(
    """user users asked asks asking summary summaries summarize summarized change changes changed made make makes
    making session sessions agent agents assistant code codes work worked working works task tasks file files project
    projects issue issues help helped helps request requested requests provided provide provides discussed discuss
    conversation explained explain information detail details various several also that this with from have been were
    what which they them their about into then than when where will would could should there these those other more
    most such each only very well just like used using uses need needs needed based including include includes related
    regarding specific general overall process approach solution problem problems question questions answer answers
    response responses message messages output input result results step steps goal goals decision decisions outcome
    outcomes modified modify implemented implement implementation update updated updates added adding create created
    creating title content text data system successfully successful completed complete analysis analyze analyzed
    review reviewed following follow followed example examples make sure able does done doing document documents
    documentation prompt thought involved involving main important discussion some sent received given give gives
    show shows showed shown""".split()
)


@dataclass(frozen=True)
class Verdict:
    label: str  # one of VERDICTS
    evidence: dict = field(default_factory=dict)  # JSON-able: what the rules measured

    @property
    def junk(self) -> bool:
        return self.label in JUNK

    def json(self) -> str:
        return json.dumps(self.evidence, sort_keys=True, ensure_ascii=False)

    def markdown(self) -> str:
        """For the partition's metadata: the verdict, why, and the measures behind it."""
        e = self.evidence
        lines = [f"**verdict** `{self.label}`" + (f": {e['reason']}" if e.get("reason") else "")]
        if "copied" in e:
            lines.append(
                f"copied {e['copied']:.0%} (from the prompt {e['copied_from_prompt']:.0%}), "
                f"fragment coverage {e['coverage']:.2f}, density {e['density']:.2f}, "
                f"identifier precision {e['precision']:.2f}"
            )
        for key, label in (
            ("fragments", "copied fragments"),
            ("unknown_identifiers", "identifiers no turn has"),
            ("unfounded_claims", "claims no turn holds"),
            ("placeholders", "placeholders"),
            ("scaffolding", "prompt scaffolding"),
            ("template_fields", "prompt fields"),
        ):
            if e.get(key):
                items = [f["text"] if isinstance(f, dict) else f for f in e[key]]
                lines.append(f"**{label}**: " + ", ".join(f"`{i}`" for i in items))
        return "\n\n".join(lines)


def _line(text: str) -> str:
    text = text.strip()
    while (opened := _LINE_TAG.sub("", text, count=1)) != text:
        text = opened
    return " ".join(text.split()).lower()


def content_words(text: str) -> set[str]:
    """The text's words of four letters or more, lowered, but a summary's boilerplate (`GENERIC`)."""
    return {w for w in (m.lower() for m in _CONTENT_WORD.findall(text)) if w not in GENERIC}


def own_words(words: set[str], lowered_source: str) -> list[str]:
    """Those of `words` the (lowered) source text holds as whole words, sorted. A word of word
    characters alone is whole where it is a whole run of them, so it is looked up among the
    source's runs instead of searched for with a regex compiled for it; a word that lowering gave a
    character of another kind (`İ`) is searched for."""
    runs = set(_WORD_RUN.findall(lowered_source))
    return sorted(
        w
        for w in words
        if (w in runs if _WORD_RUN.fullmatch(w) else re.search(rf"(?<!\w){re.escape(w)}(?!\w)", lowered_source))
    )


def repeated_share(text: str) -> float:
    """The share of the text's words inside a phrase of `REPEAT_WORDS` words it says `REPEATS` times
    or more."""
    words = [w.lower() for w in _LETTER_WORD.findall(text)]
    phrases = [tuple(words[i : i + REPEAT_WORDS]) for i in range(len(words) - REPEAT_WORDS + 1)]
    counts = Counter(phrases)
    covered = set()
    for i, phrase in enumerate(phrases):
        if counts[phrase] >= REPEATS:
            covered.update(range(i, i + REPEAT_WORDS))
    return len(covered) / len(words) if words else 0.0


def copied_title(turn_documents: Sequence[str], title: str) -> str | None:
    """The line of the agent's side of a turn (its thought, its response, the tools' output) that the
    title is, word for word: "Tokens: 703 sent, 1.1k received." is a line of aider's output, not a
    title. A title taken from the user's own ask is not looked for: it says what the session was for."""
    wanted = _line(title).rstrip(".")
    if len(_LETTER_WORD.findall(wanted)) < TITLE_LINE_WORDS:
        return None
    for document in turn_documents:
        split = _AGENT_PART.search(document)
        agent = document[split.start() :] if split else document
        for line in agent.splitlines():
            if _line(line).rstrip(".") == wanted:
                return line.strip()
    return None


def judge(
    turn_documents: Sequence[str],
    title: str,
    summary: str,
    *,
    input_chars: int | None = None,
    terms: Mapping[str, int] | None = None,
    technologies: Sequence[str] = (),
) -> Verdict:
    """The verdict on one summary of these raw turns (`input_chars`: the size of what the model was
    given, when that was not the turns themselves, e.g. a degraded prompt's content; `terms`: the
    turns' `session_terms` when the caller holds them, as the store does in `turns.terms`;
    `technologies`: the summary's list of them, claims checked with its text, `digest.claims`)."""
    session = session_text(turn_documents)
    text = f"{title}\n{summary}"
    size = len(session) if input_chars is None else input_chars
    lowered = session.lower()
    terms = session_terms(turn_documents) if terms is None else terms
    frags = fragments(copy_source(session), text)
    grounded, unknown = anchors(text, session, terms)
    claims = check_claims(session, title, summary, technologies, identifiers=[*grounded, *unknown])
    placeholders = sorted({m.group(0) for m in _PLACEHOLDER.finditer(text) if m.group(0).lower() not in lowered})
    scaffolding = sorted({m.group(0) for m in _SCAFFOLDING.finditer(text) if m.group(0).lower() not in lowered})
    # Only labels, or a turn's labels over and over (a title "4) User Prompt; 5) User Prompt; ..."):
    # the prompt's form returned as content.
    labels_only = any(
        _LABELS.search(part)
        and (len(_LETTER_WORD.findall(_LABELS.sub(" ", part))) < MIN_WORDS or len(_TURN_LABEL.findall(part)) >= 2)
        for part in (title, summary)
    )
    turn_labels = sorted({m.group(0) for m in _LABELS.finditer(text)}) if labels_only else []
    title_line = copied_title(turn_documents, title)
    fields = sorted({m.group(2).lower() for m in _FIELD_VALUE.finditer(text)})
    field_list = [m.group(0) for m in _FIELD_LIST.finditer(text)] + [m.group(0) for m in _FIELD_NUMBER.finditer(text)]
    # A reply that opens on a comma continues the prompt's own sentence ("..., the goal, the key
    # decisions ..."): no summary starts there.
    continued = summary.lstrip()[:1] in (",", ";")
    schema = sorted({f for f in _SCHEMA_FIELDS if re.search(rf"\b{f}\b", text, re.IGNORECASE)})
    content = content_words(text)
    specific = own_words(content, lowered)
    evidence = {
        "summary_chars": len(title) + len(summary),
        "input_chars": size,
        "fragments": frags.texts(),
        "coverage": round(frags.coverage, 4),
        "density": round(frags.density, 4),
        "copied": round(frags.copied(), 4),
        "copied_from_prompt": round(frags.copied("prompt"), 4),
        "identifiers": len(grounded) + len(unknown),
        "grounded_identifiers": sorted(grounded),
        "unknown_identifiers": sorted(unknown),
        "precision": round(precision(grounded, unknown), 4),
        "placeholders": placeholders,
        "scaffolding": scaffolding,
        "template_fields": fields
        + field_list
        + ([f"schema: {', '.join(schema)}"] if len(schema) >= SCHEMA_LIST else [])
        + (["opens on a comma, the prompt's sentence continued"] if continued else [])
        + [f"only labels: {label}" for label in turn_labels],
        "specific_words": specific[:20],
        "repeated": round(repeated_share(summary), 4),
        "title_copied": title_line,
        "founded_claims": claims.founded,
        "unfounded_claims": claims.unfounded,
    }

    if len(_LETTER_WORD.findall(summary)) < MIN_WORDS:
        return Verdict("empty", {**evidence, "reason": f"fewer than {MIN_WORDS} words"})
    if not _LETTER_WORD.search(title):  # "36", ",::10": no title at all
        return Verdict("empty", {**evidence, "reason": "the title has no word"})
    if size and evidence["summary_chars"] > size:
        return Verdict("too-long", {**evidence, "reason": f"{evidence['summary_chars']} characters for {size}"})
    if placeholders or scaffolding or len(fields) >= 2 or len(schema) >= SCHEMA_LIST:
        reason = (
            "placeholders"
            if placeholders
            else "the prompt's scaffolding"
            if scaffolding
            else "the prompt's field names as values"
            if fields
            else "the schema's fields"
        )
        return Verdict("template", {**evidence, "reason": reason})
    if frags.copied() >= ECHO_SHARE or frags.copied("prompt") >= PROMPT_ECHO_SHARE:
        source = "the prompt" if frags.copied("prompt") >= PROMPT_ECHO_SHARE else "the session"
        return Verdict("echo", {**evidence, "reason": f"{frags.copied():.0%} copied in long fragments of {source}"})
    # The prompt's form, where less of it was copied than an echo is (a copied turn holds its labels).
    if field_list or continued or turn_labels:
        reason = (
            "the prompt's field names as a list or a bare number"
            if field_list
            else "the prompt's sentence continued"
            if continued
            else "only the labels a turn is written with"
        )
        return Verdict("template", {**evidence, "reason": reason})
    # A model caught in a loop ("It also allows you to send ..." seven times) echoes itself.
    if evidence["repeated"] >= REPEAT_SHARE:
        return Verdict(
            "echo", {**evidence, "reason": f"{evidence['repeated']:.0%} of its words in a phrase it repeats"}
        )
    strong = [k for k, kind in unknown.items() if kind in STRONG]
    if strong or len(unknown) >= FABRICATED_SYMBOLS:
        return Verdict("fabricated", {**evidence, "reason": f"{len(unknown)} identifiers no turn has"})
    # The session's own identifiers: a language or product any summary may name (GitHub, Python) is
    # not one; and the words inside the one it names ("stream" and "buffer" of stream_buffer) say
    # nothing more than it does.
    own = [g for g in grounded if g.split(".", 1)[0] not in COMMON_NAMES]
    if unfounded(claims, len(own)):
        return Verdict("fabricated", {**evidence, "reason": f"{len(claims.unfounded)} claims no turn holds"})
    beyond = [w for w in specific if not any(w in g.lower() for g in own)]
    # With one identifier, the rest must be more the session's words than not: "refactored the grid
    # row in src/grid/Row.mjs" is a short summary, "optimize a service ... a library like
    # `stream_buffer`" generic prose around a name.
    foreign = len(content) - len(specific) > len(specific)
    if (not own and len(specific) < MIN_SPECIFIC) or (len(own) == 1 and len(beyond) < MIN_SPECIFIC and foreign):
        return Verdict(
            "content-free",
            {**evidence, "reason": f"{len(own)} identifier of the session, {len(beyond)} more of its words"},
        )
    if title_line:  # the summary may be fine; its title is not one
        return Verdict("echo", {**evidence, "reason": "the title is a line of the session's output, copied"})
    return Verdict("ok", evidence)


MINI_MIN_WORDS = 2  # fewer words than this, once the prompt's markers are left out: empty
_FENCE = re.compile(r"`{3,}\w*")


def judge_mini(turn_document: str, text: str) -> Verdict:
    """The verdict on one turn's mini summary, against that turn's text alone (the only text its
    prompt held). A mini summary in the turn's own words is fine: it is the reference's way too; one
    that says nothing of the turn, loops, or names what the turn never holds is junk.
    A repeat marker copied from the prompt, or a bare code fence, says nothing and is left out first."""
    said = _FENCE.sub(" ", MARKER_PATTERN.sub(" ", text))
    lowered = turn_document.lower()
    terms = session_terms([turn_document])
    grounded, unknown = anchors(said, turn_document, terms)
    content = content_words(said)
    specific = own_words(content, lowered)
    evidence = {
        "words": len(_LETTER_WORD.findall(said)),
        "grounded_identifiers": sorted(grounded),
        "unknown_identifiers": sorted(unknown),
        "specific_words": specific[:20],
        "foreign_words": len(content) - len(specific),
        "repeated": round(repeated_share(said), 4),
    }
    # A turn of few words ("All 214 pass.", a bare "p") cannot lend its summary more of them.
    turn_words = len(_LETTER_WORD.findall(_LABELS.sub(" ", turn_document)))
    if evidence["words"] < min(MINI_MIN_WORDS, turn_words):
        return Verdict(
            "empty", {**evidence, "reason": f"fewer than {MINI_MIN_WORDS} words besides the prompt's markers"}
        )
    if evidence["repeated"] >= REPEAT_SHARE:
        return Verdict(
            "echo", {**evidence, "reason": f"{evidence['repeated']:.0%} of its words in a phrase it repeats"}
        )
    strong = [k for k, kind in unknown.items() if kind in STRONG]
    if strong or len(unknown) >= FABRICATED_SYMBOLS:
        return Verdict("fabricated", {**evidence, "reason": f"{len(unknown)} identifiers the turn does not have"})
    if not grounded and len(specific) < min(MIN_SPECIFIC, len(content_words(turn_document))):
        return Verdict(
            "content-free", {**evidence, "reason": f"no identifier of the turn, {len(specific)} of its words"}
        )
    return Verdict("ok", evidence)
