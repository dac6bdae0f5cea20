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
"""
from __future__ import annotations

import dataclasses
from typing import List, Optional, Sequence, Tuple

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


def encode_conversation(tokenizer: Ernie45Tokenizer, system: Optional[str], turns: Sequence[Tuple[str, str]],
                        learn_turns: Optional[Sequence[bool]] = None) -> EncodedConversation:
    """``turns`` of (question, answer) after an optional system prompt; ``learn_turns[i]`` says
    whether turn ``i``'s answer counts in the loss (all by default)."""
    sep_token = tokenizer.specials["sep_token"]
    ids = [tokenizer.special_ids["cls_token"]]
    learn = [False]
    pending = system + "\n" if system else ""
    for index, (question, answer) in enumerate(turns):
        prompt = tokenizer.encode(pending + USER_PREFIX + question + "\n" + ASSISTANT_PREFIX)
        reply = tokenizer.encode(answer + sep_token)
        counts = True if learn_turns is None else bool(learn_turns[index])
        ids += prompt + reply
        learn += [False] * len(prompt) + [counts] * len(reply)
        pending = ""
    if pending:
        prompt = tokenizer.encode(pending)
        ids += prompt
        learn += [False] * len(prompt)
    return EncodedConversation(ids, learn)


def encode_prompt(tokenizer: Ernie45Tokenizer, system: Optional[str], history: Sequence[Tuple[str, str]],
                  question: str) -> List[int]:
    """Ids of a prompt for the model to answer ``question`` after ``history``, split into prompt
    and answer parts as ``encode_conversation`` splits them in training."""
    encoded = encode_conversation(tokenizer, system, list(history) + [(question, "")])
    sep_id = tokenizer.special_ids["sep_token"]
    assert encoded.ids[-1] == sep_id  # the empty answer's closing sep_token
    return encoded.ids[:-1]
