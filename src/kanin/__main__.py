import sys

from kanin.cli.main import main

sys.exit(main())
