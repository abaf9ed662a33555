"""`python -m agentloop.cli`: the `agentloop` command."""

import sys

from agentloop.cli import main

if __name__ == "__main__":
    sys.exit(main())
