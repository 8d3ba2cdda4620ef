"""``python -m analysis RESULTS_DIR [--out DIR]`` (see ``analysis.make_artefacts``)."""

import sys

from analysis.make_artefacts import main

if __name__ == "__main__":
    sys.exit(main())
