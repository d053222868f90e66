"""``python -m offrl.cli``: the ``offrl`` command."""

import sys

from . import main

sys.exit(main())
