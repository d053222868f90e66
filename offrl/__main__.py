"""``python -m offrl``: the ``offrl`` command, for where the console script
is not on the PATH (a virtual environment not activated, a user install)."""

import sys

from offrl.cli import main

sys.exit(main())
