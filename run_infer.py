"""Predict raw text with an exported model: ``python run_infer.py --param_path infer.json``."""
import os
import sys

os.environ.setdefault("GLOG_minloglevel", "2")
os.environ.setdefault("GLOG_v", "0")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from wenxin.cli import infer_main  # noqa: E402

if __name__ == "__main__":
    sys.exit(infer_main())
