"""``python -m runners.replay trace | calibrate | grid | lab`` (see ``runners.replay.cli``)."""

import sys

from runners.replay.cli import main

sys.exit(main())
