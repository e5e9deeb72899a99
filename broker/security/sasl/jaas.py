"""JAAS configuration values (``sasl.jaas.config``), parsed as Kafka's ``JaasConfig`` parses them.

Grammar (Kafka tokenizes with java.io.StreamTokenizer; this follows its rules)::

    config  := entry+
    entry   := LoginModuleClass flag (key '=' value)* ';'
    flag    := required | requisite | sufficient | optional      (case-insensitive)
    value   := word | "quoted" | 'quoted'                         (backslash escapes in quotes)

Words are letters, digits, ``. - _ $``, starting with a letter, ``-``, ``_`` or ``$``; ``//`` and
``/* */`` comments are skipped; a bare number is not a value (Kafka: "Value not specified for key").
Errors raise :class:`JaasConfigError` with Kafka's messages. The messages never contain option
values, which are secrets.
"""

from __future__ import annotations

from dataclasses import dataclass, field

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTHBEARER_LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
_FLAGS = ("required", "requisite", "sufficient", "optional")
_WORD_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-_$")
_WORD = _WORD_START | frozenset("0123456789.")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "a": "\a", "v": "\v"}


class JaasConfigError(ValueError):
    pass


@dataclass(frozen=True)
class JaasEntry:
    login_module: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)


# Token kinds: ("word", text), ("quoted", text), ("char", c), ("number", text).
Token = tuple[str, str]


def _tokens(text: str) -> list[Token]:
    out: list[Token] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end + 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
        elif c in "\"'":
            i += 1
            chars: list[str] = []
            while i < n and text[i] != c and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n:
                    i += 1
                    chars.append(_ESCAPES.get(text[i], text[i]))
                else:
                    chars.append(text[i])
                i += 1
            i += 1  # the closing quote (StreamTokenizer also ends a quote at a line end or EOF)
            out.append(("quoted", "".join(chars)))
        elif c in _WORD_START or ord(c) >= 128:
            start = i
            while i < n and (text[i] in _WORD or ord(text[i]) >= 128):
                i += 1
            out.append(("word", text[start:i]))
        elif c.isdigit() or c == ".":
            start = i
            while i < n and (text[i].isdigit() or text[i] == "."):
                i += 1
            out.append(("number", text[start:i]))
        else:
            out.append(("char", c))
            i += 1
    return out


def parse_jaas_config(text: str) -> list[JaasEntry]:
    """Every entry of a ``sasl.jaas.config`` value; JaasConfigError with Kafka's message if malformed."""
    tokens = _tokens(text)
    entries: list[JaasEntry] = []
    pos = 0

    def value_of(tok: Token) -> str | None:
        return tok[1] if tok[0] in ("word", "quoted") else None

    while pos < len(tokens):
        module = value_of(tokens[pos])
        if module is None:
            raise JaasConfigError("Login module not specified in JAAS config")
        pos += 1
        if pos >= len(tokens):
            raise JaasConfigError("Login module control flag not specified in JAAS config")
        flag = (value_of(tokens[pos]) or "").lower()
        if flag not in _FLAGS:
            raise JaasConfigError(f"Invalid login module control flag '{tokens[pos][1]}' in JAAS config")
        pos += 1
        options: dict[str, str] = {}
        while pos < len(tokens) and tokens[pos] != ("char", ";"):
            key = tokens[pos][1]
            pos += 1
            if pos >= len(tokens) or tokens[pos] != ("char", "=") or pos + 1 >= len(tokens) \
                    or value_of(tokens[pos + 1]) is None:
                raise JaasConfigError(f"Value not specified for key '{key}' in JAAS config")
            options[key] = tokens[pos + 1][1]
            pos += 2
        if pos >= len(tokens):
            raise JaasConfigError("JAAS config entry not terminated by semi-colon")
        pos += 1
        entries.append(JaasEntry(module, flag, options))
    if not entries:
        raise JaasConfigError("Login module not specified in JAAS config")
    return entries
