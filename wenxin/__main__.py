"""``python -m wenxin``: the ``wenxin`` command, for environments without its console script."""
import sys

from wenxin.cli import main

if __name__ == "__main__":
    sys.exit(main())
