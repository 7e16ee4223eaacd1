"""`python -m polyalign.cli` (and `torchrun -m polyalign.cli`): the `polyalign` command."""

from polyalign.cli import main

main()
