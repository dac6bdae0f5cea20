"""The error of a request the studio refuses."""
from __future__ import annotations

from typing import Union

from wenxin.studio.i18n import Notice, NoticedError


class StudioError(Exception):
    """A request the studio refuses: its status and one line saying why (a :class:`Notice` when
    the page shows it, so that it is said in the reader's language)."""

    def __init__(self, status: int, message: Union[str, Notice]) -> None:
        super().__init__(message.english() if isinstance(message, Notice) else message)
        self.status = status
        self.notice = message if isinstance(message, Notice) else None

    @classmethod
    def refused(cls, status: int, e: Exception) -> "StudioError":
        """``e`` (a ``ValueError`` of a part below) as a refusal, its notice kept."""
        return cls(status, e.notice if isinstance(e, NoticedError) else str(e))
