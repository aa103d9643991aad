"""`python -m edge COMMAND`: the same as the `edge` command."""

import sys

from edge.cli import main

sys.exit(main())
