from tfsim.cli import main

raise SystemExit(main())
