"""Regular expressions that clients send: compiled with RE2, the engine Kafka uses for them.

Kafka matches a KIP-848 ``SubscribedTopicRegex`` and a ListTransactions ``transactional_id_pattern``
(KIP-1152) with RE2/J, whose matching time is linear in the input. Python's ``re`` backtracks: a
pattern such as ``(a+)+$`` against a long id of 'a's takes exponential time, and a client that sends
one would stall the handler loop that serves every other client. RE2 (google-re2, the C++ library
RE2/J is a port of) matches in linear time and has RE2/J's syntax, so a pattern Kafka refuses (a
backreference, a lookaround) is refused here too: ``ClientRegexError``, which both callers answer
as INVALID_REGULAR_EXPRESSION as Kafka does.

``max_mem`` bounds what one compiled pattern may take (RE2's default, 8 MiB, is the one RE2/J
uses too); a pattern that needs more fails to compile.

Pure functions; any thread.
"""

from __future__ import annotations

from typing import Protocol

import re2

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # refused patterns are answered to the client, not printed to stderr


class ClientRegexError(ValueError):
    """The pattern is not valid RE2 syntax (or needs more memory than a pattern may have)."""


class ClientRegex(Protocol):
    def fullmatch(self, text: str) -> object | None: ...


def compile_client_regex(pattern: str) -> ClientRegex:
    try:
        compiled: ClientRegex = re2.compile(pattern, options=_OPTIONS)
    except re2.error as exc:
        message = exc.args[0] if exc.args else exc
        if isinstance(message, bytes):
            message = message.decode(errors="replace")
        raise ClientRegexError(str(message)) from None
    return compiled
