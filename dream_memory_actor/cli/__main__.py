"""``python -m dream_memory_actor.cli``: the ``dream-memory`` command."""

import sys

from . import main

sys.exit(main())
