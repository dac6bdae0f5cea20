"""The example task files and their data-preparation scripts (installed as ``wenxin.examples``;
``wenxin examples DIR`` copies them into ``DIR/examples``)."""
