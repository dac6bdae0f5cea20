"""wenxin's built-in tasks (installed as ``wenxin.tasks``). Each folder is a task package that a
task file names with ``"task": "<folder name>"``; wenxin imports it by its folder."""
