from blendserve.cli import main

raise SystemExit(main())
