"""``python3 -m hangar_driver``: the sandbox's hangar-driver process (see ``hangar_driver.main``)."""

import sys

from .main import main

if __name__ == "__main__":
    if sys.argv[1:2] == ["--self-check"]:
        from .selfcheck import run

        sys.exit(run(sys.argv[2:]))
    sys.exit(main())
