"""Conversations for fine-tuning a decoder (supervised fine-tuning, SFT): ``ChatFieldReader``.

One line of the data file is one conversation, a JSON object in ERNIEKit's SFT format::

    {"system": "...", "src": ["question 1", "question 2"], "tgt": ["answer 1", "answer 2"],
     "label": [0, 1]}

(``system`` and ``label`` optional; ``label[i]`` 0 leaves answer ``i`` out of the loss), or in
the alpaca format ERNIEKit also reads (``instruction``, ``input``, ``output``, optional
``system`` and ``history`` of ``[question, answer]`` pairs). The conversation is written in the
model's chat format (``wenxin.data.chat_format``) by its tokenizer (the field's ``model_dir``).

Length: a conversation longer than ``max_seq_len`` tokens keeps its first turns that fit (the
later ones are left out, so what remains is still a conversation); one whose first turn does not
fit is a malformed line (reported as ``file:line``, or skipped with ``skip_bad_lines``).

A prompt (to generate from) is a line whose last question has no answer: an ERNIEKit object with
one answer fewer than questions, or plain text, the question itself. Its ids end with
``Assistant: `` as the training conversations' prompt parts do, and nothing is learned from it (in
training data it is a malformed line). A prompt longer than ``max_seq_len`` keeps its latest turns
that fit.

Batches: ``packing`` puts the batch's conversations one after another into rows of at most
``max_seq_len`` tokens (in order, each into the first row with room), so short conversations do
not pay for padding. Each conversation in a row is a segment: the model attends only within a
segment, and positions restart at 0 in each. Without packing each conversation is its own row.

Tensors (``<name>`` is the field's name), ``[rows, width]``:
- ``<name>``: token ids (``pad_token`` after the last segment);
- ``<name>_labels``: the next token where it is an answer token the loss covers, else -100;
- ``<name>_segments``: 1, 2, ... for the row's conversations, 0 for padding;
- ``<name>_positions``: each token's position within its conversation;
and ``<name>_lengths`` ``[rows]``: each row's tokens before its padding (where a prompt ends).
"""
from __future__ import annotations

import json
import os
import shutil
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from wenxin.common.errors import ConfigError
from wenxin.common.registry import RegisterSet
from wenxin.data.chat_format import encode_conversation, encode_prompt, fit_prompt
from wenxin.data.ernie45_tokenizer import ADDED_TOKENS_FILE, CONFIG_FILE, MODEL_FILE, SPECIAL_MAP_FILE, Ernie45Tokenizer
from wenxin.data.field_reader import BaseFieldReader, TensorSpec

IGNORED = -100  # a label the loss skips
ChatExample = Tuple[np.ndarray, np.ndarray]  # (ids int32 [T], learn uint8 [T]: 1 where the loss covers the token)


