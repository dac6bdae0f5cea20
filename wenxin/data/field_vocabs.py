"""Which vocabularies a reader's fields take from elsewhere (the train reader's, a resumed run's
saved ones, another field's) and which its training data must fit."""
from __future__ import annotations

import os
from typing import List, Optional

from wenxin.common.errors import ConfigError, DataError
from wenxin.data.field_reader import BaseFieldReader
from wenxin.data.reading import FitGroup


def field_named(fields: List[BaseFieldReader], name: str) -> Optional[BaseFieldReader]:
    """The field called ``name`` among ``fields`` (None if there is none)."""
    return next((f for f in fields if f.name == name), None)


def known_vocabs(fields: List[BaseFieldReader], train_fields: Optional[List[BaseFieldReader]],
                 saved_vocab_dir: Optional[str] = None) -> List[FitGroup]:
    """Give fields without a vocab file the vocab they share or resume with; returns the vocabs
    the training data must fit. The fields of a reader other than the train reader share the
    train reader's (``train_fields``) field of the same name (or of ``vocab_from``); the train
    reader takes vocabs saved in ``saved_vocab_dir`` (a resumed run), and fits the rest from the
    columns of the field and of every field naming it in ``vocab_from``."""
    groups: List[FitGroup] = []
    for field in fields:
        if not field.needs_fit:
            continue
        owner = field.config.get("vocab_from") or field.name
        if train_fields is not None:
            source = field_named(train_fields, owner)
            if source is None:
                raise DataError(f"{field.path}: field '{field.name}' has no vocab_path and the "
                                f"train_reader has no field '{owner}' to share one with")
            field.share_vocab(source)
        elif owner == field.name:
            saved = os.path.join(saved_vocab_dir, f"{owner}.txt") if saved_vocab_dir else ""
            if saved and os.path.isfile(saved):
                field.use_saved_vocab(saved)
                continue
            sharing = [i for i, f in enumerate(fields)
                       if (f.config.get("vocab_from") or f.name) == owner and f.needs_fit]
            groups.append(FitGroup(field, sharing))
    if train_fields is None:
        check_vocab_sharing(fields)
    return groups


def share_fitted_vocabs(fields: List[BaseFieldReader]) -> None:
    """Fields with ``vocab_from`` take their owner's vocab, once it is fitted."""
    for field in fields:
        owner = field.config.get("vocab_from")
        if owner and field.needs_fit:
            source = field_named(fields, owner)
            assert source is not None and source is not field, "checked in known_vocabs"
            field.share_vocab(source)


def check_vocab_sharing(fields: List[BaseFieldReader]) -> None:
    """Each ``vocab_from`` of a reader's ``fields`` names another of them, of the same kind."""
    for field in fields:
        owner = field.config.get("vocab_from")
        source = field_named(fields, owner) if owner else None
        if owner and field.needs_fit and (source is None or source is field):
            raise ConfigError(f"{field.path}.vocab_from: no other field named '{owner}' in this reader")
        if source is not None and type(source) is not type(field):
            raise ConfigError(f"{field.path}.vocab_from: '{owner}' is a {type(source).__name__}; a "
                              f"{type(field).__name__} shares only the vocab of another "
                              f"{type(field).__name__} (its tokens and ids mean something else)")
