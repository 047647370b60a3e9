"""The one Blueprint class every route module uses.

Each says who may call its routes (`Access`), which it both enforces and declares in the spec,
and which of the README's sections its operations belong to (`tag`); app/api/contract.py
completes every operation's doc from that.

flask-smorest hands `@blp.arguments(SomeSchema)` to webargs as given, and webargs builds a
schema from a class on every request, deep-copying every field and nested schema: about a
quarter of a single send's CPU. This Blueprint builds it once, when the route is declared.

Its parser also checks every JSON body for control characters before the schema loads it
(`app.schemas.text`), so no route can store a string PostgreSQL will refuse.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import flask
import flask_smorest
from flask_smorest.utils import resolve_schema_instance
from marshmallow import Schema, ValidationError, missing
from webargs import core
from webargs.flaskparser import FlaskParser, is_json_request

from app.api import contract
from app.api.contract import Access
from app.errors import DEFAULT_MESSAGES, abort
from app.schemas.text import control_characters


class Parser(FlaskParser):
    def load_json(self, req: flask.Request, schema: Schema) -> Any:
        """A body nested deeper than Python's JSON parser can follow is malformed JSON too: a 400, not a 500."""
        try:
            return super().load_json(req, schema)
        except RecursionError:
            abort(400, DEFAULT_MESSAGES[400], errors={"json": ["Invalid JSON body."]})

    def _raw_load_json(self, req: flask.Request) -> Any:
        """The body parsed once: a route that weighs its body first (app/api/project.py) has
        parsed it already, and webargs would parse it again, a second copy of a 16 MiB body.
        Flask keeps what it parsed; what it could not parse webargs parses, for its 400."""
        if not is_json_request(req):
            return missing
        body = req.get_json(silent=True)
        return core.parse_json(req.get_data(cache=True)) if body is None else body

    def pre_load(self, location_data: Any, *, schema: Schema, req: flask.Request, location: str) -> Any:
        """A control character anywhere in a JSON body is a 422 naming where it is."""
        if location == "json":
            errors = control_characters(location_data, req.get_data(cache=True))
            if errors:
                raise ValidationError(errors)
        return location_data


class Blueprint(flask_smorest.Blueprint):
    ARGUMENTS_PARSER = Parser()

    def __init__(self, name: str, import_name: str, *, access: Access, tag: str, **kwargs: Any):
        super().__init__(name, import_name, **kwargs)
        self.access = access
        self.tag = tag
        if access.check is not None:
            self.before_request(access.check)
        self._prepare_doc_cbks.append(self._document_contract)

    def route(self, rule: str, *, parameters: Any = None, tags: list[str] | None = None, **options: Any):
        """As flask-smorest's, tagged with the blueprint's README section unless given, its path
        parameters with examples, keeping the rule for the contract (whether there is an id in
        the path to be unknown) and naming the operation after the view, which generated clients
        name their functions by."""
        parameters = [*(parameters or []), *contract.path_parameters(rule)]
        register = super().route(rule, parameters=parameters, tags=tags or [self.tag], **options)

        def decorator(view: Callable[..., Any]) -> Callable[..., Any]:
            view._apidoc = {  # type: ignore[attr-defined]
                **getattr(view, "_apidoc", {}),
                "rule": rule,
                "operation_id": view.__name__,
            }
            return register(view)

        return decorator

    def _document_contract(self, doc: dict[str, Any], info: dict[str, Any], *, app: flask.Flask, **_: Any):
        return contract.document(doc, info, self.access, app)

    def arguments(self, schema: Any, *args: Any, **kwargs: Any):
        return super().arguments(resolve_schema_instance(schema), *args, **kwargs)