class Conversation:
    """A conversation read from one JSON object: an optional system prompt, (question, answer)
    turns, and per turn whether its answer is learned."""

    def __init__(self, system: Optional[str], turns: List[Tuple[str, str]], learn: List[bool],
                 question: Optional[str] = None) -> None:
        self.system, self.turns, self.learn = system, turns, learn
        self.question = question  # a prompt's last question, which has no answer yet

    @classmethod
    def from_text(cls, text: str) -> "Conversation":
        """A line of data or a prompt: JSON (``from_json``), or plain text, the question of a prompt."""
        if not text.lstrip().startswith("{"):
            return cls(None, [], [], question=text)
        return cls.from_json(text)

    @classmethod
    def from_json(cls, text: str) -> "Conversation":
        """ERNIEKit's SFT object (a prompt when ``tgt`` has one answer fewer than ``src``) or an
        alpaca object; ``ValueError`` naming what is wrong."""
        try:
            record = json.loads(text)
        except (ValueError, RecursionError):
            raise ValueError("not a JSON object (a conversation is one JSON object a line: "
                             "{\"src\": [...], \"tgt\": [...]})") from None
        if not isinstance(record, dict):
            raise ValueError(f"a JSON {type(record).__name__}, not a conversation object")
        system = record.get("system")
        if system is not None and not isinstance(system, str):
            raise ValueError(f"system: expected a string, got {json.dumps(system, ensure_ascii=False)[:60]}")
        if "src" in record or "tgt" in record:
            turns, learn = cls._erniekit_turns(record)
            src = cls._strings(record, "src")
            question = src[-1] if len(turns) == len(src) - 1 else None
            return cls(system or None, turns, learn, question)
        if "instruction" in record or "output" in record:
            return cls(system or None, *cls._alpaca_turns(record))
        keys = ", ".join(map(repr, list(record)[:8]))
        raise ValueError(f"neither ERNIEKit's src/tgt nor alpaca's instruction/output keys (the object has {keys})")

    @staticmethod
    def _strings(record: Dict[str, Any], key: str) -> List[str]:
        if key not in record:
            raise ValueError(f"no {key!r} key (an ERNIEKit conversation has the lists src and tgt)")
        value = record[key]
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"{key}: expected a list of strings, got {json.dumps(value, ensure_ascii=False)[:60]}")
        return value

    @classmethod
    def _erniekit_turns(cls, record: Dict[str, Any]) -> Tuple[List[Tuple[str, str]], List[bool]]:
        src = cls._strings(record, "src")
        tgt = cls._strings(record, "tgt") if "tgt" in record or len(src) != 1 else []
        if src and len(tgt) == len(src) - 1:  # a prompt: the last question awaits its answer
            return list(zip(src[:-1], tgt)), [False] * len(tgt)
        if not src or len(src) != len(tgt):
            raise ValueError(f"src has {len(src)} questions and tgt {len(tgt)} answers: expected as many of each, "
                             f"at least one")
        labels = record.get("label", [1] * len(src))
        if (not isinstance(labels, list) or len(labels) != len(src)
                or not all(v in (0, 1) and not isinstance(v, float) for v in labels)):
            raise ValueError(f"label: expected one 0 or 1 per turn ({len(src)}), got "
                             f"{json.dumps(labels, ensure_ascii=False)[:60]}")
        return list(zip(src, tgt)), [bool(v) for v in labels]

    @classmethod
    def _alpaca_turns(cls, record: Dict[str, Any]) -> Tuple[List[Tuple[str, str]], List[bool]]:
        instruction = record.get("instruction", "")
        extra = record.get("input") or ""
        output = record.get("output")
        if not isinstance(instruction, str) or not isinstance(extra, str) or not isinstance(output, str):
            raise ValueError("instruction, input and output: expected strings")
        history = record.get("history") or []
        pairs_ok = all(isinstance(pair, list) and len(pair) == 2 and all(isinstance(v, str) for v in pair)
                       for pair in history) if isinstance(history, list) else False
        if not pairs_ok:
            raise ValueError("history: expected a list of [question, answer] string pairs")
        question = instruction + extra  # ERNIEKit: src[-1] = instruction + input
        turns = [(q, a) for q, a in history] + [(question, output)]
        return turns, [True] * len(turns)


