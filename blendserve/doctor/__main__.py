"""`python3 -m blendserve.doctor`: `--before-install` runs with the standard library alone; past that, the
settings are parsed by the `blendserve` entry point."""
import sys

from blendserve.doctor.command import main

if "--before-install" in sys.argv[1:]:
    raise SystemExit(main(sys.argv[1:]))
from blendserve.cli import main as blendserve  # noqa: E402

raise SystemExit(blendserve(["doctor", *sys.argv[1:]]))
