"""`python -m scheduler.simulator`: the same CLI as `blendserve simulate`."""
import sys

from scheduler.simulator.cli import main

sys.exit(main())
