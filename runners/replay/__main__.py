"""``python -m runners.replay trace | calibrate | grid | lab`` (see ``runners.replay.commands``)."""

import sys

from runners.replay.commands import main

sys.exit(main())
