"""Train a task: ``python run_trainer.py --param_path examples/<task>.json [--set key.path=value]``."""
import os
import sys

os.environ.setdefault("GLOG_minloglevel", "2")
os.environ.setdefault("GLOG_v", "0")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from wenxin.cli import train_main  # noqa: E402

if __name__ == "__main__":
    sys.exit(train_main())
