"""Lines about what the process settings set up: kept once, handed out once, in order."""
import json
import os
import subprocess
import sys

from wenxin.common import allocator, startup_notes


def test_notes_are_handed_out_once_in_order():
    startup_notes.take()  # whatever this test process's import left
    startup_notes.add("first")
    startup_notes.add(None)
    startup_notes.add("")
    startup_notes.add("second")
    assert startup_notes.take() == ["first", "second"]
    assert startup_notes.take() == []


def test_the_process_settings_leave_the_allocator_note_for_the_first_command():
    env = {k: v for k, v in os.environ.items()
           if k not in (allocator.SWITCH, "WENXIN_PROCESS_SETTINGS", *allocator.USER_VARIABLES)}
    code = ("import json, wenxin\nfrom wenxin.common import startup_notes\n"
            "from wenxin.common.process_settings import apply_process_settings\n"
            "assert startup_notes.take() == []  # importing wenxin sets nothing up\n"
            "apply_process_settings(); apply_process_settings()  # once per process\n"
            "print(json.dumps([startup_notes.take(), startup_notes.take()]))")
    first, second = json.loads(subprocess.run([sys.executable, "-c", code], env=env, check=True,
                                              capture_output=True, text=True).stdout)
    assert second == []
    if allocator.glibc() is not None:
        assert any(allocator.SWITCH in note for note in first), first
    env[allocator.SWITCH] = "0"
    first, _ = json.loads(subprocess.run([sys.executable, "-c", code], env=env, check=True,
                                         capture_output=True, text=True).stdout)
    assert not any(allocator.SWITCH in note for note in first), first
