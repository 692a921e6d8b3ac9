"""The texts sent to the model: the session summary, mini summary and graph extraction prompts.

A prompt's bytes key the response cache and the golden fixtures, so any change here is a new
prompt (bump `SUMMARY_CODE_VERSION` below when the summary's changes). What the
summary prompt asks of each field stays beside the output model (`summary_output.PROMPT_LINES`),
so a new field is written in one place.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

from digest.summary_output import PROMPT_LINES, SessionSummaryOutput

# Bump when a prompt or the routing rule changes, so the UI marks summaries as stale; each summary
# records the version it was made under (`session_summaries.code_version`), which
# `plan --resummarize --code-version` selects on.
SUMMARY_CODE_VERSION = "summary-v1"

# Between two turn documents, in a raw summary prompt and in a graph chunk.
TURN_SEPARATOR = "\n\n---\n\n"

# --- the session summary (digest.synthesis) ------------------------------------------------------

SUMMARY_HEAD = (
    "Analyze the following AI-agent work session and reply with one JSON object, no markdown, with these fields:"
)
SUMMARY_FIELDS = tuple(SessionSummaryOutput.model_fields)  # in the order the prompt asks for them
SUMMARY_INSTRUCTIONS = "\n".join([SUMMARY_HEAD, *(f'- "{name}": {PROMPT_LINES[name]}' for name in SUMMARY_FIELDS)])


def _parts(line: str) -> list[str]:
    """The parts a list of the summary's parts names: "the goal, ..., and the outcome." gives "goal", ..."""
    return [re.sub(r"^(?:and\s+)?(?:the\s+)?", "", part.strip()).lower() for part in line.rstrip(".").split(",")]


# The parts of a session the summary field asks for, in the prompt's words and in the schema's
# description of the field: a reply that gives them back as values or as a list copied the prompt
# (the verdict's template rule looks for them).
SUMMARY_PARTS = tuple(
    dict.fromkeys(
        _parts(PROMPT_LINES["summary"]) + _parts(SessionSummaryOutput.model_fields["summary"].description or "")
    )
)


# The labels of the session's metadata in the summary prompt: a summary that reproduces one copied
# the prompt's scaffolding (the verdict's template rule looks for them).
AGENTS_LABEL = "This session involved the following agents:"
TOOL_CALLS_LABEL = "Total Tool Calls Executed:"
TOOLS_LABEL = "Unique Tools Utilized:"
MODELS_LABEL = "running on models:"
SUMMARY_LABELS = (AGENTS_LABEL, MODELS_LABEL, TOOL_CALLS_LABEL, TOOLS_LABEL)


def summary_prompt(content: str, agents: str, models: str, tool_calls: int, tools: str) -> str:
    """The summary prompt over `content` (the raw turns or a line per turn), with the session's
    agents, models and tools as comma-separated names (empty: none known)."""
    return (
        f"{SUMMARY_INSTRUCTIONS}\n\n"
        f"{AGENTS_LABEL} {agents or 'unknown'} {MODELS_LABEL} {models or 'unknown'}.\n"
        f"{TOOL_CALLS_LABEL} {tool_calls}\n"
        f"{TOOLS_LABEL} {tools or 'none recorded'}\n"
        f"---\n{content}"
    )


def compact_line(number: int, text: str) -> str:
    """One turn's line of a compact summary prompt (numbered from 1)."""
    return f"Turn {number}: {text}"


# --- the mini summary (digest.mini_summaries) ----------------------------------------------------

# Bump when the prompt or the output cleaning changes.
MINI_SUMMARY_CODE_VERSION = "mini-summary-v2"

MINI_SUMMARY_INSTRUCTION = "Summarize this agent turn in one line, max 280 characters, no preamble:"
# The prompt is `MINI_SUMMARY_HEAD + prompt + MINI_SUMMARY_MIDDLE + response`.
MINI_SUMMARY_HEAD = f"{MINI_SUMMARY_INSTRUCTION}\nUser: "
MINI_SUMMARY_MIDDLE = "\nAgent: "

# --- the graph extraction (digest.graph) ---------------------------------------------------------

# Bump when the extraction prompt, the schema or the graph's shape changes (v2: Neo.mjs's node ids,
# labels and edges).
GRAPH_CODE_VERSION = "graph-v2"

# The example is off-domain on purpose: a small model copies it, and the grounding rule then drops
# the copy (no session names a teapot's pour() method, and one that does earns the entity).
SHAPE_EXAMPLE = json.dumps(
    {
        "entities": [
            {"name": "Teapot", "type": "CLASS", "description": "Brews the tea."},
            {"name": "pour()", "type": "METHOD", "description": "Pours the tea."},
        ],
        "relations": [
            {
                "source": "Teapot",
                "target": "pour()",
                "type": "IMPLEMENTS",
                "description": "The teapot pours.",
                "weight": 1.0,
            }
        ],
    }
)
EXCERPT_HEADER = "--- Session excerpt ---"


def extraction_instructions(entity_types: Iterable[str], relation_types: Iterable[str]) -> str:
    """The extraction prompt's instructions, naming the types the output model accepts."""
    return f"""Extract a knowledge graph from this excerpt of an AI-agent work session.
Reply with one JSON object, no markdown, with two lists:
- "entities": what the excerpt works on, each with "name", "type" (one of {", ".join(entity_types)}) and a short "description".
- "relations": how those entities relate, each with "source" and "target" (entity names from your list), "type" (one of {", ".join(relation_types)}), a short "description" and a "weight" from 0.1 (weak) to 5 (strong).
Keep to the most important: at most 8 entities and 8 relations. Use the names as the excerpt writes them. Issue numbers are found separately: leave them out.
The shape, by an example that is not from this session:
{SHAPE_EXAMPLE}"""


def extraction_prompt(instructions: str, content: str) -> str:
    """The extraction prompt over one chunk of turn text."""
    return f"{instructions}\n\n{EXCERPT_HEADER}\n{content}"
