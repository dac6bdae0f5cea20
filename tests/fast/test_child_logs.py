"""The one line a sweep or the studio reports for a failed child: its last error line."""
from wenxin.common.child_logs import last_error


def test_the_last_error_line_else_the_last_line(tmp_path):
    log = tmp_path / "run.log"
    assert last_error(str(log)) == ""  # no log
    log.write_text("loading\nerror: data/train.tsv:3: 2 columns, expected 3\nstill going\n", encoding="utf-8")
    assert last_error(str(log)) == "error: data/train.tsv:3: 2 columns, expected 3"
    log.write_text("Traceback (most recent call last):\n  File x\nValueError: bad shape\n\n", encoding="utf-8")
    assert last_error(str(log)) == "ValueError: bad shape"
    log.write_text("step 1\nstep 2\n", encoding="utf-8")
    assert last_error(str(log)) == "step 2"
    log.write_text("x" * 100_000 + "\nerror: " + "y" * 500 + "\n", encoding="utf-8")
    assert last_error(str(log)) == ("error: " + "y" * 500)[:300]
