"""`python -m blendserve.simulator`: the same CLI as `blendserve simulate`."""
import sys

from blendserve.simulator.cli import main

sys.exit(main())
