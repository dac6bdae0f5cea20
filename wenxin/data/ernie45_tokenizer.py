"""ERNIE 4.5's tokenizer, read from the files of a downloaded model folder.

A folder holds ``tokenizer.model`` (SentencePiece) and usually ``tokenizer_config.json`` (the
special tokens by role and the chat template), ``special_tokens_map.json`` and
``added_tokens.json`` (tokens beyond the SentencePiece vocabulary, with their ids).

Text is encoded as Baidu's own ERNIE 4.5 tokenizer encodes it: the special and added tokens are
cut out of the text first (longest first, so ``<|end_of_sentence|>`` written in a prompt is one
token), and each stretch between them goes through SentencePiece with the model's own
normalization. No BOS or EOS is added: ERNIE 4.5 marks a conversation's start and each answer's
end with ``cls_token`` and ``sep_token``, which the chat format (``wenxin.data.chat_format``)
writes. Ids equal PaddleFormers' ``AutoTokenizer`` on the same folder
(``tests/test_ernie45_tokenizer.py``).
"""
from __future__ import annotations

import hashlib
import os
import re
from typing import Any, Dict, Iterable, List, Optional, Pattern, Sequence, Tuple

from wenxin.common.errors import ConfigError
from wenxin.common.files import file_sha256, read_json_object

MODEL_FILE = "tokenizer.model"
CONFIG_FILE = "tokenizer_config.json"
SPECIAL_MAP_FILE = "special_tokens_map.json"
ADDED_TOKENS_FILE = "added_tokens.json"
# ERNIE 4.5's special tokens by role, where the folder's files leave one unset (its tokenizer's defaults)
DEFAULT_SPECIALS = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<unk>", "unk_token": "<unk>",
                    "cls_token": "<|begin_of_sentence|>", "sep_token": "<|end_of_sentence|>",
                    "mask_token": "<mask:1>", "sys_start_token": "<mask:4>", "sys_end_token": "<mask:5>",
                    "header_start_token": "<mask:6>", "header_end_token": "<mask:7>"}
DEFAULT_ADDITIONAL = ("<mask:1>", "<mask:7>")
_BYTE_PIECE = re.compile(r"<0x[0-9A-F]{2}>")  # SentencePiece's byte fallback


def _read_json(path: str) -> Dict[str, Any]:
    """The JSON object of an optional file of the folder (empty when the folder lacks it)."""
    return read_json_object(path) if os.path.isfile(path) else {}


def _token_text(value: Any, where: str) -> Optional[str]:
    """A special token as the files spell it: a string, or an AddedToken dict's ``content``."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    raise ConfigError(f"{where}: expected a token string or an object with a 'content' string, got {value!r}")


def _id_limit(folder: str) -> Tuple[int, str]:
    """The first id no token may have, and what sets it: the embedding's rows (``vocab_size`` of
    the folder's ``config.json``, where the folder is a model's), else int32's range."""
    config_path = os.path.join(folder, "config.json")
    vocab_size = _read_json(config_path).get("vocab_size") if os.path.isfile(config_path) else None
    if isinstance(vocab_size, int) and not isinstance(vocab_size, bool) and 0 < vocab_size < 2**31:
        return vocab_size, f"the model's vocabulary (vocab_size {vocab_size} in {config_path})"
    return 2**31 - 1, "the largest token id (2**31 - 2)"


