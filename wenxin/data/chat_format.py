"""ERNIE 4.5's chat format: conversations to text and to token ids with the answer tokens marked.

The format, as the chat template in ERNIE 4.5's ``tokenizer_config.json`` writes it::

    <|begin_of_sentence|>{system}\\n User: {question}\\nAssistant: {answer}<|end_of_sentence|> User: ...

(without the spaces before ``User``): the conversation opens with ``cls_token``; a system prompt,
when there is one, is followed by a line break; each question is ``User: `` and a line break;
each answer ``Assistant: `` and ``sep_token``; a prompt for the model to answer ends with
``Assistant: ``. ``render`` writes exactly what that template renders (tested against PaddleFormers'
``apply_chat_template``), without a template engine: the folder's template is data from outside,
and wenxin runs none.

For training, ``encode_conversation`` tokenizes the prompt part of each turn (up to and including
``Assistant: ``) and the answer part separately, so the boundary between what the model reads and
what it learns to write falls between tokens, where generation starts at inference (it encodes the
prompt the same way and writes from there).

How a turn's parts become ids is the field's ``chat_encoding`` (``TURN_ENCODINGS``):

- ``template``: the prompt part whole, then the answer (PaddleFormers' ``encode_chat_inputs``);
  SentencePiece sees ``User: {question}\nAssistant: `` as one text, as it sees the template's
  rendering;
- ``erniekit``: ERNIEKit's SFT reader, which tokenizes ``User: ``, the question, ``\nAssistant: ``
  and the answer each on its own, the question and answer stripped of surrounding whitespace (a
  system prompt and its line break apart too). Where SentencePiece would merge pieces across those
  borders the ids differ from the template's.

An export's field keeps the encoding it trained with, so the prompts it serves are encoded as its
training conversations were.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from wenxin.data.ernie45_tokenizer import Ernie45Tokenizer

# ERNIE 4.5's chat template as its tokenizer_config.json ships it, for folders wenxin writes (the
# chat example's); ``render`` writes what it renders, without a template engine
CHAT_TEMPLATE = (
    "{%- if not add_generation_prompt is defined -%}\n    {%- set add_generation_prompt = true -%}\n{%- endif -%}\n"
    "{%- if not cls_token is defined -%}\n    {%- set cls_token = \"<|begin_of_sentence|>\" -%}\n{%- endif -%}\n"
    "{%- if not sep_token is defined -%}\n    {%- set sep_token = \"<|end_of_sentence|>\" -%}\n{%- endif -%}\n"
    "{{- cls_token -}}\n{%- for message in messages -%}\n    {%- if message[\"role\"] == \"user\" -%}\n"
    "        {{- \"User: \" + message[\"content\"] + \"\\n\" -}}\n    {%- elif message[\"role\"] == \"assistant\" -%}\n"
    "        {{- \"Assistant: \" + message[\"content\"] + sep_token -}}\n"
    "    {%- elif message[\"role\"] == \"system\" -%}\n"
    "        {{- message[\"content\"] + \"\\n\" -}}\n    {%- endif -%}\n{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n    {{- \"Assistant: \" -}}\n{%- endif -%}")
USER_PREFIX = "User: "
ASSISTANT_PREFIX = "Assistant: "
ROLES = ("system", "user", "assistant")


@dataclasses.dataclass
class Message:
    """One message of a conversation: ``role`` is ``system``, ``user`` or ``assistant``."""

    role: str
    content: str


def render(messages: Sequence[Message], add_generation_prompt: bool = True,
           cls_token: str = "<|begin_of_sentence|>", sep_token: str = "<|end_of_sentence|>") -> str:
    """The conversation as ERNIE 4.5's chat template writes it (roles outside ``ROLES`` are left
    out, as the template leaves them out)."""
    parts = [cls_token]
    for message in messages:
        if message.role == "user":
            parts.append(USER_PREFIX + message.content + "\n")
        elif message.role == "assistant":
            parts.append(ASSISTANT_PREFIX + message.content + sep_token)
        elif message.role == "system":
            parts.append(message.content + "\n")
    if add_generation_prompt:
        parts.append(ASSISTANT_PREFIX)
    return "".join(parts)


@dataclasses.dataclass
class EncodedConversation:
    """Token ids of a conversation and, per token, whether the model learns to write it
    (``learn[i]``: token ``i`` is part of an answer the loss covers, its closing ``sep_token``
    included)."""

    ids: List[int]
    learn: List[bool]


def _template_system(tokenizer: Ernie45Tokenizer, system: str) -> List[int]:
    """A system prompt and its line break, encoded whole."""
    return tokenizer.encode(system + "\n")


def _template_turn(tokenizer: Ernie45Tokenizer, system: Optional[str], question: str,
                   answer: str) -> Tuple[List[int], List[int]]:
    """One turn's prompt part (after ``system``, where it opens the conversation) and answer part,
    each encoded whole."""
    opening = system + "\n" if system else ""
    return (tokenizer.encode(opening + USER_PREFIX + question + "\n" + ASSISTANT_PREFIX),
            tokenizer.encode(answer + tokenizer.specials["sep_token"]))


def _erniekit_system(tokenizer: Ernie45Tokenizer, system: str) -> List[int]:
    """A system prompt and its line break, each encoded on its own (ERNIEKit's SFT reader)."""
    return tokenizer.encode(system) + tokenizer.encode("\n")


def _erniekit_turn(tokenizer: Ernie45Tokenizer, system: Optional[str], question: str,
                   answer: str) -> Tuple[List[int], List[int]]:
    """One turn as ERNIEKit's SFT reader encodes it: ``User: ``, the stripped question,
    ``\nAssistant: `` and the stripped answer each encoded on its own (the system prompt and its
    line break too), then ``sep_token``."""
    encode = tokenizer.encode
    opening = _erniekit_system(tokenizer, system) if system else []
    prompt = opening + encode(USER_PREFIX) + encode(question.strip()) + encode("\n" + ASSISTANT_PREFIX)
    return prompt, encode(answer.strip()) + [tokenizer.special_ids["sep_token"]]


@dataclasses.dataclass(frozen=True)
class TurnEncoding:
    """How a conversation becomes ids: ``turn`` gives one turn's prompt and answer ids (the system
    prompt opening the first), ``system`` a system prompt with no turn after it."""

    turn: Callable[[Ernie45Tokenizer, Optional[str], str, str], Tuple[List[int], List[int]]]
    system: Callable[[Ernie45Tokenizer, str], List[int]]


# a ChatFieldReader's ``chat_encoding``
TURN_ENCODINGS: Dict[str, TurnEncoding] = {"template": TurnEncoding(_template_turn, _template_system),
                                           "erniekit": TurnEncoding(_erniekit_turn, _erniekit_system)}


def encode_conversation(tokenizer: Ernie45Tokenizer, system: Optional[str], turns: Sequence[Tuple[str, str]],
                        learn_turns: Optional[Sequence[bool]] = None, max_length: Optional[int] = None,
                        encoding: str = "template") -> EncodedConversation:
    """``turns`` of (question, answer) after an optional system prompt; ``learn_turns[i]`` says
    whether turn ``i``'s answer counts in the loss (all by default). With ``max_length``, only the
    first turns that fit in it (each turn encoded once; none: an empty conversation). ``encoding``:
    a key of ``TURN_ENCODINGS``."""
    turn_ids = TURN_ENCODINGS[encoding].turn
    ids = [tokenizer.special_ids["cls_token"]]
    learn = [False]
    for index, (question, answer) in enumerate(turns):
        prompt, reply = turn_ids(tokenizer, system if index == 0 else None, question, answer)
        if max_length is not None and len(ids) + len(prompt) + len(reply) > max_length:
            if index == 0:
                return EncodedConversation([], [])
            break
        counts = True if learn_turns is None else bool(learn_turns[index])
        ids += prompt + reply
        learn += [False] * len(prompt) + [counts] * len(reply)
    if system and not turns:
        prompt = TURN_ENCODINGS[encoding].system(tokenizer, system)
        ids += prompt
        learn += [False] * len(prompt)
    return EncodedConversation(ids, learn)


def encode_prompt(tokenizer: Ernie45Tokenizer, system: Optional[str], history: Sequence[Tuple[str, str]],
                  question: str, encoding: str = "template") -> List[int]:
    """Ids of a prompt for the model to answer ``question`` after ``history``, split into prompt
    and answer parts as ``encode_conversation`` splits them in training."""
    encoded = encode_conversation(tokenizer, system, list(history) + [(question, "")], encoding=encoding)
    sep_id = tokenizer.special_ids["sep_token"]
    assert encoded.ids[-1] == sep_id  # the empty answer's closing sep_token
    return encoded.ids[:-1]


def fit_prompt(tokenizer: Ernie45Tokenizer, system: Optional[str], history: Sequence[Tuple[str, str]], question: str,
               max_length: int, encoding: str = "template") -> Tuple[List[int], int]:
    """``encode_prompt`` with the latest turns of ``history`` that fit in ``max_length`` tokens,
    and how many turns were left out; ``([], n)`` when the question alone does not fit.

    Linear in what it reads: turns are encoded once each, newest first, and no further back than
    the length allows (a conversation of 5,000 turns costs what its last few cost). Only the first
    kept turn carries the system prompt; where one is set, which turn that can be is found by
    bisection (a few encodings of the system prompt, not one per turn dropped)."""
    turn_ids = TURN_ENCODINGS[encoding].turn
    asked, empty_answer = turn_ids(tokenizer, None, question, "")
    question_ids = asked + empty_answer[:-1]  # the empty answer's closing sep_token left out
    kept: List[List[int]] = []  # the newest turns that fit, newest first (without the system prompt)
    used = 1 + len(question_ids)  # cls and the question
    for question_before, answer in reversed(history):
        prompt, reply = turn_ids(tokenizer, None, question_before, answer)
        if used + len(prompt) + len(reply) > max_length:
            break
        kept.append(prompt + reply)
        used += len(prompt) + len(reply)

    def opened_at(first: int) -> List[int]:
        """The prompt when turn ``first`` of the kept (0: the oldest kept) opens it, with the system prompt."""
        start = len(history) - len(kept) + first
        if first == len(kept):
            return encode_prompt(tokenizer, system, [], question, encoding)
        prompt, reply = turn_ids(tokenizer, system, *history[start])
        later = [token for ids in reversed(kept[:len(kept) - first - 1]) for token in ids]  # oldest first
        return [tokenizer.special_ids["cls_token"]] + prompt + reply + later + question_ids

    low, high = 0, (len(kept) if system else 0)  # the earliest opening turn that fits is in [low, high]
    while low < high:
        middle = (low + high) // 2
        if len(opened_at(middle)) <= max_length:
            high = middle
        else:
            low = middle + 1
    ids = opened_at(low)
    if len(ids) > max_length:
        return [], len(history)
    return ids, len(history) - (len(kept) - low)
