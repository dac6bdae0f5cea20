"""Prepare the idiom generation example: Chinese four-character idioms (成语) written from their
pinyin, from the ``emoji-chengyu`` package (MIT licensed; ``emoji_chengyu/data/chengyu.json``,
30,895 idioms with tone-marked pinyin).

Each row pairs an idiom's pinyin, its syllables numbered by tone (``ā bí dì yù`` becomes
``a1 bi2 di4 yu4``), with the idiom: a sequence-to-sequence task in which one syllable has many
characters (``yi4``: 意, 义, 亦, 异, 易, ...) and the idiom around it decides which. The 30,302
idioms with one syllable per character (each idiom once) are shuffled with a fixed seed into test
(2,000), dev (500) and train (the rest); the vocabulary holds the special tokens, every training
syllable and every training character; the encoder is a small ERNIE trained from random
initialization by ``examples/text_generation_idiom.json``.

    pip install emoji-chengyu
    python examples/prepare_idiom_data.py [--output examples/data/idiom]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import unicodedata
from typing import List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
SPECIALS = ["[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]"]
SPLITS = (("test", 0, 2000), ("dev", 2000, 2500), ("train", 2500, None))  # (name, first row, end)
TONE_MARKS = {"\u0304": "1", "\u0301": "2", "\u030c": "3", "\u0300": "4"}  # combining macron, acute, caron, grave
ENCODER = {"hidden_size": 128, "num_hidden_layers": 3, "num_attention_heads": 4, "intermediate_size": 512,
           "max_position_embeddings": 64, "type_vocab_size": 2, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
           "attention_probs_dropout_prob": 0.1, "initializer_range": 0.02, "layer_norm_eps": 1e-12,
           "pad_token_id": 0, "model_type": "ernie"}


def numbered_syllable(syllable: str) -> str:
    """``lǜ`` -> ``lv4``, ``ā`` -> ``a1``, ``de`` -> ``de5`` (the neutral tone is 5)."""
    tone, letters = "5", []
    for char in unicodedata.normalize("NFD", syllable.lower()):
        if char in TONE_MARKS:
            tone = TONE_MARKS[char]
        elif char == "\u0308":  # the diaeresis of ü: u + diaeresis -> v
            letters[-1] = "v"
        else:
            letters.append(char)
    return "".join(letters) + tone


def idiom_rows(path: str) -> List[Tuple[str, str]]:
    """(numbered pinyin, idiom) for each idiom whose pinyin has one syllable per character, the
    first reading of an idiom listed twice."""
    rows, seen = [], set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            entry = json.loads(line)
            syllables = [numbered_syllable(s) for s in entry["pinyin"].split()]
            if entry["word"] not in seen and len(syllables) == len(entry["word"]):
                seen.add(entry["word"])
                rows.append((" ".join(syllables), entry["word"]))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", default=os.path.join(HERE, "data", "idiom"))
    args = parser.parse_args()
    try:
        from importlib.resources import files

        source = str(files("emoji_chengyu") / "data" / "chengyu.json")
    except ImportError:
        sys.exit("error: the emoji-chengyu package is needed for the example data: pip install emoji-chengyu")
    rows = idiom_rows(source)
    random.Random(0).shuffle(rows)
    os.makedirs(args.output, exist_ok=True)
    for split, first, end in SPLITS:
        with open(os.path.join(args.output, f"{split}.tsv"), "w", encoding="utf-8") as f:
            f.write("pinyin\tidiom\n")
            f.writelines(f"{pinyin}\t{idiom}\n" for pinyin, idiom in rows[first:end])
    train = rows[SPLITS[-1][1]:]
    syllables = sorted({s for pinyin, _ in train for s in pinyin.split()})
    characters = sorted({c for _, idiom in train for c in idiom})
    vocab = SPECIALS + syllables + characters
    with open(os.path.join(args.output, "vocab.txt"), "w", encoding="utf-8") as f:
        f.writelines(token + "\n" for token in vocab)
    with open(os.path.join(args.output, "config.json"), "w", encoding="utf-8") as f:
        json.dump({**ENCODER, "vocab_size": len(vocab)}, f, indent=2)
    sizes = ", ".join(f"{split}.tsv ({len(rows[first:end])} rows)" for split, first, end in SPLITS)
    print(f"wrote {args.output}: {sizes}, vocab.txt ({len(syllables)} syllables, {len(characters)} characters) "
          "and config.json (a small ERNIE)")


if __name__ == "__main__":
    main()
