"""`python -m trainctl ...` is the `trainctl` command."""

from trainctl.cli import main

main()
