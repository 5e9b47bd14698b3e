"""`python -m rlsim.cli ...` is `rlsim ...`."""

from rlsim.cli import main

main()
