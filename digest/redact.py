"""Secrets taken out of a turn's text before it is stored (and so before any model call, archive
or export): each found secret's value is replaced by `[REDACTED:<kind>]`, the text around it kept,
so a key's name, a command or a URL's host stay searchable.

A curated pattern set, after deja-vu's (`internal/redact/redact.go`): provider keys and tokens by
their fixed prefixes, JWTs, PEM private-key blocks, passwords in URLs, `curl -u`, `docker login -p`
and `.netrc`, Bearer/Basic headers and headers named for a secret (`X-Api-Key`), and assignments
(`KEY=value` lines, `PGPASSWORD=... psql`, `"password": "..."`) whose key names a secret.
`bench/redaction.py` measured it against Yelp's detect-secrets on a labelled sample and two held-out
sets (BENCHMARKS.md, "Redaction"); `bench/redaction_words.py` on non-secret look-alikes. Each
pattern runs only when one of its literal hints is in the text (most turns hold none), and a
redacted text is redacted again unchanged, so a re-ingest or the store's migration agree.

Words are kept: a placeholder or a product's default as the value, a value that names something (a
header, an attribute of code, a class), a key that is a setting about a secret (`API_KEY_HEADER`), a
Basic header's value that is not base64 of `user:password`. No value runs past a line's end, real or
JSON-escaped (`\\n` as two characters).

What it does not catch: a secret split across lines or encoded (base64 of a key), a password in
prose with no key name, a high-entropy string with no prefix or assignment (no entropy pass:
detect-secrets' entropy detectors ate hashes, base64 test data and long identifiers on the sample),
password flags of other commands than the ones below, and a password that is a default's word or
capitalised words with no digit (`CorrectHorseBattery`, taken for a class name).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import string
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from digest.turns import compose_document

MARK = "[REDACTED:{}]"
# The turn row's text fields, and the text of an imported summary or mini summary.
TURN_TEXT_FIELDS = ("prompt", "thought", "response", "document")
SUMMARY_TEXT_FIELDS = ("title", "summary")
# Every stored column that holds text read from the input, by table: redacted before it is written
# (`digest.ingest`), and in a store that held it before by a migration (`resources.store.redaction`).
# A reject's reason may quote the line's value, and its excerpt is the line itself. Every other
# text column is named, with why it holds no input, in `resources.store.redaction.NOT_INPUT_TEXT`.
REDACTED_TEXT = {
    "turns": TURN_TEXT_FIELDS,
    "mini_summaries": ("text",),
    "imported_summaries": (*SUMMARY_TEXT_FIELDS, "metadata"),
    "imported_graph_nodes": ("properties",),
    "imported_graph_edges": ("properties",),
    "rejects": ("reason", "excerpt"),
}
# The fields among those that are JSON text: they stay JSON when redacted (`redact_json`).
JSON_TEXT_FIELDS = frozenset({"metadata", "properties"})

# Values that stand for a secret rather than being one: an example's or a template's, a default
# that ships with a product (`postgres`, `minioadmin`, Java's `changeit`), a setting's word.
_PLACEHOLDER = re.compile(
    r"""(?ix) ^(?:
        \$\{?[\w.\-:]*\}? | \$\(.*\) | \{\{.*\}\} | \$\{\{.* | <[^>]*> | %\(?\w*\)?s? | \*+ | x{3,} | .*(?:\.{3}|…)
        | (?:your|example|sample|dummy|fake|placeholder)[\w\-]* | (?:change|replace)[\-_]?(?:me|it)\b[\w\-]*
        | my[\-_]?(?:secret|password|pass|token|key|api)[\w\-]* | password | passwd | secret | token
        | test(?:ing)? | dev | local | demo | default | todo | tbd | postgres | admin | root | guest | minioadmin
        | none | null | nil | true | false | yes | no | on | off | enabled | disabled | required | optional | auto
        | \w*undefined | unset | redacted | \d+ | \[redacted:[\w\-]+\]
    )$"""
)
# A value that names something rather than being a made-up string: a header's name, an attribute
# of code (`settings.SECRET_KEY`: no digit, as a made-up token has), a class or constant of two or
# more capitalised words of three letters or more (`PydanticUndefined`; not `AbCdEf`).
_NAME_VALUE = re.compile(
    r"""(?x) ^(?:
        (?i:x-[a-z]+(?:-[a-z]+)* | (?:proxy-)?authori[sz]ation | (?:set-)?cookie | api-key)
        | [A-Za-z_]+(?:\.[A-Za-z_]+)+ | [A-Za-z][a-z]{2,}(?:[A-Z][a-z]{2,})+
    )$"""
)
# The words a key holding a secret has; `TOKENS` (a count), `TOKENIZER` and `PWD` (a folder) are not.
_SECRET_WORD = r"(?:passw(?:or)?d|secret|token(?![a-z])|api[_\-]?key|apikey|access[_\-]?key|private[_\-]?key|auth[_\-]?key|credentials?)"
# Bounded around the word: an unbounded run would make a long dotted line cost its length squared.
_SECRET_KEY = rf"[\w.\-]{{0,40}}?{_SECRET_WORD}[\w.\-]{{0,40}}"
# A key naming a file, a place, a name or a setting about the secret holds that, not the secret
# itself (`API_KEY_HEADER`, `JWT_SECRET_ALGORITHM`, `TOKEN_TTL`); matched on the key in snake case.
_NOT_A_SECRET_KEY = re.compile(
    r"""_(?:file|path|dir|url|uri|endpoint|location|host|port|env|var|name|id|type|header|field|param|ref|arn
    |prefix|scope|length|count|limit|size|min|max|ttl|expiry|expires?(?:_\w+)?|lifetime|timeout|interval
    |algorithm|alg|hasher|rounds|encoding|format|backend|provider|store|manager|service|client|helper|source
    |validator|enabled|required|on_\w+)$""",
    re.X,
)
# A value's characters: not a space, and not a backslash that starts an escaped line end or tab (a
# JSON-escaped text's `\n`, two characters), so a value never runs on into the next line.
_VALUE_CHAR = r"(?:[^\s\\{}]|\\(?![nrt]))"
# Where a line ends, in a text or in a JSON-escaped one.
_LINE_END = r"(?:$|(?=\\[nrt]))"


def _value(excluded: str = "") -> str:
    """One or more value characters, none of `excluded` (a regex character class's contents)."""
    return _VALUE_CHAR.format(excluded) + "+"


# A command-line argument's value, quoted or not.
_ARG = _value("'\"`")


# What follows a line's start in a `KEY=value` line: the key, and a value that is the rest of the line.
_ENV_LINE = (
    rf"[ \t]*(?:-[ \t]+)?(?:export[ \t]+|set[ \t]+)?(?P<key>{_SECRET_KEY})[ \t]*[=:][ \t]*(?P<q>[\"']?)"
    r"(?P<value>" + _value(r"\"'#`()\[\]{}<>,;") + r")(?P=q)[ \t]*(?:#(?:(?!\\[nrt]).)*)?" + _LINE_END
)
_SECRET_HINTS = ("pass", "secret", "token", "key", "credential")


def _snake(key: str) -> str:
    """`apiKeyHeader` and `API_KEY_HEADER` both as `api_key_header`."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", key).replace("-", "_").lower()


def _placeholder(value: str) -> bool:
    """A placeholder, also as the last word of a sentence (`=false.`)."""
    return bool(_PLACEHOLDER.match(value) or _PLACEHOLDER.match(value.rstrip(".,;:!?")))


# ASCII letters lowered, every other character kept: a lowered copy the same length as the text,
# so a match's place in it is its place in the text (`str.lower` lengthens `İ`).
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


@dataclass(frozen=True)
class Pattern:
    kind: str
    regex: re.Pattern[str]
    hints: tuple[str, ...]  # literal text one of which must be in the text (in the lowered copy with `lowered`)
    group: int = 1  # the match group that is the secret
    keep: Callable[[str, re.Match[str]], bool] | None = None  # None: every match is a secret
    # Matched on the text's ASCII-lowered copy (the pattern written in lower case): Python's `re`
    # is much slower on a case-insensitive pattern (docs/benchmarks-history.md).
    lowered: bool = False
    # The match must not start inside a word: checked here, since a pattern that begins with its
    # literal (not with `\b` or a look-behind) lets `re` skip ahead to it.
    word_start: bool = False


def _value_is_secret(text: str, match: re.Match[str]) -> bool:
    return _secret_value(text[slice(*match.span("key"))], text[slice(*match.span("value"))])


def _secret_value(key: str, value: str) -> bool:
    """An assignment's value is a secret unless it is a placeholder, a path, or code, or its key
    names a file or a place; a lower-case key (code, YAML, JSON) also needs a value that looks
    made up: 8 or more characters of two kinds of letters and digits."""
    if _placeholder(value) or _NOT_A_SECRET_KEY.search(_snake(key)) or value[:1] in "/~." or value.startswith("http"):
        return False
    if _NAME_VALUE.match(value.rstrip(".,;:!?")):
        return False
    if key.isupper():
        return len(value) >= 4
    kinds = sum(bool(re.search(p, value)) for p in ("[a-z]", "[A-Z]", "[0-9]"))
    return len(value) >= 8 and kinds >= 2


def _password_is_secret(text: str, match: re.Match[str]) -> bool:
    return not _placeholder(text[slice(*match.span(1))])


def _flag_value_is_secret(text: str, match: re.Match[str]) -> bool:
    """A command-line password's value (group 2, group 1 its opening quote), not a placeholder, a
    variable or command substitution, a path, the next flag, a help text's metavariable
    (`--password TEXT`) or prose: `-p,`, or an unquoted lower-case word after a space (`the
    --password option`)."""
    start, end = match.span(2)
    value = text[start:end]
    prose = not match.group(1) and text[start - 1] in " \t" and value.isalpha() and value.islower()
    return (
        len(value) >= 4
        and not prose
        and value[:1] not in "$-/~.<{(["
        and not re.fullmatch(r"[A-Z_]+", value)
        and not _placeholder(value)
    )


def _password_flag(regex: str, hints: tuple[str, ...], word_start: bool = True) -> Pattern:
    """A command's password flag: group 2 its value (group 1 its opening quote), kept when
    `_flag_value_is_secret` says it is one."""
    return Pattern("cli-password", re.compile(regex), hints, group=2, keep=_flag_value_is_secret, word_start=word_start)


def _pgpass_line(text: str, match: re.Match[str]) -> bool:
    """A `.pgpass` line, `host:port:database:user:password`: the match starts at the port, so the
    host is taken on to the left up to the line's start (or a JSON-escaped `\\n`). A host has a
    letter or a dot, or is `*` (a timecode's `10:30:00:12:...` has neither)."""
    escaped = text.rfind("\\n", 0, match.start())
    line_start = max(text.rfind("\n", 0, match.start()) + 1, escaped + 2 if escaped >= 0 else 0)
    host = text[line_start : match.start()]
    return bool(re.fullmatch(r"(?=.*[A-Za-z.])[\w.\-]{1,253}|\*", host)) and _password_is_secret(text, match)


def _whole_key(text: str, match: re.Match[str], joiner: str) -> tuple[str, str]:
    """The key of a match that starts at its secret word (a pattern with a free start would try every
    word of every text), taken on to the left over letters, digits and `joiner` (up to 40 of them),
    and the character before it."""
    start = left = match.start()
    while left > 0 and start - left < 40 and (text[left - 1].isalnum() or text[left - 1] == joiner):
        left -= 1
    return text[left : match.end("key")], text[left - 1 : left]


def _inline_value_is_secret(text: str, match: re.Match[str]) -> bool:
    """An upper-case shell variable's value (`PGPASSWORD=... psql`), not a flag's (`--db-password=`)
    nor an expansion's: lower-case `key=value` mid-line is code or prose."""
    key, before = _whole_key(text, match, "_")
    return key.isupper() and before not in ("$", "-") and _secret_value(key, text[slice(*match.span("value"))])


def _header_value_is_secret(text: str, match: re.Match[str]) -> bool:
    """A hyphenated header's name (`X-Api-Key`), not a file's or a place's (`Api-Key-File`)."""
    key, _ = _whole_key(text, match, "-")
    if "-" not in key or _NOT_A_SECRET_KEY.search(_snake(key)):
        return False
    return _secret_value(key, text[slice(*match.span("value"))])


def _basic_credentials(value: str) -> bool:
    """Whether the value is base64 of `user:password`, as a Basic header's and a Docker
    `config.json`'s `auth` are: a title's words (`Basic Python-to-TypeScript`) decode to no text."""
    try:
        decoded = base64.b64decode(value + "=" * (-len(value) % 4), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return False
    return ":" in decoded and decoded.isprintable()


# Words joined by `-`, `_` or `.`, each lower-case, capitalised, camel-cased or an acronym.
_WORDS = re.compile(r"(?:[A-Z]?[a-z]+|[A-Z]+|(?:[A-Z][a-z]+)+)(?:[\-_.](?:[A-Z]?[a-z]+|[A-Z]+|(?:[A-Z][a-z]+)+))+")


def _auth_value_is_secret(text: str, match: re.Match[str]) -> bool:
    """A Basic header's credentials (base64 of `user:password`), or a Bearer token that is not words
    (`Bearer TokenAuthentication-Strategy`)."""
    value = match.group(2)
    if match.group(1) == "Basic":
        return _basic_credentials(value.rstrip("="))
    return not _WORDS.fullmatch(value)


def _docker_auth(text: str, match: re.Match[str]) -> bool:
    return _basic_credentials(match.group(1).rstrip("="))


def _prefixed(kind: str, regex: str, *hints: str) -> Pattern:
    """A provider's key or token, told by its fixed prefix: the regex's leading letters, digits,
    `_` and `-` after its group's `(` are the hint unless hints are given."""
    hints = hints or (re.match(r"\(?([\w\-]+)", regex).group(1),)
    return Pattern(kind, re.compile(regex), hints, word_start=True)


PATTERNS: tuple[Pattern, ...] = (
    # The body of the block, its BEGIN and END lines kept; `\n` as two characters in JSON-escaped text.
    Pattern(
        "private-key",
        re.compile(
            r"-----BEGIN ((?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?)-----((?:(?!-----END).){16,}?)-----END \1-----", re.S
        ),
        ("PRIVATE KEY",),
        group=2,
        keep=lambda text, match: not match.group(2).startswith("[REDACTED:"),  # redacted already: not counted again
    ),
    _prefixed("aws-access-key", r"(A(?:KIA|SIA)[0-9A-Z]{16})(?![0-9A-Za-z])", "AKIA", "ASIA"),
    Pattern(
        "aws-secret-key",
        re.compile(r"aws_secret_access_key\\?[\"']?\s*[:=]\s*\\?[\"']?([a-z0-9/+=]{40})(?![a-z0-9/+=])"),
        ("aws_secret",),
        lowered=True,
    ),
    _prefixed("github-token", r"(gh[opsur]_[A-Za-z0-9]{36,255})\b", "ghp_", "gho_", "ghs_", "ghu_", "ghr_"),
    _prefixed("github-token", r"(github_pat_[A-Za-z0-9_]{22,255})\b"),
    _prefixed("gitlab-token", r"(glpat-[A-Za-z0-9_\-]{20,})"),
    _prefixed("slack-token", r"(xox[abposr]-[A-Za-z0-9\-]{10,})", "xox"),
    # Before the OpenAI pattern, which would take the key too.
    _prefixed("anthropic-key", r"(sk-ant-[A-Za-z0-9_\-]{20,})"),
    _prefixed("openai-key", r"(sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,})"),
    _prefixed("google-api-key", r"(AIza[0-9A-Za-z_\-]{35})(?![\w\-])"),
    _prefixed(
        "stripe-key", r"([sr]k_(?:live|test)_[0-9A-Za-z]{16,})\b", "sk_live_", "sk_test_", "rk_live_", "rk_test_"
    ),
    # A Stripe webhook's signing secret, as `stripe listen` prints it.
    _prefixed("stripe-key", r"(whsec_[0-9A-Za-z]{24,})\b"),
    # A Google OAuth access token (`gcloud auth print-access-token`).
    _prefixed("google-oauth-token", r"(ya29\.[0-9A-Za-z_\-]{20,})"),
    _prefixed("sendgrid-key", r"(SG\.[0-9A-Za-z_\-]{16,32}\.[0-9A-Za-z_\-]{30,50})(?![\w\-])", "SG."),
    # An incoming webhook's URL: its last part is the secret, the workspace and channel ids are not.
    Pattern(
        "slack-webhook",
        re.compile(r"hooks\.slack\.com/services/T[0-9A-Z]+/B[0-9A-Z]+/([0-9A-Za-z]{20,})"),
        ("hooks.slack.com",),
    ),
    # A Telegram bot's token in a Bot API URL (`/bot<id>:<secret>/getUpdates`, `/file/bot...`), or
    # alone: the bot's id, a colon and 35 characters, which start `AA` in the tokens BotFather gives.
    Pattern(
        "telegram-bot-token",
        re.compile(r"api\.telegram\.org/(?:file/)?bot(\d{5,12}:[0-9A-Za-z_\-]{30,40})(?![\w\-])"),
        ("api.telegram.org",),
    ),
    Pattern(
        "telegram-bot-token",
        re.compile(r"(?:\bbot|(?<![\w\-]))(\d{8,12}:AA[0-9A-Za-z_\-]{33})(?![\w\-])"),
        (":AA",),
    ),
    # A Docker `config.json`'s `"auth"`: base64 of `user:password` (JSON-escaped quotes too).
    Pattern(
        "docker-auth",
        re.compile(r'\\?"auth\\?"[ \t]*:[ \t]*\\?"([A-Za-z0-9+/]{8,}={0,2})\\?"'),
        ('"auth',),
        keep=_docker_auth,
    ),
    _prefixed("huggingface-token", r"(hf_[A-Za-z0-9]{30,})\b"),
    _prefixed("npm-token", r"(npm_[A-Za-z0-9]{36})\b"),
    _prefixed("jwt", r"(eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,})(?![\w\-])"),
    # scheme://user:password@host: the password alone, up to the last `@` before the host.
    Pattern(
        "url-password",
        re.compile("://" + _VALUE_CHAR.format(":/@'\"`") + "*:(" + _value("/'\"`") + r")@(?=[\w\-.\[\]%]+)"),
        ("://",),
        keep=_password_is_secret,
    ),
    # A password in a URL's query (a JDBC URL's `&password=`), up to the next parameter.
    Pattern(
        "url-password",
        re.compile(r"[?&](?:password|passwd|pwd)=(" + _value("&'\"`#;") + ")"),
        ("password=", "passwd=", "pwd="),
        keep=_password_is_secret,
        lowered=True,
    ),
    # An Azure shared access signature's `sig=` in a URL's query; the other parameters are not secret.
    Pattern(
        "azure-sas-signature",
        re.compile(r"[?&]sig=([0-9A-Za-z%+/=]{16,})"),
        ("sig=",),
    ),
    # `curl -u user:password`, and `Password=...;` in an ADO.NET or ODBC connection string.
    Pattern(
        "cli-password",
        re.compile(r"-(?:u|-user)[ \t]+['\"]?" + _value(":'\"") + ":(" + _ARG + ")"),
        ("-u ", "-u\t", "--user"),
        keep=_password_is_secret,
        word_start=True,
    ),
    # A password flag with a literal value: `--password=...`, `--db-password ...` (not
    # `--password-file`, `--password "$VAR"` or `--password TEXT` in a help text).
    _password_flag(r"--(?:[a-z0-9]+-){0,3}pass(?:word|wd)?(?:=|[ \t]+)(['\"]?)(" + _ARG + r")\1", ("-pass",)),
    # The short password flags of clients that take one: `mysql -p...` (attached: `-p` alone
    # prompts, and a word after it is the database), `mongosh -p ...`, `redis-cli -a ...`,
    # `sshpass -p ...`; the command's line searched up to 200 characters for it.
    _password_flag(
        r"(?:mysql|mysqldump|mysqladmin|mariadb|mariadb-dump)(?=[ \t])[^\n|;&]{0,200}?[ \t]-p(['\"]?)(" + _ARG + r")\1",
        ("mysql", "mariadb"),
    ),
    _password_flag(
        r"(?:mongosh|mongo|mongodump|mongorestore)(?=[ \t])[^\n|;&]{0,200}?[ \t]-p[ \t]+(['\"]?)(" + _ARG + r")\1",
        ("mongo",),
    ),
    _password_flag(r"redis-cli(?=[ \t])[^\n|;&]{0,200}?[ \t]-a[ \t]+(['\"]?)(" + _ARG + r")\1", ("redis-cli",)),
    _password_flag(r"sshpass[ \t]+-p[ \t]*(['\"]?)(" + _ARG + r")\1", ("sshpass",)),
    # openssl's `-passin`/`-passout pass:...` (not `env:VAR` or `file:path`).
    _password_flag(r"-pass(?:in|out)?[ \t]+(['\"]?)pass:(" + _ARG + r")\1", ("pass:",), word_start=False),
    # A `.pgpass` line, `host:port:database:user:password`, found at its port.
    Pattern(
        "pgpass-password",
        re.compile(r"(?m):(?:\d{1,5}|\*):[^:\s\\]+:[^:\s\\]+:(" + _value(":") + ")" + _LINE_END),
        (":",),
        keep=_pgpass_line,
    ),
    # An `.npmrc` registry's `:_authToken=`, `:_auth=` or `:_password=`, whatever the token's form.
    Pattern(
        "npmrc-token",
        re.compile(r":_(?:authtoken|auth|password)=(" + _ARG + r")"),
        (":_auth", ":_password"),
        keep=_password_is_secret,
        lowered=True,
    ),
    Pattern(
        "connection-string",
        # An Azure storage or Service Bus connection string's key too. The value bounded: an
        # unbounded run would read to the end of a long line at every `password=` on it.
        re.compile(r"(?:password|pwd|accountkey|sharedaccesskey)=(" + _VALUE_CHAR.format(";'\"") + "{1,200});"),
        ("password=", "pwd=", "accountkey=", "sharedaccesskey="),
        keep=_password_is_secret,
        lowered=True,
        word_start=True,
    ),
    Pattern(
        "auth-header",
        re.compile(r"(Bearer|Basic)\s+([A-Za-z0-9._~+/\-]{16,}=*)(?![\w\-])"),
        ("Bearer", "Basic"),
        group=2,
        keep=_auth_value_is_secret,
        word_start=True,
    ),
    # Another header named for a secret, in a curl `-H` or an HTTP log: `X-Api-Key: ...`, `X-Auth-Token: ...`.
    Pattern(
        "secret-header",
        re.compile(
            rf"(?P<key>{_SECRET_WORD}[a-z0-9\-]{{0,40}})[ \t]*:[ \t]*(?P<value>[a-z0-9._~+/=\-]{{8,}})(?![^\s'\"\\])"
        ),
        ("key", "token", "secret", "pass", "credential"),
        group=2,
        keep=_header_value_is_secret,
        lowered=True,
    ),
    # `docker login -p ...` / `--password ...` (podman's too), and a literal piped into `--password-stdin`.
    Pattern(
        "docker-login-password",
        re.compile(
            r"(?:docker|podman)[ \t]+login\b[^\n|;&]{0,200}?[ \t](?:-p|--password)(?:[ \t]+|=)['\"]?(" + _ARG + r")"
        ),
        ("login",),
        keep=_password_is_secret,
        word_start=True,
    ),
    Pattern(
        "docker-login-password",
        re.compile(
            r"echo[ \t]+(?:-n[ \t]+)?['\"]?(" + _value("'\"$|") + r")['\"]?[ \t]*\|[ \t]*(?:docker|podman)[ \t]+login\b"
            r"[^\n]{0,200}?--password-stdin"
        ),
        ("password-stdin",),
        keep=_password_is_secret,
        word_start=True,
    ),
    # A `.netrc` entry, on one line or several: `machine host login user password secret`.
    Pattern(
        "netrc-password",
        re.compile(r"machine[ \t]+[^\s]+\s+login[ \t]+[^\s]+\s+password[ \t]+(" + _ARG + r")"),
        ("machine",),
        keep=_password_is_secret,
        word_start=True,
    ),
    # A line `KEY=value` or `key: value` (an env file, a shell, YAML, a compose file's `- KEY=value`
    # list item), the value the rest of the line; a line of a JSON-escaped text too, found at its `\n`
    # (a look-behind at every position would cost three times as much).
    Pattern("env-secret", re.compile("(?m)^" + _ENV_LINE), _SECRET_HINTS, group=3, keep=_value_is_secret, lowered=True),
    Pattern("env-secret", re.compile(r"\\[nr]" + _ENV_LINE), ("\\n", "\\r"), 3, _value_is_secret, lowered=True),
    # A secret-named variable set for one command, mid-line: `PGPASSWORD=... psql -h db`.
    Pattern(
        "inline-env-secret",
        # Upper-case, as a shell variable is: matched on the text itself, most of which has no such word.
        re.compile(
            rf"(?P<key>{_SECRET_WORD.upper()}[A-Z0-9_]{{0,40}})=(?P<q>[\"']?)"
            r"(?P<value>" + _value("\"'$`;&|#()<>") + r")(?P=q)(?=[ \t]*[;&|]|[ \t]+[^\s#])"
        ),
        ("PASS", "SECRET", "TOKEN", "KEY", "CREDENTIAL"),
        group=3,
        keep=_inline_value_is_secret,
    ),
    # A quoted value of a secret-named key anywhere on a line: JSON, a dict, keyword arguments. The
    # match starts at the key's secret word (the key from there on), which most positions fail at once.
    Pattern(
        "assigned-secret",
        re.compile(
            rf"(?P<key>{_SECRET_WORD}[\w.\-]{{0,40}})\\?[\"']?[ \t]*(?:=|:|=>)[ \t]*\\?(?P<q>[\"'])"
            r"(?P<value>[^\s\"'\\`]+)\\?(?P=q)"
        ),
        ("pass", "secret", "token", "key", "credential"),
        group=3,
        keep=_value_is_secret,
        lowered=True,
    ),
)


def redact(text: str | None, counts: Counter | None = None) -> str | None:
    """The text with each secret's value replaced by `[REDACTED:<kind>]`; each replacement is
    counted by kind in `counts`."""
    if not text:
        return text
    lowered: str | None = None
    for pattern in PATTERNS:
        if pattern.lowered:
            lowered = _lowered(text) if lowered is None else lowered
            haystack = lowered
        else:
            haystack = text
        for hint in pattern.hints:  # a loop, not `any()`: its generator costs about as much as a scan
            if hint in haystack:
                break
        else:
            continue
        replaced = _replace(text, haystack, pattern, counts)
        if replaced is not text:
            text, lowered = replaced, None
    return text


def _lowered(text: str) -> str:
    lowered = text.lower()
    return lowered if len(lowered) == len(text) else text.translate(_ASCII_LOWER)


def _inside_word(text: str, at: int) -> bool:
    return at > 0 and (text[at - 1].isalnum() or text[at - 1] in "_-")


def _replace(text: str, haystack: str, pattern: Pattern, counts: Counter | None) -> str:
    pieces: list[str] = []
    last = 0
    for match in pattern.regex.finditer(haystack):
        if pattern.word_start and _inside_word(text, match.start()):
            continue
        if pattern.keep is not None and not pattern.keep(text, match):
            continue
        start, end = match.span(pattern.group)
        pieces += [text[last:start], MARK.format(pattern.kind)]
        last = end
        if counts is not None:
            counts[pattern.kind] += 1
    if not pieces:
        return text
    pieces.append(text[last:])
    return "".join(pieces)


def redact_json(text: str | None, counts: Counter | None = None) -> str | None:
    """A JSON text redacted and still JSON: redacted whole, as any text is (so `"password": "…"`
    is found with its key), unless a replacement broke it (a value running into an escaped quote),
    then string by string."""
    if not text:
        return text
    found: Counter = Counter()
    whole = redact(text, found)
    if whole is text:
        return text
    try:
        json.loads(whole)
    except ValueError:
        found = Counter()
        whole = json.dumps(_redact_strings(json.loads(text), found), ensure_ascii=False)
    if counts is not None:
        counts.update(found)
    return whole


def _redact_strings(value: object, counts: Counter) -> object:
    if isinstance(value, str):
        return redact(value, counts)
    if isinstance(value, list):
        return [_redact_strings(item, counts) for item in value]
    if isinstance(value, dict):
        return {redact(key, counts): _redact_strings(item, counts) for key, item in value.items()}
    return value


def redact_fields(row: Mapping, fields: Iterable[str]) -> tuple[dict, Counter]:
    """The row with these text fields redacted, and the secrets found by kind.

    A turn's document composed from its prompt, thought and response (every harness log's, and a
    rebuilt one) is composed again from them redacted: each secret is found once, and a line of a
    field starts a line there (`KEY=value` at the start of a prompt). Another document (an
    export's own) and a JSON field (an export's metadata, which holds its title) are redacted
    apart, a kind counted as often as they or the fields hold it, whichever is more, so one secret
    in both is counted once."""
    counts: Counter = Counter()
    out = dict(row)
    fields = tuple(fields)
    parts = ("prompt", "thought", "response")
    composed = "document" in fields and all(f in fields and isinstance(row.get(f), str) for f in parts)
    composed = composed and row.get("document") == compose_document(*(row[f] for f in parts))
    for name in fields:
        value = row.get(name)
        if isinstance(value, str) and name != "document" and name not in JSON_TEXT_FIELDS:
            out[name] = redact(value, counts)
    apart: Counter = Counter()
    if composed:
        out["document"] = compose_document(*(out[f] for f in parts))
    elif isinstance(row.get("document"), str) and "document" in fields:
        in_document: Counter = Counter()
        out["document"] = redact(row["document"], in_document)
        apart |= in_document
    for name in JSON_TEXT_FIELDS.intersection(fields):
        if isinstance(row.get(name), str):
            in_json: Counter = Counter()
            out[name] = redact_json(row[name], in_json)
            apart |= in_json
    return out, counts | apart


def counts_problem(text: str) -> str | None:
    """Why a turn's stored `redactions` (JSON text, kind → count) from outside this store is not
    one, if it is not: `status` adds them up."""
    try:
        counts = json.loads(text)
    except (TypeError, ValueError):
        return "not JSON text"
    if not isinstance(counts, dict) or not all(
        isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in counts.values()
    ):
        return "not a JSON object of kinds and their counts"
    return None
