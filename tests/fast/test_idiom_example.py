"""The idiom example's data preparation and baselines (examples/prepare_idiom_data.py,
examples/idiom_baselines.py) on small made-up rows."""
import json

from examples.idiom_baselines import bigram, unigram
from examples.prepare_idiom_data import idiom_rows, numbered_syllable


def test_tone_marks_become_numbers():
    cases = {"ā": "a1", "bí": "bi2", "dǐ": "di3", "yù": "yu4", "de": "de5", "lǜ": "lv4", "nǚ": "nv3",
             "lüè": "lve4", "zhuāng": "zhuang1", "Ér": "er2"}
    assert {s: numbered_syllable(s) for s in cases} == cases


def test_rows_keep_one_reading_an_idiom_with_one_syllable_a_character(tmp_path):
    path = tmp_path / "chengyu.json"
    entries = [{"word": "阿鼻地狱", "pinyin": "ā bí dì yù"}, {"word": "阿鼻地狱", "pinyin": "ā bí dì yǜ"},
               {"word": "一丝不苟", "pinyin": "yī sī bù gǒu"}, {"word": "不三不四", "pinyin": "bù sān"}]
    path.write_text("\n".join(json.dumps(e, ensure_ascii=False) for e in entries) + "\n", encoding="utf-8")
    assert idiom_rows(str(path)) == [("a1 bi2 di4 yu4", "阿鼻地狱"), ("yi1 si1 bu4 gou3", "一丝不苟")]


def test_the_baselines_on_a_tiny_set():
    train = [(["yi1", "xin1", "yi1", "yi4"], "一心一意"), (["yi4", "qi4", "feng1", "fa1"], "意气风发"),
             (["yi4", "bu4", "rong2", "ci2"], "义不容辞"), (["yi4", "bu4", "rong2", "ci2"], "义不容辞"),
             (["yi4", "qi4", "yong4", "shi4"], "意气用事"), (["yi4", "wu4"], "义务"), (["yi4", "wu4"], "义务")]
    test = [(["yi4", "qi4", "feng1", "fa1"], "意气风发"), (["yi4", "bu4", "ci2"], "义不辞")]
    # alone, yi4 is most often 义; after nothing, before 气, the bigram model knows it is 意
    assert unigram(train, test) == ["义气风发", "义不辞"]
    assert bigram(train, test) == ["意气风发", "义不辞"]
