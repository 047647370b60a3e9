"""Request schemas are built once per route, not once per request."""

from __future__ import annotations

from flask import Flask
from flask_smorest import Api
from marshmallow import Schema, fields

from app.api.blueprint import Blueprint
from app.api.contract import PUBLIC


class CountedSchema(Schema):
    built = 0
    name = fields.String(required=True)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        type(self).built += 1


def test_a_schema_class_is_built_once_for_every_request():
    app = Flask("blueprint-test")
    app.config.update(API_TITLE="t", API_VERSION="1", OPENAPI_VERSION="3.1.0")
    blp = Blueprint("counted", __name__, access=PUBLIC, tag="test")

    @blp.route("/echo", methods=["POST"])
    @blp.arguments(CountedSchema)
    @blp.response(200, CountedSchema)
    def echo(data):
        return data

    Api(app).register_blueprint(blp)
    built_at_declaration = CountedSchema.built
    client = app.test_client()
    for n in range(3):
        answer = client.post("/echo", json={"name": f"n{n}"})
        assert answer.status_code == 200 and answer.get_json() == {"name": f"n{n}"}
    assert client.post("/echo", json={}).status_code == 422
    assert CountedSchema.built == built_at_declaration