@RegisterSet.field_readers.register("ChatFieldReader")
class ChatFieldReader(BaseFieldReader):
    """Conversations in ERNIEKit's SFT format (or alpaca's) for a decoder's fine-tuning: the whole
    JSON line is the field's column (see the module docstring)."""

    reads_record = True  # format jsonl: the whole object, not one key's value

    def __init__(self, config: Dict[str, Any], path: str, scope: Optional[str] = None) -> None:
        super().__init__(config, path, scope)
        model_dir = config.get("model_dir") or ""
        if not model_dir:
            raise ConfigError(f"{path}.model_dir: ChatFieldReader needs the model's folder (its tokenizer.model "
                              f"and tokenizer_config.json)")
        try:
            self.tokenizer = Ernie45Tokenizer(model_dir)
        except ConfigError as e:
            raise ConfigError(f"{path}.model_dir: {e}") from None
        self.model_dir = model_dir
        self.max_seq_len: int = config["max_seq_len"]
        self.packing: bool = bool(config.get("packing"))
        self.encoding: str = config.get("chat_encoding", "template")  # a key of chat_format.TURN_ENCODINGS
        self.pad_id = self.tokenizer.special_ids["pad_token"]
        # an export's field reads prompts to generate from (export_files marks it); training data
        # must answer every question
        self.reads_prompts: bool = bool(config.get("reads_prompts"))
        self.reads_conversations = self.reads_prompts
        if self.reads_prompts and self.packing:
            raise ConfigError(f"{path}.packing: prompts are not packed (each is a row its answer continues)")

    @property
    def is_label(self) -> bool:
        return False  # the labels travel inside the conversation

    def convert(self, text: str) -> ChatExample:
        conversation = Conversation.from_text(text)
        if conversation.question is not None:
            if not self.reads_prompts:
                raise ValueError("a prompt, its last question without an answer: a conversation to learn from has "
                                 "an answer (tgt) for each question (src)")
            return self._prompt(conversation)
        if not any(conversation.learn):
            raise ValueError("label: every answer is 0, so the conversation teaches nothing")
        # the first turns that fit (each turn encoded once)
        encoded = encode_conversation(self.tokenizer, conversation.system, conversation.turns, conversation.learn,
                                      max_length=self.max_seq_len, encoding=self.encoding)
        if not encoded.ids:
            first = encode_conversation(self.tokenizer, conversation.system, conversation.turns[:1],
                                        encoding=self.encoding)
            raise ValueError(f"the first turn alone is {len(first.ids)} tokens, more than max_seq_len "
                             f"{self.max_seq_len}")
        if not any(encoded.learn):
            raise ValueError(f"no learned answer fits in max_seq_len {self.max_seq_len} (the turns that fit are "
                             f"label 0)")
        return np.asarray(encoded.ids, dtype=np.int32), np.asarray(encoded.learn, dtype=np.uint8)

    def _prompt(self, conversation: Conversation) -> ChatExample:
        """A prompt's ids, with its latest turns that fit in ``max_seq_len`` (``fit_prompt``: linear
        in the conversation's size)."""
        assert conversation.question is not None
        ids, _ = fit_prompt(self.tokenizer, conversation.system, conversation.turns, conversation.question,
                            self.max_seq_len, self.encoding)
        if not ids:
            alone = encode_prompt(self.tokenizer, conversation.system, [], conversation.question, self.encoding)
            raise ValueError(f"the prompt's question alone is {len(alone)} tokens, more than max_seq_len "
                             f"{self.max_seq_len}")
        return np.asarray(ids, dtype=np.int32), np.zeros(len(ids), dtype=np.uint8)

    def length(self, value: ChatExample) -> int:
        return len(value[0])

    # what ``wenxin inspect`` shows of a conversation (text fields' defaults read a vocab)
    def raw_length(self, column: str) -> int:
        """The conversation's tokens before ``max_seq_len`` keeps its first turns."""
        conversation = Conversation.from_text(column)
        if conversation.question is not None:
            return len(encode_prompt(self.tokenizer, conversation.system, conversation.turns, conversation.question,
                                     self.encoding))
        return len(encode_conversation(self.tokenizer, conversation.system, conversation.turns,
                                       encoding=self.encoding).ids)

    def token_ids(self, value: ChatExample) -> List[int]:
        return [int(i) for i in value[0]]

    def token_texts(self, ids: Sequence[int]) -> List[str]:
        return self.tokenizer.pieces(ids)

    def export_files(self, folder: str) -> Dict[str, Any]:
        """The tokenizer's files, copied to ``vocab/<name>`` of the export."""
        target = os.path.join("vocab", self.name)
        os.makedirs(os.path.join(folder, target), exist_ok=True)
        for name in (MODEL_FILE, CONFIG_FILE, SPECIAL_MAP_FILE, ADDED_TOKENS_FILE):
            if os.path.isfile(os.path.join(self.model_dir, name)):
                shutil.copyfile(os.path.join(self.model_dir, name), os.path.join(folder, target, name))
        return {"model_dir": target, "reads_prompts": True, "packing": False}  # one prompt a row

    def rows(self, values: Sequence[ChatExample]) -> List[List[int]]:
        """Which conversations go in which row: one each, or packed in order, each into the first
        row with room."""
        if not self.packing:
            return [[i] for i in range(len(values))]
        rows: List[List[int]] = []
        room: List[int] = []
        for i, (ids, _) in enumerate(values):
            for r, left in enumerate(room):
                if len(ids) <= left:
                    rows[r].append(i)
                    room[r] -= len(ids)
                    break
            else:
                rows.append([i])
                room.append(self.max_seq_len - len(ids))
        return rows

    def collate(self, values: List[ChatExample]) -> Dict[str, np.ndarray]:
        layout = self.rows(values)
        width = max(sum(len(values[i][0]) for i in row) for row in layout)
        if self.config.get("pad_to_max_seq_len"):
            width = self.max_seq_len
        shape = (len(layout), width)
        ids = np.full(shape, self.pad_id, dtype=np.int64)
        labels = np.full(shape, IGNORED, dtype=np.int64)
        segments = np.zeros(shape, dtype=np.int64)
        positions = np.zeros(shape, dtype=np.int64)
        lengths = np.zeros(len(layout), dtype=np.int64)
        for r, row in enumerate(layout):
            start = 0
            for segment, i in enumerate(row, start=1):
                tokens, learn = values[i]
                end = start + len(tokens)
                ids[r, start:end] = tokens
                segments[r, start:end] = segment
                positions[r, start:end] = np.arange(len(tokens))
                # the token at t learns to predict t + 1 where t + 1 is a learned answer token
                targets = np.where(learn[1:].astype(bool), tokens[1:], IGNORED)
                labels[r, start:end - 1] = targets
                start = end
            lengths[r] = start
        return {self.name: ids, f"{self.name}_labels": labels, f"{self.name}_segments": segments,
                f"{self.name}_positions": positions, f"{self.name}_lengths": lengths}

    def tensor_specs(self) -> List[TensorSpec]:
        return [TensorSpec(name, [-1, -1], "int64") for name in
                (self.name, f"{self.name}_labels", f"{self.name}_segments", f"{self.name}_positions")] + \
            [TensorSpec(f"{self.name}_lengths", [-1], "int64")]

    def info(self) -> Dict[str, Any]:
        return {"chat": True, "model_dir": self.model_dir, "max_seq_len": self.max_seq_len,
                "vocab_size": self.tokenizer.vocab_size, "padding_id": self.pad_id,
                "special_ids": dict(self.tokenizer.special_ids), "stop_ids": self.tokenizer.stop_ids()}


