"""What the preference page tests share: a project with categories, a subscriber, its link,
and the page's form read back as a browser would submit it."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urlsplit

from tests.conftest import ProjectKeys, create_project

SETTINGS = {
    "required_categories": ["security"],
    "category_defaults": {"marketing": {"email": False}},
    "category_names": {
        "news": {"en": "News", "de": "Neuigkeiten"},
        "security": {"en": "Security alerts"},
    },
    "quiet_hours": {"start": "22:00", "end": "07:00"},
}
SUBSCRIBER = {"email": "ada@example.com", "locale": "de-AT", "timezone": "Europe/Vienna"}


@dataclass
class Form:
    """The page's form: its fields as a browser would send them, and which are locked."""

    fields: dict[str, str] = field(default_factory=dict)
    checkboxes: dict[str, bool] = field(default_factory=dict)
    disabled: set[str] = field(default_factory=set)
    legends: list[tuple[str, str | None]] = field(default_factory=list)

    def submission(self, **changes: bool | str) -> dict[str, str]:
        """What submitting sends after `changes` (a checkbox by name → on/off, or a field's value)."""
        sent = dict(self.fields)
        boxes = dict(self.checkboxes)
        for name, value in changes.items():
            if isinstance(value, bool):
                boxes[name] = value
            else:
                sent[name] = value
        sent.update({name: "on" for name, on in boxes.items() if on and name not in self.disabled})
        return sent


class _FormReader(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.form = Form()
        self._select: str | None = None
        self._legend: tuple[list[str], str | None] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "input" and a.get("name"):
            if a.get("type") == "checkbox":
                self.form.checkboxes[a["name"]] = "checked" in a
                if "disabled" in a:
                    self.form.disabled.add(a["name"])
            else:
                self.form.fields[a["name"]] = a.get("value") or ""
        elif tag == "select":
            self._select = a.get("name")
            self.form.fields[self._select or ""] = ""
        elif tag == "option" and self._select and "selected" in a:
            self.form.fields[self._select] = a.get("value") if "value" in a else "\0pending"
        elif tag == "legend":
            self._legend = ([], a.get("lang"))

    def handle_data(self, data: str) -> None:
        if self._select and self.form.fields.get(self._select) == "\0pending":
            self.form.fields[self._select] = data.strip()
        if self._legend is not None:
            self._legend[0].append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "select":
            self._select = None
        elif tag == "legend" and self._legend is not None:
            self.form.legends.append(("".join(self._legend[0]).strip(), self._legend[1]))
            self._legend = None


def read_form(page: str) -> Form:
    reader = _FormReader()
    reader.feed(page)
    return reader.form


def audience(client: Any, settings: dict[str, Any] | None = None, name: str = "Acme") -> ProjectKeys:
    """A project with email and SMS, categories as SETTINGS says, and subscriber u1."""
    project = create_project(client, name=name, channels=["email", "sms"], settings=settings or SETTINGS)
    assert project.call("PUT", "/v1/subscribers/u1", SUBSCRIBER).status_code == 201
    return project


def link(project: ProjectKeys, subscriber: str = "u1", **body: Any) -> str:
    """The path of the subscriber's preference page (`/p/<token>`)."""
    answer = project.call("POST", f"/v1/subscribers/{subscriber}/preference-link", body)
    assert answer.status_code == 200, answer.get_json()
    return urlsplit(answer.get_json()["url"]).path
