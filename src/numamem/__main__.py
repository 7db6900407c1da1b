"""``python -m numamem`` is the ``numamem`` command."""

import sys

from numamem.cli.main import main

sys.exit(main())
