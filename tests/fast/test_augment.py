"""Augmentation for distillation (``wenxin.data.augment``, ``wenxin augment``): Tang et al.'s three
strategies with their probabilities, repeats dropped, deterministic for a seed."""
from __future__ import annotations

import collections

import pytest

from wenxin.common.errors import ConfigError
from wenxin.data.augment import UNK, AugmentSettings, augment, parse_tagged, teacher_text


def test_tagged_words_are_parsed():
    assert parse_tagged("好/a 书/n a/b/c x/ /y plain") == [("好", "a"), ("书", "n"), ("a/b", "c"), ("x/", None),
                                                           ("/y", None), ("plain", None)]


def test_each_strategy_acts_at_its_rate_and_nothing_else_happens():
    sentences = [[(f"w{i}", "n" if i % 2 else "v") for i in range(10)] for _ in range(400)]
    words = {w for sentence in sentences for w, _ in sentence}
    settings = AugmentSettings(copies=1, unk=0.2, pos=0.3, ngram=0.0, seed=3)
    changes = collections.Counter()
    total = 0
    for index, copy in augment(sentences, settings):
        assert len(copy) == 10
        for original, word in zip(sentences[index], copy):
            total += 1
            if word == UNK:
                changes["unk"] += 1
            elif word != original[0]:
                assert word in words and (int(word[1:]) % 2 == int(original[0][1:]) % 2)  # same part of speech
                changes["pos"] += 1
    assert total > 3000
    assert abs(changes["unk"] / total - 0.2) < 0.03
    assert abs(changes["pos"] / total - 0.3 * 4 / 5) < 0.04  # a draw of the word itself changes nothing


def test_ngram_sampling_keeps_a_span_and_repeats_are_dropped():
    sentence = [(w, None) for w in "a b c d e f g h".split()]
    copies = [words for _, words in augment([sentence], AugmentSettings(copies=200, unk=0.0, pos=0.0, ngram=1.0,
                                                                        max_ngram=3))]
    text = " ".join(w for w, _ in sentence)
    assert copies and all(1 <= len(c) <= 3 and " ".join(c) in text for c in copies)
    assert len({tuple(c) for c in copies}) == len(copies) and ["a", "b", "c", "d", "e", "f", "g", "h"] not in copies
    again = [words for _, words in augment([sentence], AugmentSettings(copies=200, unk=0.0, pos=0.0, ngram=1.0,
                                                                       max_ngram=3))]
    assert again == copies


def test_bad_settings_and_untagged_text_with_pos_replacement():
    with pytest.raises(ConfigError, match="--ngram: 1.5 is not a probability"):
        list(augment([[("a", None)]], AugmentSettings(ngram=1.5)))
    with pytest.raises(ConfigError, match="needs words tagged word/TAG"):
        list(augment([[("a", None)]], AugmentSettings(pos=0.1)))
    assert teacher_text(["好", UNK, "书"], "") == "好书"


def test_the_command_writes_erniekits_unlabeled_lines(tmp_path):
    from wenxin.cli import main
    source = tmp_path / "train.tsv"
    source.write_text("好/a 书/n 很/d 好/a\t1\n\n这/r 个/q 差/a\t0\n", encoding="utf-8")
    out = tmp_path / "aug" / "part.0"  # its folder is made
    assert main(["augment", "--input", str(source), "--output", str(out), "--copies", "10", "--seed", "2"]) == 0
    lines = out.read_text(encoding="utf-8").splitlines()
    assert lines and all(len(line.split("\t")) == 2 for line in lines)
    for line in lines:
        student, teacher = line.split("\t")
        assert teacher == "".join(w for w in student.split() if w != UNK)
    assert main(["augment", "--input", str(source), "--output", str(out), "--column", "3"]) != 0
