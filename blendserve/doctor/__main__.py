"""`python3 -m blendserve.doctor`: `--before-install` runs with the standard library alone; past that, with
the deployment's settings, as `blendserve doctor`."""
import sys

from blendserve.doctor.command import main

if "--before-install" in sys.argv[1:]:
    raise SystemExit(main(sys.argv[1:]))
from blendserve.process import load_settings  # noqa: E402

raise SystemExit(main(sys.argv[1:], load_settings()))
