"""ERNIE 4.5's tokenizer and chat format against PaddleFormers' answers on the same folder
(``tests/fixtures/make_ernie45_reference.py`` writes both)."""
import json
import os
import shutil

import pytest

pytest.importorskip("sentencepiece")

from wenxin.common.errors import ConfigError  # noqa: E402
from wenxin.data.chat_format import Message, encode_conversation, encode_prompt, render  # noqa: E402
from wenxin.data.ernie45_tokenizer import Ernie45Tokenizer  # noqa: E402

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "ernie45")
FOLDER = os.path.join(FIXTURES, "tied")
with open(os.path.join(FIXTURES, "tokenizer_reference.json"), encoding="utf-8") as f:
    REFERENCE = json.load(f)


@pytest.fixture(scope="module")
def tokenizer():
    return Ernie45Tokenizer(FOLDER)


def test_ids_equal_paddleformers_on_mixed_text(tokenizer):
    assert len(REFERENCE["texts"]) >= 10
    for text, expected in zip(REFERENCE["texts"], REFERENCE["ids"]):
        assert tokenizer.encode(text) == expected, text


def test_special_token_ids_equal_paddleformers(tokenizer):
    assert tokenizer.special_ids == REFERENCE["special_ids"]


def test_decoding_equals_paddleformers(tokenizer):
    for row in REFERENCE["decoded"]:
        assert tokenizer.decode(row["ids"]) == row["text"]
        assert tokenizer.decode(row["ids"], skip_special_tokens=True) == row["skipped"]


def test_chat_template_text_and_ids_equal_paddleformers(tokenizer):
    for chat in REFERENCE["chats"]:
        messages = [Message(m["role"], m["content"]) for m in chat["messages"]]
        text = render(messages, chat["add_generation_prompt"])
        assert text == chat["text"]
        assert tokenizer.encode(text) == chat["ids"]
    assert tokenizer.chat_template is not None and "Assistant: " in tokenizer.chat_template


def test_conversation_marks_only_answers_and_splits_where_generation_starts(tokenizer):
    turns = [("我们如何减少用水？", "使用节水装置。"), ("还有别的建议吗？", "收集雨水 and reuse it.")]
    encoded = encode_conversation(tokenizer, "你是一个生活小助理", turns, learn_turns=[False, True])
    sep = tokenizer.special_ids["sep_token"]
    assert len(encoded.ids) == len(encoded.learn) and encoded.ids[0] == tokenizer.special_ids["cls_token"]
    learned = [i for i, flag in zip(encoded.ids, encoded.learn) if flag]
    assert learned == tokenizer.encode("收集雨水 and reuse it.") + [sep]
    # the text the ids spell is what the template renders for the whole conversation
    messages = [Message("system", "你是一个生活小助理")] + [Message(role, text) for q, a in turns
                                                    for role, text in (("user", q), ("assistant", a))]
    assert tokenizer.decode(encoded.ids) == render(messages, add_generation_prompt=False)
    # a prompt for the second answer is exactly the training ids before that answer
    prompt = encode_prompt(tokenizer, "你是一个生活小助理", turns[:1], turns[1][0])
    first_learned = encoded.learn.index(True)
    assert prompt == encoded.ids[:first_learned]
    assert tokenizer.decode(prompt) == render(messages[:3] + [Message("user", turns[1][0])])


CONVERSATIONS = [("你是一个生活小助理", [(" 我们如何减少用水？\n", "使用节水装置。 "), ("还有别的建议吗？", " 收集雨水 and reuse it.")]),
                 (None, [("hello world", "你好 world"), ("what is 1+1?", "2")]),
                 ("  system with spaces  ", [("q", "a")])]


@pytest.mark.parametrize("system, turns", CONVERSATIONS)
def test_erniekit_encoding_tokenizes_each_part_apart_as_erniekits_sft_reader(tokenizer, system, turns):
    # ERNIEKit's KnowledgeBasedSFTReader (ernie/dataset/text_sft_reader/finetuning.py): the begin token, the system
    # prompt and "\n" apart, then per turn "User: ", the stripped question, "\nAssistant: ", the stripped answer and
    # the end-of-turn token; written here from SentencePiece's pieces directly
    sp = tokenizer.processor
    pieces = [sp.EncodeAsIds(system) + sp.EncodeAsIds("\n") if system else []]
    expected, learned = [tokenizer.special_ids["cls_token"]] + pieces[0], []
    for question, answer in turns:
        expected += sp.EncodeAsIds("User: ") + sp.EncodeAsIds(question.strip()) + sp.EncodeAsIds("\nAssistant: ")
        reply = sp.EncodeAsIds(answer.strip()) + [tokenizer.special_ids["sep_token"]]
        expected += reply
        learned += reply
    encoded = encode_conversation(tokenizer, system, turns, encoding="erniekit")
    assert encoded.ids == expected
    assert [i for i, flag in zip(encoded.ids, encoded.learn) if flag] == learned


