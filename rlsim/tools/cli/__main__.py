"""`python -m rlsim.tools.cli ...` is `rlsim ...`."""

from rlsim.tools.cli import main

main()
