"""`python -m serving ...` is the `jevmem` command line."""

from serving.cli import main

raise SystemExit(main())