def _response_text(value: Any, index: int) -> str:
    """One response of a preference line: a string, or a list holding one string (ERNIEKit's)."""
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if not isinstance(value, str):
        raise ValueError(f"response[{index}]: expected a string (or a list of one string), got "
                         f"{json.dumps(value, ensure_ascii=False)[:60]}")
    return value


class PreferencePair:
    """A prompt (system, earlier turns, the last question) with a chosen and a rejected answer."""

    def __init__(self, system: Optional[str], history: List[Tuple[str, str]], question: str, chosen: str,
                 rejected: str) -> None:
        self.system, self.history, self.question = system, history, question
        self.chosen, self.rejected = chosen, rejected

    @classmethod
    def from_json(cls, text: str) -> "PreferencePair":
        """ERNIEKit's DPO object: ``src`` (questions), ``tgt`` (one answer fewer), ``response``
        (the candidate last answers) and ``sort`` (higher is preferred); the best and the worst
        response make the pair. ``ValueError`` naming what is wrong."""
        try:
            record = json.loads(text)
        except (ValueError, RecursionError):
            raise ValueError("not a JSON object (a preference pair is one JSON object a line)") from None
        if not isinstance(record, dict):
            raise ValueError(f"a JSON {type(record).__name__}, not a preference object")
        system = record.get("system")
        if system is not None and not isinstance(system, str):
            raise ValueError("system: expected a string")
        src = Conversation._strings(record, "src")
        tgt = Conversation._strings(record, "tgt") if "tgt" in record else []
        if not src or len(tgt) != len(src) - 1:
            raise ValueError(f"src has {len(src)} questions and tgt {len(tgt)} answers: expected one answer fewer "
                             f"than questions (the last question's answers are the responses)")
        responses, sort = record.get("response"), record.get("sort")
        if not isinstance(responses, list) or len(responses) < 2:
            raise ValueError("response: expected a list of at least two candidate answers")
        if (not isinstance(sort, list) or len(sort) != len(responses)
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in sort)):
            raise ValueError(f"sort: expected one number per response ({len(responses)}), higher for the preferred")
        texts = [_response_text(value, i) for i, value in enumerate(responses)]
        best = max(range(len(sort)), key=lambda i: (sort[i], -i))
        worst = min(range(len(sort)), key=lambda i: (sort[i], i))
        if sort[best] == sort[worst]:
            raise ValueError("sort: every response has the same score, so none is preferred")
        return cls(system or None, list(zip(src[:-1], tgt)), src[-1], texts[best], texts[worst])


