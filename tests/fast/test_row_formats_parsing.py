"""The tests of tests/test_row_formats.py that run no Paddle operation (the fast tier)."""

import csv
import io

import pytest
from wenxin.common.errors import ConfigError, DataError
from wenxin.data.row_formats import still_quoted

from test_row_formats import (  # noqa: F401 (helpers and fixtures)
    CSV_FIELDS,
    FIELDS,
    JSONL_FIELDS,
    bad_rows,
    loaded,
    reader_of,
    write,
)


def test_quoting_rules_follow_pythons_csv_module():
    """A line ends inside a quoted field exactly when Python's csv module reads the next line
    into the same record."""
    cases = ['a,"b', 'a,"b""', 'a,"b"""', '"",x', 'a"b,c', '"a"b,"c', 'x,"y,"z', '"multi', '"a""b","c"', 'a, "b',
             '"', '""', '"""', 'a,', ',"', '"x"",y', '"x""",y']
    for line in cases:
        records = list(csv.reader(io.StringIO(line + "\nnext\n")))
        assert still_quoted(line, False, ",") is (len(records) == 1), line
        assert still_quoted(line, False, ";") is (len(list(csv.reader(io.StringIO(line + "\nnext\n"),
                                                                      delimiter=";"))) == 1), line


def test_malformed_json_lines_are_named_by_line(tmp_path):
    path = write(str(tmp_path / "d.jsonl"),
                 '{"text": "好书", "label": 1}\n'
                 '{"text": "好书", "label": 1\n'  # 2: not JSON
                 '["好书", 1]\n'  # 3: not an object
                 '{"txt": "好书", "label": 1}\n'  # 4: no key
                 '{"text": {"a": 1}, "label": 1}\n'  # 5: an object
                 '{"text": null, "label": 1}\n'  # 6: null
                 '{"text": ["a b", "c"], "label": 1}\n'  # 7: an item holding the separator
                 '{"text": [true], "label": 1}\n'  # 8: an item that is no string
                 '\n'
                 + "[" * 100000 + "\n")  # 10: nested too deeply
    rows, problems = bad_rows(reader_of(path, JSONL_FIELDS, format="jsonl"))
    assert [r[1:] for r in rows] == [(1, ["好书", "1"])]
    assert [p[1] for p in problems] == [2, 3, 4, 5, 6, 7, 8, 10]
    why = {lineno: text for _, lineno, text in problems}
    assert why[2].startswith("not a JSON object (") and "a JSON list, not an object" in why[3]
    assert why[4] == "no key 'text' (the object has 'txt', 'label')"
    assert "key 'text': a JSON dict is not a string" in why[5] and "null is not a string" in why[6]
    assert "item 0 ('a b') is empty or holds the separator ' '" in why[7] and "item 0 is a bool" in why[8]
    with pytest.raises(DataError, match=r"d.jsonl:2: not a JSON object .*\(set skip_bad_lines to skip such lines\)"):
        loaded(path, JSONL_FIELDS, format="jsonl")


def test_malformed_csv_records_are_named_by_their_first_line(tmp_path):
    path = write(str(tmp_path / "d.csv"),
                 'text,label\n'
                 '"好书, 真的",1\n'  # 2
                 '"a ""b""\nc",0\n'  # 3-4: one record
                 'only one column\n'  # 5
                 '"closed"then text,1\n'  # 6: text after a closing quote
                 '好书,1\n'  # 7
                 '"never closed,1\n'  # 8
                 '好书,0\n')
    rows, problems = bad_rows(reader_of(path, CSV_FIELDS, format="csv", has_header=True))
    assert [r[1:] for r in rows] == [(2, ["好书, 真的", "1"]), (3, ['a "b"\nc', "0"]), (7, ["好书", "1"])]
    assert problems == [("d.csv", 5, "1 columns, fewer than the header's 2"),
                        ("d.csv", 6, "not a well-formed CSV record (',' expected after '\"')"),
                        ("d.csv", 8, "the quoted field opened on line 8 is never closed")]
    headerless = write(str(tmp_path / "h.csv"), '"a, b",1\nc,1,extra\n')
    rows, problems = bad_rows(reader_of(headerless, CSV_FIELDS, format="csv"))
    assert [r[1:] for r in rows] == [(1, ["a, b", "1"])]
    assert problems == [("h.csv", 2, "expected 2 columns (text_a, label), got 3")]
    wide = write(str(tmp_path / "w.csv"), 'text,label\n"a, b",1\nc,1,extra\n')
    rows, problems = bad_rows(reader_of(wide, CSV_FIELDS, format="csv", has_header=True))
    assert [r[1:] for r in rows] == [(2, ["a, b", "1"])]
    assert problems == [("w.csv", 3, "3 columns, more than the header's 2")]
    semicolons = write(str(tmp_path / "s.csv"), 'label;text\n1;"a;b"\n')
    rows, _ = bad_rows(reader_of(semicolons, CSV_FIELDS, format="csv", has_header=True, separator=";"))
    assert [r[1:] for r in rows] == [(2, ["a;b", "1"])]


def test_a_runaway_quote_is_cut_at_max_line_bytes(tmp_path):
    path = write(str(tmp_path / "d.csv"), '"opened,1\n' + "x,1\n" * 100 + "y,0\n")
    rows, problems = bad_rows(reader_of(path, CSV_FIELDS, format="csv", max_line_bytes=64))
    assert problems[0][1] == 1 and "a record longer than 64 bytes" in problems[0][2]
    assert "the quoted field opened on line 1 is not closed" in problems[0][2]
    assert rows and all(r[2] in (["x", "1"], ["y", "0"]) for r in rows)


def test_format_settings_that_cannot_work_are_config_errors(tmp_path):
    path = write(str(tmp_path / "d.csv"), "text,label\n好书,1\n")
    with pytest.raises(DataError, match=r"d.csv:1: the header has no column 'title' \(field 'text_a', its column\); "
                                        r"the columns are 'text', 'label'"):
        loaded(path, [dict(FIELDS[0], column="title"), FIELDS[1]], format="csv", has_header=True)
    with pytest.raises(ConfigError, match=r"dataset_reader.train_reader.config.has_header: JSON lines have no header"):
        reader_of(path, format="jsonl", has_header=True)
    with pytest.raises(ConfigError, match=r"dataset_reader.train_reader.config.separator: '::': a CSV delimiter is "
                                          r"one character"):
        reader_of(path, format="csv", separator="::")
    with pytest.raises(ConfigError, match=r"dataset_reader.train_reader.config.format: unknown data format type "
                                          r"'json' \(did you mean 'jsonl'\?\)"):
        reader_of(path, format="json")