class Ernie45Tokenizer:
    """Text to ids and back for an ERNIE 4.5 model folder (see the module docstring).

    ``specials`` maps roles (``cls_token``, ``sep_token``, ...) to token texts; ``special_ids``
    the same roles to ids. ``chat_template`` is the folder's template text, if it has one."""

    def __init__(self, folder: str) -> None:
        model_path = os.path.join(folder, MODEL_FILE)
        if not os.path.isfile(model_path):
            raise ConfigError(f"{folder}: no {MODEL_FILE} (an ERNIE 4.5 folder ships its SentencePiece model there)")
        try:
            import sentencepiece
        except ImportError:
            raise ConfigError("ERNIE 4.5's tokenizer needs the sentencepiece package: pip install sentencepiece "
                              "(or wenxin[ernie45])") from None
        self.folder = folder
        self.processor = sentencepiece.SentencePieceProcessor()
        try:
            self.processor.Load(model_path)
        except (OSError, RuntimeError) as e:
            raise ConfigError(f"{model_path}: not a SentencePiece model ({e})") from None
        config_path = os.path.join(folder, CONFIG_FILE)
        config = _read_json(config_path)
        special_map = _read_json(os.path.join(folder, SPECIAL_MAP_FILE))
        self.specials: Dict[str, str] = {}
        for role, default in DEFAULT_SPECIALS.items():
            value = _token_text(config.get(role, special_map.get(role)), f"{config_path}: {role}")
            self.specials[role] = value if value is not None else default
        additional = config.get("additional_special_tokens", special_map.get("additional_special_tokens"))
        if additional is None:
            additional = list(DEFAULT_ADDITIONAL)
        if not isinstance(additional, list):
            raise ConfigError(f"{config_path}: additional_special_tokens must be a list, got {additional!r}")
        where = f"{config_path}: additional_special_tokens"
        self.additional = [_token_text(token, where) or "" for token in additional]
        template = config.get("chat_template")
        self.chat_template: Optional[str] = template if isinstance(template, str) else None
        self.added: Dict[str, int] = {}
        added_path = os.path.join(folder, ADDED_TOKENS_FILE)
        limit, bound = _id_limit(folder)
        for token, token_id in _read_json(added_path).items():
            if not isinstance(token_id, int) or isinstance(token_id, bool) or token_id < 0:
                raise ConfigError(f"{added_path}: {token!r}: expected a non-negative integer id, got {token_id!r}")
            if token_id >= limit:
                raise ConfigError(f"{added_path}: {token!r}: id {token_id} is past {bound}")
            self.added[token] = token_id
        self._token_of_added = {token_id: token for token, token_id in self.added.items()}
        self.special_ids: Dict[str, int] = {role: self.token_id(token) for role, token in self.specials.items()}
        atomic = set(self.specials.values()) | set(self.additional) | set(self.added)
        atomic.discard("")
        self.special_texts = frozenset(set(self.specials.values()) | set(self.additional))
        self._splitter: Optional[Pattern[str]] = (
            re.compile("(" + "|".join(re.escape(t) for t in sorted(atomic, key=lambda t: (-len(t), t))) + ")")
            if atomic else None)

    def content_digest(self) -> str:
        """A digest of the folder's tokenizer files (the token cache keys on it: a tokenizer replaced
        in the same folder converts the data again)."""
        digest = hashlib.sha256()
        for name in (MODEL_FILE, CONFIG_FILE, SPECIAL_MAP_FILE, ADDED_TOKENS_FILE):
            path = os.path.join(self.folder, name)
            digest.update(f"{name}:{file_sha256(path) if os.path.isfile(path) else '-'};".encode())
        return digest.hexdigest()

    @property
    def vocab_size(self) -> int:
        """Ids the tokenizer can produce: SentencePiece's pieces and the added tokens."""
        return max([self.processor.GetPieceSize()] + [i + 1 for i in self._token_of_added])

    def token_id(self, token: str) -> int:
        """The id of one token text (added tokens first, then SentencePiece's pieces; unknown is unk's id)."""
        if token in self.added:
            return self.added[token]
        return int(self.processor.PieceToId(token))

    def encode(self, text: str) -> List[int]:
        """``text`` to ids: special and added tokens whole, the rest through SentencePiece."""
        if not isinstance(text, str):
            raise TypeError(f"expected text (str), got {type(text).__name__}")
        ids: List[int] = []
        parts = self._splitter.split(text) if self._splitter is not None else [text]
        for index, part in enumerate(parts):
            if not part:
                continue
            if index % 2:  # the splitter's captured group: a special or added token
                ids.append(self.token_id(part))
            else:
                ids.extend(self.processor.EncodeAsIds(part))
        return ids

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        """Ids back to text; special tokens spelled out unless ``skip_special_tokens``."""
        pieces: List[str] = []
        run: List[int] = []
        size = self.processor.GetPieceSize()
        for token_id in ids:
            token_id = int(token_id)
            token = self._token_of_added.get(token_id)
            if token is None and 0 <= token_id < size:
                piece = self.processor.IdToPiece(token_id)
                token = piece if piece in self.special_texts else None
            if token is None and 0 <= token_id < size:
                run.append(token_id)
                continue
            pieces.append(self.processor.DecodeIds(run))
            run = []
            if token is None:
                token = self.specials["unk_token"]
            if not (skip_special_tokens and token in self.special_texts):
                pieces.append(token)
        pieces.append(self.processor.DecodeIds(run))
        return "".join(pieces)

    def pieces(self, ids: Iterable[int]) -> List[str]:
        """Each id's piece (or added token); an id outside the vocabulary is ``unk_token``."""
        size = self.processor.GetPieceSize()
        return [self._token_of_added.get(int(i)) or (self.processor.IdToPiece(int(i)) if 0 <= int(i) < size
                                                     else self.specials["unk_token"]) for i in ids]

    def decode_complete(self, ids: Sequence[int]) -> str:
        """``decode(ids, skip_special_tokens=True)`` without the bytes of a last character whose
        byte pieces (``<0xE4>``) have not all come yet: text decoded as tokens arrive grows by whole
        characters only."""
        ids = list(ids)
        return self.decode(ids[:len(ids) - self.incomplete_tail(ids)], skip_special_tokens=True)

    def incomplete_tail(self, ids: Sequence[int]) -> int:
        """How many ids at the end are the byte pieces of a last character not complete yet."""
        tail: List[int] = []  # the bytes of the byte pieces that end the ids (a character has at most 4)
        for token_id in reversed(list(ids[-4:])):
            piece = self.pieces([token_id])[0]
            if not _BYTE_PIECE.fullmatch(piece):
                break
            tail.append(int(piece[3:5], 16))
        data = bytes(reversed(tail))
        start = len(data)  # the last character's first byte: not a continuation byte (10xxxxxx)
        while start > 0 and data[start - 1] & 0xC0 == 0x80:
            start -= 1
        start -= 1
        if start < 0:
            return 0
        lead = data[start]
        needed = 1 if lead < 0x80 else 2 if lead >> 5 == 0b110 else 3 if lead >> 4 == 0b1110 else \
            4 if lead >> 3 == 0b11110 else 1
        return len(data) - start if len(data) - start < needed else 0

    def stop_ids(self, extra: Sequence[int] = ()) -> List[int]:
        """Tokens that end an answer: ``sep_token`` (the chat format's end of a turn), ``eos_token``
        and ``extra`` (a generation config's ``eos_token_id``)."""
        stops = [self.special_ids["sep_token"], self.special_ids["eos_token"], *extra]
        return sorted(set(int(i) for i in stops))