@RegisterSet.field_readers.register("PreferenceFieldReader")
class PreferenceFieldReader(ChatFieldReader):
    """Preference pairs in ERNIEKit's DPO format for a decoder's preference tuning: each line is a
    prompt with a chosen and a rejected answer (see ``PreferencePair``). Only the last answer is
    learned (``<name>_labels``); batches are never packed, and row ``2i`` is pair ``i``'s chosen
    conversation, row ``2i + 1`` its rejected one."""

    def __init__(self, config: Dict[str, Any], path: str, scope: Optional[str] = None) -> None:
        super().__init__(config, path, scope)
        if self.packing:
            raise ConfigError(f"{path}.packing: preference pairs are not packed (each conversation is a row)")

    def _encoded(self, pair: PreferencePair, answer: str, which: str) -> ChatExample:
        turns = pair.history + [(pair.question, answer)]
        learn = [False] * len(pair.history) + [True]
        encoded = encode_conversation(self.tokenizer, pair.system, turns, learn, encoding=self.encoding)
        if len(encoded.ids) > self.max_seq_len:
            raise ValueError(f"the {which} conversation is {len(encoded.ids)} tokens, more than max_seq_len "
                             f"{self.max_seq_len}")
        return np.asarray(encoded.ids, dtype=np.int32), np.asarray(encoded.learn, dtype=np.uint8)

    def convert(self, text: str) -> Tuple[np.ndarray, ...]:  # type: ignore[override]
        pair = PreferencePair.from_json(text)
        chosen = self._encoded(pair, pair.chosen, "chosen")
        rejected = self._encoded(pair, pair.rejected, "rejected")
        return chosen + rejected

    def length(self, value: Tuple[np.ndarray, ...]) -> int:
        return max(len(value[0]), len(value[2]))

    def collate(self, values: List[Tuple[np.ndarray, ...]]) -> Dict[str, np.ndarray]:  # type: ignore[override]
        rows = [conversation for value in values for conversation in ((value[0], value[1]), (value[2], value[3]))]
        return super().collate(rows)

    def info(self) -> Dict[str, Any]:
        return {**super().info(), "chat": False, "preference": True}
