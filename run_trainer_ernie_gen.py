"""ERNIE-kit's name for training its generation task (``run_trainer.py`` under another name):
``python run_trainer_ernie_gen.py --param_path examples/cls_ernie_gen_infilling_ch.json``."""
import os
import sys

os.environ.setdefault("GLOG_minloglevel", "2")
os.environ.setdefault("GLOG_v", "0")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from wenxin.cli import train_main  # noqa: E402

if __name__ == "__main__":
    sys.exit(train_main())
