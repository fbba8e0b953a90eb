import sys

from .entry import main

raise SystemExit(main(sys.argv[1:]))
