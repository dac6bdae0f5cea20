"""``wenxin chat``: a conversation with a chat model in the terminal (``ollama run``'s habit).

The answer streams as its tokens are chosen; the conversation so far is the prompt of the next
answer, made as the service makes it (``openai_chat.conversation_line``: ERNIEKit's SFT line, its
latest turns that fit the model's prompt length kept). Ctrl-C ends the answer being written (what
was written stays in the conversation), not the session; ``/exit`` or Ctrl-D ends the session.
"""
from __future__ import annotations

import sys
from typing import Any, Callable, Dict, List, Optional, TextIO

from wenxin.common.errors import WenxinError
from wenxin.inference.generator import Generator
from wenxin.inference.openai_chat import ChatRequestError, conversation_line

HELP = ("/reset   forget the conversation (the system prompt stays)\n"
        "/system TEXT   a new system prompt (and a new conversation)\n"
        "/exit   end the session (or Ctrl-D); Ctrl-C ends an answer early")
PROMPT = ">>> "


class TerminalChat:
    """One session with ``generator``'s model: ``run`` reads lines with ``read_line`` (``input``;
    EOFError ends the session) and writes the answers to ``out``. ``settings``: the decoding
    settings' changes (``Predictor.settings_for``), checked at the start."""

    def __init__(self, generator: Generator, settings: Dict[str, Any], system: str = "",
                 read_line: Callable[[str], str] = input, out: TextIO = sys.stdout) -> None:
        self.generator, self.read_line, self.out = generator, read_line, out
        self.settings = generator.predictor.settings_for(settings)  # a bad flag: an error before the session
        self.system = system
        self.messages: List[Dict[str, str]] = []

    def run(self) -> None:
        self._write("type a message; /help for the commands\n")
        while True:
            try:
                line = self.read_line(PROMPT)
            except EOFError:
                self._write("\n")
                return
            except KeyboardInterrupt:  # at the prompt: a fresh line, as a shell does
                self._write("\n(Ctrl-D or /exit ends the session)\n")
                continue
            text = line.strip()
            if not text:
                continue
            if text.startswith("/") and self._command(text):
                return
            if not text.startswith("/"):
                self.answer(line)

    def _command(self, text: str) -> bool:
        """A ``/`` command; True: the session ends."""
        name, _, rest = text.partition(" ")
        if name in ("/exit", "/bye", "/quit"):
            return True
        if name == "/reset":
            self.messages = []
            self._write("(the conversation is forgotten)\n")
        elif name == "/system":
            self.system, self.messages = rest.strip(), []
            self._write(f"(system prompt {'set' if self.system else 'cleared'}; a new conversation)\n")
        elif name in ("/help", "/?"):
            self._write(HELP + "\n")
        else:
            self._write(f"unknown command {name}; /help lists them\n")
        return False

    def answer(self, question: str) -> Optional[str]:
        """Stream the answer to ``question`` after the conversation so far; returns its text (None:
        the question could not be asked, and the conversation is as it was)."""
        messages = ([{"role": "system", "content": self.system}] if self.system else []) + self.messages + \
            [{"role": "user", "content": question}]
        try:
            row = [conversation_line(messages)]
            prompt = self.generator.predictor.prompt(row)
        except (WenxinError, ChatRequestError) as e:
            self._write(f"error: {e}\n")
            return None
        text = ""
        try:
            for piece in self.generator.stream_results(row, self.settings, prompt=prompt):
                text += piece.text
                self._write(piece.text)
            self._write("\n")
        except KeyboardInterrupt:
            self._write(" [stopped]\n")
        self.messages += [{"role": "user", "content": question}, {"role": "assistant", "content": text}]
        return text

    def _write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()
