"""The studio's languages: English and Chinese. Every string of the pages lives in
``static/messages.json`` (one object a language, the same keys in each); the page is served in
the language of its ``wenxin_studio_lang`` cookie (set by the page's switch), else the first of
the browser's ``Accept-Language`` it has, else English."""
from __future__ import annotations

import dataclasses
import functools
import json
import os
from typing import Any, Dict, List, Mapping, Tuple

LANGUAGES = ("en", "zh")
DEFAULT_LANGUAGE = "en"
LANGUAGE_COOKIE = "wenxin_studio_lang"
HTML_LANG = {"en": "en", "zh": "zh-CN"}
MESSAGES_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static", "messages.json")


@functools.lru_cache(maxsize=1)
def messages() -> Dict[str, Dict[str, str]]:
    """Every language's messages: ``{"en": {key: text}, "zh": {...}}``."""
    with open(MESSAGES_PATH, encoding="utf-8") as f:
        loaded: Dict[str, Dict[str, str]] = json.load(f)
    return loaded


def _ranked(accept_language: str) -> List[Tuple[float, int, str]]:
    """``Accept-Language``'s languages by preference (its q values, then its order)."""
    ranked = []
    for order, part in enumerate(accept_language.split(",")[:32]):  # a header of hundreds is no preference list
        tag, _, params = part.strip().partition(";")
        quality = 1.0
        if params.strip().startswith("q="):
            try:
                quality = float(params.strip()[2:])
            except ValueError:
                quality = 0.0
        if tag and 0 < quality <= 1:
            ranked.append((-quality, order, tag.strip().lower()))
    return sorted(ranked)


def choose_language(cookie: str, accept_language: str) -> str:
    """The page's language: the cookie's when it names one of ours, else the browser's first
    choice among ours (``zh``, ``zh-CN``, ``zh-TW`` all read Chinese), else English."""
    if cookie in LANGUAGES:
        return cookie
    for _, _, tag in _ranked(accept_language):
        primary = tag.split("-")[0]
        if primary in LANGUAGES:
            return primary
    return DEFAULT_LANGUAGE


def text(language: str, key: str, **values: object) -> str:
    """One message in ``language`` with its ``{name}`` places filled."""
    template = messages()[language][key]
    return template.format(**values) if values else template


@dataclasses.dataclass(frozen=True)
class Notice:
    """A sentence the server writes for the page (a run's event, its cause, an API error), kept as
    a message key and its values so that each reader sees it in their own language. A value may
    be a notice itself (a cause inside a restart message); other values (a process id, a log line)
    are shown as they are. ``english()`` is what the log and the API's plain ``message`` say."""

    key: str
    values: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def render(self, language: str) -> str:
        filled = {name: value.render(language) if isinstance(value, Notice) else value
                  for name, value in self.values.items()}
        return text(language, self.key, **filled)

    def english(self) -> str:
        return self.render(DEFAULT_LANGUAGE)

    def as_json(self) -> Dict[str, Any]:
        """``{"key", "values"}``, nested notices likewise: what the page renders with its ``t()``."""
        return {"key": self.key, "values": {name: value.as_json() if isinstance(value, Notice) else value
                                            for name, value in self.values.items()}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Notice":
        values = {name: cls.from_json(value) if isinstance(value, dict) else value
                  for name, value in data.get("values", {}).items()}
        return cls(str(data["key"]), values)


def notice(key: str, **values: Any) -> Notice:
    """``notice("notice.started", pid=42)``: a :class:`Notice` of the messages' ``key``."""
    return Notice(key, values)


class NoticedError(ValueError):
    """A refusal said as a :class:`Notice` (its English is the exception's text)."""

    def __init__(self, said: Notice) -> None:
        super().__init__(said.english())
        self.notice = said