@pytest.mark.parametrize("encoding", ["template", "erniekit"])
@pytest.mark.parametrize("system, turns", CONVERSATIONS)
def test_a_served_prompt_is_the_training_ids_before_the_answer(tokenizer, system, turns, encoding):
    # train/serve agreement: for every turn, the prompt serving encodes (the history, then the question) is exactly
    # what training fed the model before that turn's answer
    encoded = encode_conversation(tokenizer, system, turns, encoding=encoding)
    starts = [i for i in range(1, len(encoded.learn)) if encoded.learn[i] and not encoded.learn[i - 1]]
    for turn, start in enumerate(starts):
        assert encode_prompt(tokenizer, system, turns[:turn], turns[turn][0], encoding) == encoded.ids[:start]


def test_the_two_encodings_differ_where_sentencepiece_merges_across_the_parts(tokenizer):
    # the same text, other ids: whole, "User: hello" ends in the piece "▁hello"; apart, "User: " ends in "▁"
    template = encode_conversation(tokenizer, None, [("hello world", "a")])
    erniekit = encode_conversation(tokenizer, None, [("hello world", "a")], encoding="erniekit")
    assert tokenizer.decode(template.ids) == tokenizer.decode(erniekit.ids)
    assert "\u2581hello" in tokenizer.pieces(template.ids) and "\u2581hello" not in tokenizer.pieces(erniekit.ids)


def test_stop_ids_are_end_of_turn_and_end_of_text(tokenizer):
    assert tokenizer.stop_ids() == sorted({REFERENCE["special_ids"]["sep_token"], REFERENCE["special_ids"]["eos_token"]})


def test_added_tokens_are_whole_tokens_with_their_ids(tmp_path):
    for name in os.listdir(FOLDER):
        if name.startswith("tokenizer") or name.endswith("tokens_map.json"):
            shutil.copy(os.path.join(FOLDER, name), tmp_path / name)
    (tmp_path / "added_tokens.json").write_text(json.dumps({"<|IMAGE_START|>": 600, "<tool>": 601}))
    tokenizer = Ernie45Tokenizer(str(tmp_path))
    ids = tokenizer.encode("a<tool>b<|IMAGE_START|>")
    assert ids[1] == 601 and ids[-1] == 600 and tokenizer.vocab_size == 602
    assert tokenizer.decode(ids) == "a<tool>b<|IMAGE_START|>"


@pytest.mark.parametrize("damage, message", [
    (lambda d: os.remove(d / "tokenizer.model"), "no tokenizer.model"),
    (lambda d: (d / "tokenizer.model").write_bytes(b"not a model"), "not a SentencePiece model"),
    (lambda d: (d / "tokenizer_config.json").write_text("{broken"), "tokenizer_config.json: not a readable JSON"),
    (lambda d: (d / "tokenizer_config.json").write_text('{"cls_token": 5}'), "tokenizer_config.json: cls_token"),
    (lambda d: (d / "added_tokens.json").write_text('{"<x>": "7"}'), "added_tokens.json: '<x>'"),
])
def test_broken_tokenizer_files_name_the_file(tmp_path, damage, message):
    for name in ("tokenizer.model", "tokenizer_config.json"):
        shutil.copy(os.path.join(FOLDER, name), tmp_path / name)
    damage(tmp_path)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        Ernie45Tokenizer(str(tmp_path))


def test_the_template_wenxin_writes_is_the_one_paddleformers_rendered():
    from wenxin.data.chat_format import CHAT_TEMPLATE
    with open(os.path.join(FOLDER, "tokenizer_config.json"), encoding="utf-8") as f:
        assert json.load(f)["chat_template"] == CHAT_TEMPLATE
