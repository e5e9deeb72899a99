"""``ssl.principal.mapping.rules``: Kafka's SslPrincipalMapper (KIP-371).

Syntax, as Kafka parses it: a comma-separated list of rules, tried in order; the first that applies
names the principal, and a DN no rule applies to fails the authentication.

- ``DEFAULT``: the whole distinguished name (RFC 2253 form, broker/security/rfc2253.py).
- ``RULE:pattern/replacement/`` with an optional ``L`` or ``U`` after the last slash (lower/upper
  case the result, English locale): applies when ``pattern`` (a regular expression) matches the
  *whole* DN; the result is the DN with every match replaced by ``replacement``, whose ``$1``..``$n``
  are the groups (a reference to a group the pattern does not have is literal text, as in Kafka) and
  ``\\x`` is a literal ``x``. Inside pattern and replacement ``\\/`` stands for ``/``.

Example: ``RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,DEFAULT`` maps ``CN=kafka1,OU=ServiceUsers,O=Acme``
to ``kafka1`` and every other DN to itself.

Java regular expressions and Python's agree on everything rules normally use (groups, classes,
lazy quantifiers, anchors); Java-only constructs (possessive quantifiers, ``\\p{...}``) are refused
at start-up as an invalid rule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_RULE_PATTERN = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE_PATTERN + r")\s*(,\s*|$)")
_RULE_PARSER = re.compile(_RULE_PATTERN)
_BACK_REFERENCE = re.compile(r"\$(\d+)")


class NoMatchingRule(ValueError):
    """No rule applies to the DN: the client is not authenticated."""


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    lower: bool = False
    upper: bool = False

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        groups = self.pattern.groups
        result = self.pattern.sub(lambda m: _expand(self.replacement, m, groups), dn)
        if self.lower:
            return result.lower()
        if self.upper:
            return result.upper()
        return result


def _expand(replacement: str, m: re.Match[str], groups: int) -> str:
    """Java's Matcher.appendReplacement after Kafka's escapeLiteralBackReferences."""
    out = []
    i = 0
    n = len(replacement)
    while i < n:
        ch = replacement[i]
        if ch == "\\" and i + 1 < n:
            out.append(replacement[i + 1])
            i += 2
        elif ch == "$" and i + 1 < n and replacement[i + 1].isdigit():
            j = i + 1
            ref = int(replacement[j])
            j += 1
            # Java takes more digits while the number still names an existing group.
            while j < n and replacement[j].isdigit() and ref * 10 + int(replacement[j]) <= groups:
                ref = ref * 10 + int(replacement[j])
                j += 1
            if ref > groups:  # Kafka escapes such a reference: it stays literal text
                out.append(replacement[i:j])
            else:
                out.append(m.group(ref) or "")
            i = j
        else:
            out.append(ch)
            i += 1
    return "".join(out)


class SslPrincipalMapper:
    """Maps a certificate's DN to a principal name with Kafka's rules (see the module docstring)."""

    def __init__(self, rules: str | None) -> None:
        self.rules = _parse(rules if rules is not None else "DEFAULT")

    def name(self, dn: str) -> str:
        for rule in self.rules:
            result = rule.apply(dn)
            if result is not None:
                return result
        raise NoMatchingRule(f"No rules apply to {dn}")


def _parse(text: str) -> list[_Rule]:
    rules = []
    for split in _RULE_SPLITTER.finditer(text.strip()):
        rule = split.group(1)
        m = _RULE_PARSER.match(rule)
        if m is None or m.end() != len(rule):
            unmatched = rule if m is None else rule[m.end():]
            raise ValueError(f"Invalid rule: `{rule}`, unmatched substring: `{unmatched}`")
        if m.group(1) is not None:
            rules.append(_Rule(None))
        elif m.group(2) is not None:
            pattern = m.group(2).replace("\\/", "/")
            try:
                compiled = re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"Invalid rule: `{rule}`: bad pattern: {exc}") from None
            rules.append(_Rule(compiled, m.group(4).replace("\\/", "/"), m.group(6) == "L", m.group(6) == "U"))
        # anything else is an empty rule, which Kafka ignores
    return rules
