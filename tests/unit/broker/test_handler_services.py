"""Every handler states what it uses of the broker (broker/api/registry.py, issue 29 item 2).

A handler module's ``Services`` names fields of the registry's ``Collaborators`` (or ``handlers``,
the bound registry), each with the collaborator's own type, so what the broker lends and what the
handler declares cannot drift apart unnoticed until a broker starts. No handler reaches the broker
or the connection through the request: it gets its collaborators from the registry and answers
CLOSE_CONNECTION instead of closing.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from types import SimpleNamespace

import pytest

from odradek.broker.api import registry
from odradek.broker.api.handlers import HANDLER_MODULES, all_handlers
from odradek.broker.api.registry import Collaborators, bind_handlers

SPECS = all_handlers()
WITH_SERVICES = [spec for spec in SPECS.values() if spec.services_type is not None]


@pytest.mark.parametrize("spec", WITH_SERVICES, ids=lambda spec: spec.name)
def test_a_handlers_services_are_collaborators_of_the_same_type(spec: registry.HandlerSpec) -> None:
    lent = {f.name: f.type for f in dataclasses.fields(Collaborators)}
    lent["handlers"] = "Mapping[int, HandlerSpec]"
    assert spec.services_type is not None
    declared = {f.name: f.type for f in dataclasses.fields(spec.services_type)}
    assert declared, f"{spec.name}: an empty Services (leave it out: the handler uses nothing of the broker)"
    assert {name: lent.get(name) for name in declared} == declared


def test_binding_gives_each_handler_exactly_its_fields() -> None:
    parts = SimpleNamespace(**{f.name: object() for f in dataclasses.fields(Collaborators)})
    bound = bind_handlers(SPECS, parts)  # type: ignore[arg-type]
    for key, spec in bound.items():
        if spec.services_type is None:
            assert spec.handle is SPECS[key].handle
            continue
        for field in dataclasses.fields(spec.services_type):
            expected = bound if field.name == "handlers" else getattr(parts, field.name)
            assert getattr(spec.services, field.name) is expected, (spec.name, field.name)


def test_a_services_field_that_is_no_collaborator_is_refused() -> None:
    @dataclasses.dataclass(frozen=True)
    class Services:
        replica_manager: object
        broker: object

    with pytest.raises(ValueError, match="Services.broker: no such collaborator"):
        registry.services_for(Services, SimpleNamespace(replica_manager=object()), {})  # type: ignore[arg-type]


@pytest.mark.parametrize("name", [*HANDLER_MODULES, "current_leader", "config_resources", "metadata_authz",
                                  "group_describe_loop", "txn_common"])
def test_no_handler_reaches_the_broker_or_the_connection_through_the_request(name: str) -> None:
    import importlib

    source = inspect.getsource(importlib.import_module(f"odradek.broker.api.handlers.{name}"))
    assert not re.findall(r"request\.(?:broker|conn)\b|close_threadsafe", source)


@pytest.mark.parametrize("name", ["injection", "answers", "request_journal"])
def test_fault_injection_answers_close_connection_instead_of_closing(name: str) -> None:
    """The fault injector wraps every handler (broker/faults/injection.py): a dropped request is
    answered CLOSE_CONNECTION like a handler's, so only the dispatcher touches connections."""
    import importlib

    source = inspect.getsource(importlib.import_module(f"odradek.broker.faults.{name}"))
    assert not re.findall(r"request\.(?:broker|conn)\b|close_threadsafe|\.close\(", source)
